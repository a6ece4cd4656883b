"""pytest in a fresh process, for what cannot share this one: the Triton interpreter (read when a
kernel is decorated), a third party's plugin, a usage error to observe. xdist's worker variables
and TRITON_INTERPRET are not inherited; ``env`` adds to the environment. Nor is standard input:
inside an xdist worker it is the worker's channel to its controller.

With ``progress``, each of the child's results is handed to it as it finishes (``progress.py``
in the child; ``as_subtests`` reports them in the calling test), so a child that runs for
minutes is never minutes of silence."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conformance.running import progress as progress_plugin


def run_pytest(root: Path, *args: str, env: dict | None = None, timeout: float = 1800,
               progress: Callable[[dict], None] | None = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith(("PYTEST_XDIST", "TRITON_INTERPRET"))
                   and k != progress_plugin.FD_VARIABLE}
    environment.update(env or {})
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]
    if progress is None:
        return subprocess.run(command, cwd=root, env=environment, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, timeout=timeout, check=False)
    read, write = os.pipe()
    environment[progress_plugin.FD_VARIABLE] = str(write)
    command[3:3] = ["-p", progress_plugin.__name__]
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err, \
            os.fdopen(read, "rb") as results:
        child = subprocess.Popen(command, cwd=root, env=environment, stdout=out, stderr=err,
                                 stdin=subprocess.DEVNULL, pass_fds=(write,), text=True)
        os.close(write)
        try:
            for line in _lines(results, deadline):
                progress(json.loads(line))
            child.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise subprocess.TimeoutExpired(command, timeout) from None
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(command, child.returncode, out.read(), err.read())


def _lines(stream, deadline: float) -> Iterator[bytes]:
    """The stream's lines until it closes; TimeoutExpired past ``deadline``."""
    pending = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([stream], [], [], remaining)[0]:
            raise subprocess.TimeoutExpired("pytest", 0)
        chunk = os.read(stream.fileno(), 65536)
        if not chunk:
            return
        *complete, pending = (pending + chunk).split(b"\n")
        yield from complete


def as_subtests(subtests: pytest.Subtests) -> Callable[[dict], None]:
    """Report each child result as a subtest of the calling test, named by the child's test id:
    pytest prints it as it comes (under xdist too), and a failed one fails the calling test. A
    skip stays the child's (its CUDA-only checks under the interpreter): the run's skip count
    is its own tests'."""

    def report(result: dict) -> None:
        if result["outcome"] == "skipped":
            return
        with subtests.test(msg=result["nodeid"]):
            if result["outcome"] == "failed":
                pytest.fail(result["detail"], pytrace=False)

    return report

"""pytest in a fresh process, for what cannot share this one: the Triton interpreter (read when a
kernel is decorated), a third party's plugin, a usage error to observe. xdist's worker variables
and TRITON_INTERPRET are not inherited; ``env`` adds to the environment. Nor is standard input:
inside an xdist worker it is the worker's channel to its controller."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_pytest(root: Path, *args: str, env: dict | None = None,
               timeout: float = 1800) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith(("PYTEST_XDIST", "TRITON_INTERPRET"))}
    environment.update(env or {})
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=root, env=environment, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout, check=False)

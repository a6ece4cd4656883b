"""Root conftest: its presence puts the repository root on ``sys.path`` (pytest's rootdir
conftest rule), so ``conformance`` and ``examples`` import as packages from any test directory,
with or without an installed ``libreyolo``. It loads the conformance suite's plugin
(``conformance/plugin.py``: the options ``--gpu``, ``--impl``, ``--record``, ``--interpreter``,
``--matrix``, ``--profile``, and the suite's fixtures) for every directory: the suite itself is
``conformance/``, and its own tests (the gate, the options, third-party validation) live in
``tests/conformance/``, as every package's tests live under ``tests/``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from conformance.running.child import as_subtests, run_pytest

ROOT = Path(__file__).resolve().parent
pytest_plugins = ["conformance.plugin"]

#: torch.compile's on-disk caches key a graph by its ops' names, not by what a custom op's fake
#: kernel or registered autograd does (pytorch/pytorch#144344, #160472): a test of our operators
#: compiled in an earlier process could be handed that process's graph and pass with today's
#: autograd broken (benchmarks/NOTES.md). Off for the tests and their child processes, unless
#: set explicitly.
COMPILE_CACHES = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}
for _name, _value in COMPILE_CACHES.items():
    os.environ.setdefault(_name, _value)


def pytest_configure(config):
    """Each xdist worker gets its share of the cores for torch's CPU threads. By default every
    worker starts one thread per core: 15 workers on the H200's 16 cores ran ~240 threads, and
    the CPU references there ran ~90x slower (a record run: 1,277 s before, 122 s after;
    benchmarks/NOTES.md, "Re-record timings"). And torch.compile's on-disk caches follow
    ``COMPILE_CACHES``."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 0:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
    # the configs read the environment when first imported: set them only if that was before
    # now (importing torch._inductor to set them costs every test process a second)
    if (inductor_config := sys.modules.get("torch._inductor.config")) is not None:
        inductor_config.fx_graph_cache = os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] == "1"
    if (functorch_config := sys.modules.get("torch._functorch.config")) is not None:
        functorch_config.enable_autograd_cache = os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] == "1"


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """A parallel run (``-n``) steals work unless ``--dist`` names a mode: xdist's default hands
    each worker fixed batches, and a worker could sit idle at the end while the other still has
    queued tests behind a minutes-long interpreter child. (Ahead of xdist's own hook, which turns
    an unset mode into ``load``.)"""
    if getattr(config.option, "numprocesses", None) and config.option.dist == "no":
        config.option.dist = "worksteal"


def pytest_collection_modifyitems(items):
    """The interpreter children (minutes each, ``interpreter`` marker) start first, so no worker
    starts one as the run ends; the rest keep pytest's order."""
    items.sort(key=lambda item: item.get_closest_marker("interpreter") is None)


@pytest.fixture
def run_under_interpreter(subtests):
    """Run pytest on ``paths`` in a child process with ``TRITON_INTERPRET=1``; fail with its log.

    The variable is read when a Triton kernel is decorated, so interpreted kernels cannot share
    a process with compiled ones (or with a parent that imported them without it). Every test
    file of interpreted checks runs through this one helper. Each child result is reported as
    it finishes, as a subtest of the calling test (minutes of checks, never minutes of silence).
    """

    def run(*paths: str, timeout: int = 1800) -> None:
        pytest.importorskip("triton", reason="the triton extra is not installed")
        result = run_pytest(ROOT, *paths, "-q", env={"TRITON_INTERPRET": "1"}, timeout=timeout,
                            progress=as_subtests(subtests))
        assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]

    return run

"""Fixtures of the benchmark scripts' CPU tests: torch on one thread, the launches stubbed."""

from __future__ import annotations

import functools
import importlib
import pkgutil

import pytest
import torch

import libreyolo.kernels
from libreyolo.kernels import registry


@pytest.fixture(autouse=True)
def one_thread():
    """torch's CPU ops on one thread (a zero fill of 300 KB took 2.5 ms with a thread per core on
    a loaded 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def launches_stubbed(monkeypatch):
    """The providers' CPU path without the launches (``test_host_path.py``'s docstring). The
    registry memoizes its environment checks (``docs/kernels.md``: ``clear_cache()`` re-evaluates
    them), and the Triton providers' check reads ``TRITON_INTERPRET``: cleared on the way in, so
    an earlier "no CUDA device" does not stick, and on the way out, so this test's answer does
    not outlive it in a worker that runs other tests after it. ``triton.jit`` reads the variable
    when a kernel module is imported: the kernel modules are imported first, or one imported
    under the fixture would stay interpreted for the worker's later tests (it failed
    ``test_traced_kernel_writes.py``, which builds the kernels for sm_90)."""
    _import_kernel_modules()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("LIBREYOLO_KERNELS", raising=False)
    from libreyolo.kernels import triton_launch

    monkeypatch.setattr(triton_launch.Launcher, "__call__", lambda self, *tensors: None)
    registry.clear_cache()
    yield
    monkeypatch.undo()
    registry.clear_cache()


@functools.cache
def _import_kernel_modules() -> None:
    """Every Triton kernel module of the package (by convention named ``*kernels``), once: the
    package is walked on the first use of the fixture, not on every test."""
    for module in pkgutil.walk_packages(libreyolo.kernels.__path__, "libreyolo.kernels."):
        if module.name.endswith("kernels"):
            importlib.import_module(module.name)

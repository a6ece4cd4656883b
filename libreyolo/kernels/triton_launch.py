"""Launch a compiled Triton kernel again without ``JITFunction.run``'s per-call bookkeeping.

On the H200, half of a small fake-quant call's host time was Triton's launch path
(``JITFunction.run``: ~66 of ~140 µs under cProfile,
``benchmarks/results/host_h200_2026-12-01_profile.txt``): besides binding and specializing the
arguments, every launch re-checks each global the kernel reads, formats its options into a string
for the cache key, and builds launch metadata for profiling hooks nobody registered.

``launch`` keeps what stays true between calls. The first call of a specialization goes through
``kernel[grid](...)`` (compiling if needed), and the compiled kernel is kept under Triton's own
specialization of the arguments (its binder: dtypes, 16-byte alignment, integer divisibility, so
the key is never coarser than Triton's); later calls bind, look it up and call its launcher.

The full path is kept whenever the shortcut could differ from it: the interpreter
(``TRITON_INTERPRET=1``: no compiled kernel), non-CUDA tensors, a launch hook (a profiler), a
pre-run hook, or a Triton without the internals this relies on (the stack pins triton 3.6.0,
``conformance/stack.toml``; a pin bump is re-recorded on the GPU, which runs this path).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import torch

_COMPILED_ATTRIBUTES = ("run", "function", "packed_metadata")


def launch(kernel, grid: Sequence[int], *args, **kwargs) -> None:
    """``kernel[grid](*args, **kwargs)``, faster from the second call of a specialization on."""
    caches = getattr(kernel, "device_caches", None)
    if caches is None or getattr(kernel, "pre_run_hooks", True) or not _cuda_args(args):
        kernel[grid](*args, **kwargs)
        return
    runtime, driver = _triton()
    if _hooked(runtime.launch_enter_hook) or _hooked(runtime.launch_exit_hook):
        kernel[grid](*args, **kwargs)
        return
    active = driver.active
    device = active.get_current_device()
    bound, specialization, options = caches[device][4](*args, **kwargs)  # Triton's binder
    key = (device, tuple(specialization), tuple(options.items()))
    kept = kernel.__dict__.setdefault("_libreyolo_compiled", {})
    compiled = kept.get(key)
    if compiled is None:
        compiled = kernel[grid](*args, **kwargs)
        if all(hasattr(compiled, a) for a in _COMPILED_ATTRIBUTES):
            kept[key] = compiled
        return
    grid_y = grid[1] if len(grid) > 1 else 1
    grid_z = grid[2] if len(grid) > 2 else 1
    compiled.run(grid[0], grid_y, grid_z, active.get_current_stream(device),
                 compiled.function, compiled.packed_metadata, None, None, None, *bound.values())


@functools.cache
def _triton():
    """Triton's runtime knobs and driver, looked up once (an import per launch costs µs)."""
    from triton import knobs
    from triton.runtime.driver import driver

    return knobs.runtime, driver


def _cuda_args(args: tuple) -> bool:
    """The first tensor argument is on CUDA (a kernel's tensors share one device)."""
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return arg.is_cuda
    return False


def _hooked(chain) -> bool:
    """A launch hook is registered (triton 3.6 keeps an always-present, usually empty chain)."""
    return chain is not None and bool(getattr(chain, "calls", True))


#: Providers that launch through this module list it among their sources: which compiled kernel
#: runs is decided here, so a change here stales their parity records.
SOURCE = str(Path(__file__).resolve())

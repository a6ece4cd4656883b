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
    from triton import knobs
    from triton.runtime.driver import driver

    hooks = knobs.runtime
    if _hooked(hooks.launch_enter_hook) or _hooked(hooks.launch_exit_hook):
        kernel[grid](*args, **kwargs)
        return
    device = driver.active.get_current_device()
    binder = caches[device][4]
    bound, specialization, options = binder(*args, **kwargs)
    key = (device, tuple(specialization), tuple(options.items()))
    compiled = _compiled(kernel).get(key)
    if compiled is None:
        compiled = kernel[grid](*args, **kwargs)
        if all(hasattr(compiled, a) for a in _COMPILED_ATTRIBUTES):
            _compiled(kernel)[key] = compiled
        return
    grid_y = grid[1] if len(grid) > 1 else 1
    grid_z = grid[2] if len(grid) > 2 else 1
    compiled.run(grid[0], grid_y, grid_z, driver.active.get_current_stream(device),
                 compiled.function, compiled.packed_metadata, None, None, None, *bound.values())


def _cuda_args(args: tuple) -> bool:
    """The first tensor argument is on CUDA (a kernel's tensors share one device)."""
    for arg in args:
        if isinstance(arg, torch.Tensor):
            return arg.is_cuda
    return False


def _hooked(chain) -> bool:
    """A launch hook is registered (triton 3.6 keeps an always-present, usually empty chain)."""
    return chain is not None and bool(getattr(chain, "calls", True))


def _compiled(kernel) -> dict:
    """The compiled kernels this module launched, per kernel (kept on the kernel object)."""
    cache = kernel.__dict__.get("_libreyolo_compiled")
    if cache is None:
        cache = kernel.__dict__["_libreyolo_compiled"] = {}
    return cache


#: Providers that launch through this module list it among their sources: which compiled kernel
#: runs is decided here, so a change here stales their parity records.
SOURCE = str(Path(__file__).resolve())

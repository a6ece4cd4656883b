"""Launch a compiled Triton kernel again without ``JITFunction.run``'s per-call bookkeeping.

Half of a small fake-quant call's host time was Triton's launch path (``JITFunction.run``;
``benchmarks/NOTES.md``, "Triton's launch path"): besides binding and specializing the
arguments, every launch re-checks each global the kernel reads, formats its options into a string
for the cache key, and builds launch metadata for profiling hooks nobody registered.

``launch`` keeps what stays true between calls. The first call of a specialization goes through
``kernel[grid](...)`` (compiling if needed), and the compiled kernel is kept under Triton's own
specialization of the arguments (its binder: dtypes, 16-byte alignment, integer divisibility, so
the key is never coarser than Triton's); later calls bind, look it up and call its launcher.

``Launcher`` goes one step further for callers that plan: made once per plan, with every
argument fixed but the tensors, it skips the binder too. What the binder would specialize
differently for a new call is the tensors' 16-byte alignment (the sizes are the plan's, and the
plan fixed the dtypes and the device: see ``Launcher``), so that is what a call checks, with
the current device and the launch hooks; anything else takes ``launch``. It hands Triton's C
launcher each tensor's address as an int, which the launcher takes as is: given a tensor, it
calls back into Python for ``data_ptr()`` and asks the driver (``cuPointerGetAttribute``)
whether that address is device memory, per pointer argument and per launch, which the plan's
device answers once. Where the compiled kernel needs no scratch memory it calls the C launcher
itself, without its Python wrapper (which only allocates scratch). A launch through Triton cost
an autograd step more host time than a torch kernel's (``benchmarks/NOTES.md``, "Triton's launch
path").

While a compiled graph traces an in-tree implementation (``libreyolo.capture.tracing_kernels``:
the tensors are fake), a launch is handed to ``torch.library.wrap_triton`` instead: it becomes a
node of the graph, and the compiled code launches the same kernel itself.

The full path is kept whenever the shortcut could differ from it: the interpreter
(``TRITON_INTERPRET=1``: no compiled kernel), non-CUDA tensors, a launch hook (a profiler), a
pre-run hook, or a Triton without the internals this relies on (the stack pins triton 3.6.0,
``conformance/stack.toml``; a pin bump is re-recorded on the GPU, which runs this path).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from pathlib import Path

import torch

from libreyolo.capture import TRACING

_COMPILED_ATTRIBUTES = ("run", "function", "packed_metadata")


def launch(kernel, grid: Sequence[int], *args, **kwargs) -> None:
    """``kernel[grid](*args, **kwargs)``, faster from the second call of a specialization on."""
    if getattr(TRACING, "on", False):
        _traced_launch(kernel, grid, args, kwargs)
        return
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
    bound, key = _bind(caches, device, args, kwargs)
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


def _traced_launch(kernel, grid, args: tuple, kwargs: dict) -> None:
    """The launch as a node of the graph being traced: ``wrap_triton`` records the kernel, its
    grid and arguments, and inductor's code launches it."""
    torch.library.wrap_triton(kernel)[tuple(grid)](*args, **kwargs)


def _bind(caches, device: int, args, kwargs) -> tuple[dict, tuple]:
    """Triton's binder on these arguments: the bound values, and the key of the compiled kernel
    they specialize to (dtypes, alignment, divisibility, options)."""
    bound, specialization, options = caches[device][4](*args, **kwargs)
    return bound, (device, tuple(specialization), tuple(options.items()))


_UNSEEN = 0  # a Launcher not yet called
_ADDRESS = torch.Tensor.data_ptr


class Launcher:
    """One launch of ``kernel`` on ``grid`` with every argument fixed except the tensors, which
    come first among the positional arguments and which each call passes, in that order.

    A Launcher is made once per plan, on the plan's first call that needs it, and kept in the
    plan's ``launches`` dict under a key naming the launch and whatever else its tensors' dtypes
    depend on (``"backward"`` takes a float32 value gradient, ``"fixed-point backward"`` an int64
    one): ``plan.launches.get(key) or plan.launches.setdefault(key, Launcher(...))``. One place
    for every provider's kept launches (a source rule in ``tests/registry/test_provider_kit.py``
    holds them to it), and they go with their plan, whose cache is bounded: nothing else keeps a
    launch, or needs a cap of its own. The plan's key holds
    each input tensor's dtype and device, the plan allocates the outputs from the inputs, and the
    constants given here (an input kind, a block size) already depend on them: so every call's
    tensors have the first call's dtypes and share its device, and a call checks only what a
    plan cannot fix, each address's 16-byte alignment (Triton specializes on it), that the first
    tensor is on the kept kernel's device, and that no launch hook is set. Checking dtype and
    device per tensor as well cost host time on every call (``benchmarks/NOTES.md``, "Triton's
    launch path"): the plan validated them once.

    The first two calls go through ``launch`` (the second works out the direct relaunch, so a
    plan used once pays nothing for it); later calls relaunch the compiled kernel directly when
    the alignment is as before, the device is the same and no launch hook is set, and through
    ``launch`` otherwise.
    """

    __slots__ = ("_kernel", "_grid", "_fixed", "_kwargs", "_count", "_fast")

    def __init__(self, kernel, grid: Sequence[int], *args, **kwargs) -> None:
        count = next((i for i, a in enumerate(args) if not isinstance(a, torch.Tensor)),
                     len(args))
        if any(isinstance(a, torch.Tensor) for a in args[count:]):
            raise TypeError("Launcher: the kernel's tensor arguments must come first, before "
                            "its fixed arguments (each call passes only the tensors)")
        self._kernel, self._kwargs, self._count = kernel, kwargs, count
        self._grid = (grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1)
        self._fixed = args[count:]  # no tensor: a plan must not keep its first call's memory
        self._fast = _UNSEEN

    def __call__(self, *tensors: torch.Tensor) -> None:
        if len(tensors) != self._count:
            raise ValueError(f"Launcher: {len(tensors)} tensors given, the kernel takes "
                             f"{self._count}")
        if getattr(TRACING, "on", False):
            _traced_launch(self._kernel, self._grid, (*tensors, *self._fixed), self._kwargs)
            return
        fast = self._fast
        if fast:
            launcher, head, tail, device, aligned, runtime, current_device, stream = fast
            addresses = list(map(_ADDRESS, tensors))
            if tensors[0].get_device() == device and (
                    not functools.reduce(operator.or_, addresses) & 15 if aligned is None
                    else [not a & 15 for a in addresses] == aligned):
                enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
                if current_device() == device and not self._kernel.pre_run_hooks \
                        and not (enter is not None and getattr(enter, "calls", True)) \
                        and not (leave is not None and getattr(leave, "calls", True)):
                    launcher(*self._grid, stream(device), *head, *addresses, *tail)
                    return
        args = (*tensors, *self._fixed)
        launch(self._kernel, self._grid, *args, **self._kwargs)
        if fast is _UNSEEN:
            self._fast = None
        elif fast is None:  # worked out after a launch that kept a compiled kernel
            self._fast = _fast_state(self._kernel, args, self._kwargs, self._count)


def _fast_state(kernel, args: tuple, kwargs: dict, count: int):
    """(the launcher to call, its arguments between the stream and the tensors' addresses, the
    kernel's argument values after them, device, the tensors' 16-byte alignment (None: all
    aligned), Triton's runtime knobs, and the current device's and stream's readers) after a
    launch; False when relaunching directly
    is not possible here (the interpreter, non-CUDA tensors, a Triton without these internals);
    None to try again after the next launch (``launch`` took Triton's full path and kept
    nothing: a hook was set)."""
    caches = getattr(kernel, "device_caches", None)
    if caches is None or not hasattr(kernel, "pre_run_hooks") or not _cuda_args(args):
        return False
    if kernel.pre_run_hooks:
        return None
    runtime, driver = _triton()
    active = driver.active
    device = active.get_current_device()
    bound, key = _bind(caches, device, args, kwargs)
    compiled = kernel.__dict__.get("_libreyolo_compiled", {}).get(key)
    if compiled is None:
        return None
    values = list(bound.values())
    if any(values[p] is not args[p] for p in range(count)):
        return False
    aligned = [not args[p].data_ptr() & 15 for p in range(count)]
    launcher, head = _launcher(compiled)
    # the kept values hold no tensor between calls
    return (launcher, head, tuple(values[count:]), device, None if all(aligned) else aligned,
            runtime, _device_reader(active.get_current_device), active.get_current_stream)


def _device_reader(get_current_device):
    """The driver's current-device reader, or torch's C call when that reader is
    ``torch.cuda.current_device`` (triton 3.6's CUDA driver): after a launch CUDA is initialized,
    so its lazy-init check (three Python frames a launch: ``benchmarks/NOTES.md``, "Triton's
    launch path") says
    nothing new."""
    read = getattr(torch._C, "_cuda_getDevice", None)
    return read if read is not None and get_current_device is torch.cuda.current_device \
        else get_current_device


def _launcher(compiled) -> tuple:
    """(callable, arguments after the stream) relaunching ``compiled``: the C launcher itself
    when the kernel needs no scratch memory (triton 3.6's ``CudaLauncher.__call__`` only
    allocates scratch, then calls it with these), else that Python wrapper."""
    run = compiled.run
    metadata = (compiled.packed_metadata, None, None, None)  # launch metadata, enter/exit hooks
    no_scratch = getattr(run, "global_scratch_size", 1) == 0 \
        and getattr(run, "profile_scratch_size", 1) == 0
    if no_scratch and all(hasattr(run, a) for a in ("launch", "launch_cooperative_grid",
                                                     "launch_pdl")):
        return run.launch, (compiled.function, run.launch_cooperative_grid, run.launch_pdl, None,
                            None, *metadata)
    return run, (compiled.function, *metadata)


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

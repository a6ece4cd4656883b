"""Compiled graphs launch the chosen in-tree kernels themselves: the registry decides once, when
the graph is traced, not on every call.

Dynamo keeps a slot call as the slot's operator (``operators``). When AOTAutograd traces that graph
(under ``FunctionalTensorMode``), the rule installed here for each slot's operator asks the
registry which implementation this traced input gets (``registry.choose``: the settings, the
device, the dtypes, shapes and strides, what an eager call's selection reads). An in-tree
implementation registered ``traceable=True`` is then traced in the operator's place: its plan is
made on the fake tensors, and its Triton launches become ``wrap_triton`` nodes of the graph
(``triton_launch``), which inductor's generated code launches itself, CUDA graphs included, with
no registry Python per call. The same kernels on the same arguments: the eager call's bits.

Anything else keeps the opaque operator, whose kernel runs the eager selection on every call: an
implementation whose traced form no CUDA run has validated yet (``traced_on_cuda.toml``, as a
parity record gates an implementation), another's implementation, a CPU input (a slot's reference
stays opaque: inductor would fuse its math into other bits), the Triton interpreter (it launches on
real tensors only), an input no traceable implementation takes, or one whose tracing raised (the
reason is kept).

Dynamo guards each compiled graph on the settings and the registry's generation
(``registry._selection_guard``), so a changed setting or registration recompiles. A kernel
traced into a graph is that graph's: if it fails when the graph runs, the error propagates (no
degrading to the next implementation, as an eager call would). ``decisions()`` says what the last
trace of each operator chose.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Callable
from pathlib import Path

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode

from libreyolo.capture import tracing_kernels

from . import registry, settings
from .providers import IN_TREE
from .slots import Slot

_TRACEABLE_TYPES = (torch.Tensor, FakeTensor, FunctionalTensor)

VALIDATED_FILE = Path(__file__).with_name("traced_on_cuda.toml")


@functools.cache
def validated() -> frozenset[str]:
    """``slot/name`` of the implementations whose traced form a CUDA run validated
    (``traced_on_cuda.toml``): only these are traced."""
    with VALIDATED_FILE.open("rb") as file:
        return frozenset(entry["implementation"] for entry in tomllib.load(file)["traced"])

_decisions: dict[str, str] = {}


def decisions() -> dict[str, str]:
    """Each slot operator traced in this process (``<slot>`` and ``<slot>_backward``) and what
    its last trace chose: ``"traced: <implementation>"`` or ``"opaque: <why>"``."""
    return dict(_decisions)


def install(slot: Slot, library: torch.library.Library, as_called: Callable) -> None:
    """Install the trace-time rules of ``slot``'s operators (``as_called``: the operator's
    arguments as the slot takes them, ``operators._as_called``)."""
    qualified = f"{library.ns}::{slot.name}"
    torch.library.register_torch_dispatch(
        qualified, FunctionalTensorMode, _rule(slot, as_called, backward=False), lib=library)
    if slot.differentiable:
        torch.library.register_torch_dispatch(
            f"{qualified}_backward", FunctionalTensorMode, _rule(slot, as_called, backward=True),
            lib=library)


def _rule(slot: Slot, as_called: Callable, *, backward: bool):
    name = f"{slot.name}_backward" if backward else slot.name

    def rule(mode, func, types, args, kwargs):
        if any(t not in _TRACEABLE_TYPES for t in types):
            return mode.__torch_dispatch__(func, types, args, kwargs)
        with mode, torch.no_grad(), tracing_kernels():
            grad, called = (args[0], args[1:]) if backward else (None, args)
            called_args, called_kwargs = as_called(slot, called, kwargs)
            choice, why = _traceable_choice(slot.name, called_args, called_kwargs, backward)
            if choice is not None:
                try:
                    out = _run(choice, grad, called_args, called_kwargs, backward)
                except torch.OutOfMemoryError:
                    raise
                except Exception as exc:  # noqa: BLE001 - the opaque operator still serves
                    why = f"tracing {choice.impl.name} raised {type(exc).__name__}: {exc}"
                else:
                    _decisions[name] = f"traced: {choice.impl.name}"
                    return _fresh(out, args, kwargs)
        _decisions[name] = f"opaque: {why}"
        return mode.__torch_dispatch__(func, types, args, kwargs)

    rule.__name__ = rule.__qualname__ = f"{name}_traced"
    return rule


def _traceable_choice(op: str, args: tuple, kwargs: dict, backward: bool):
    """``(choice, None)`` when the implementation this input gets is traced in the operator's
    place, else ``(None, why not)``."""
    if settings.interpreting():
        return None, "TRITON_INTERPRET is set (the interpreter launches on real tensors only)"
    choice = registry.choose(op, args, kwargs)
    if choice is None:
        return None, "no implementation takes the traced input"
    impl = choice.impl
    if impl.is_reference:
        return None, "the reference runs it (kept opaque: inductor would fuse it into other bits)"
    if not (impl.traceable and impl.origin == IN_TREE):
        return None, f"{impl.name} ({impl.origin}) is not an in-tree traceable implementation"
    if f"{op}/{impl.name}" not in validated():
        return None, (f"{impl.name}'s traced form has not been validated on CUDA "
                      "(libreyolo/kernels/traced_on_cuda.toml)")
    if backward and impl.backward is None:
        return None, f"{impl.name} declares no backward (the operator recomputes through it)"
    return choice, None


def _run(choice: registry.Choice, grad, args: tuple, kwargs: dict, backward: bool):
    impl = choice.impl
    if not backward:
        return impl.fn(*args, **choice.prepared, **kwargs)
    grads = tuple(impl.backward(grad, *args, **choice.prepared, **kwargs))
    return grads[0] if len(grads) == 1 else grads


def _fresh(out, args: tuple, kwargs: dict):
    """The outputs as the operator's schema has them: none of them an input tensor itself."""
    if isinstance(out, tuple):
        return tuple(_fresh(o, args, kwargs) for o in out)
    inputs = (*args, *kwargs.values())
    return out.clone() if any(out is t for t in inputs) else out

"""Autograd Functions on a kernel's hot path, without the Python torch wraps them in.

A training step calls a deformable-attention layer through ``Function.apply`` and its backward
through ``once_differentiable``, and a decoder layer's whole call is host-bound (tens of µs), so
these wrappers are a visible share of it (``benchmarks/NOTES.md``, "Autograd's Python wrappers").

- ``Function.apply`` (torch/autograd/function.py) is Python around the C ``apply``: it binds
  default arguments when the Function defines ``setup_context`` and, when no functorch transform
  (vmap, grad, jvp) is active, unwraps dead functorch wrappers from the arguments before the C
  call; otherwise it takes functorch's path. :func:`applier` does the same steps for a Function
  without ``setup_context`` with one C call per tensor, and hands every other case to
  ``Function.apply`` itself.
- ``once_differentiable`` enters ``no_grad`` around every backward and, when grad mode is on
  (``create_graph=True``), marks the outputs so that differentiating them again raises. Autograd
  runs a backward with grad mode off unless a graph is to be created, so :func:`once_differentiable`
  calls the backward as it is then, and through torch's decorator otherwise.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from torch.autograd.function import _SingleLevelFunction

_unwrap_if_dead = getattr(getattr(torch._C, "_functorch", None), "unwrap_if_dead", None)
_transforms_active = getattr(torch._C, "_are_functorch_transforms_active", None)


def applier(function: type[torch.autograd.Function]):
    """``function.apply`` for a Function called as ``(plan, *tensors)`` (the providers' shape: one
    argument of any kind, then tensors only): its C ``apply`` after the same unwrapping when no
    functorch transform is active, ``function.apply`` otherwise, and ``function.apply`` itself
    for a Function with ``setup_context`` or a torch without the functorch calls this uses."""
    python_apply = function.apply
    if function.setup_context is not _SingleLevelFunction.setup_context \
            or _unwrap_if_dead is None or _transforms_active is None:
        return python_apply
    c_apply = super(torch.autograd.Function, function).apply

    def apply(plan, *tensors):
        if _transforms_active():
            return python_apply(plan, *tensors)
        return c_apply(plan, *map(_unwrap_if_dead, tensors))

    return apply


def once_differentiable(backward):
    """``torch.autograd.function.once_differentiable``, without its ``no_grad`` context when
    grad mode is already off (every backward not asked to create a graph)."""
    guarded = torch.autograd.function.once_differentiable(backward)

    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        if torch.is_grad_enabled():
            return guarded(ctx, *grads)
        return backward(ctx, *grads)

    return wrapper


#: Providers whose autograd wiring uses this module list it among their sources (a change here
#: can change their gradients, so it stales their parity records).
SOURCE = str(Path(__file__).resolve())

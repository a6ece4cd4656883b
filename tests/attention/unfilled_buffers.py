"""Shared by the classic and ragged interpreter checks of the gradient buffers: does a backward
store every element of those allocated unfilled (``triton_common.stored_by_kernel``), does a
forward zero every element of the value gradient it allocated unfilled
(``triton_common.zeroed_by_forward``), and does a buffer the forward allocated serve one
backward only?"""

from __future__ import annotations

import torch

from libreyolo.kernels.attention.ms_deform_attn import triton_common

GRADIENTS = ("value", "sampling_locations", "attention_weights")


def unstored_gradients(monkeypatch, backward_of, inputs, grad) -> list[str]:
    """The gradients that differ, bit for bit, between a backward whose unfilled buffers start
    as NaN and one whose buffers start as zeros: an element the kernels do not store (or, for the
    value gradient, the forward does not zero) keeps its NaN. ``backward_of(value, locations,
    weights)`` runs the forward on the given leaves; a gradient that comes back None (discrete
    sampling's locations) is not compared."""
    runs = []
    for fill in (0.0, float("nan")):
        monkeypatch.setattr(triton_common, "stored_by_kernel",
                            lambda like, fill=fill: torch.full_like(like, fill))
        monkeypatch.setattr(triton_common, "zeroed_by_forward",
                            lambda like, fill=fill: torch.full_like(like, fill,
                                                                    dtype=torch.float32))
        leaves = [t.detach().clone().requires_grad_() for t in inputs]
        backward_of(*leaves).backward(grad)
        runs.append(dict(zip(GRADIENTS, (leaf.grad for leaf in leaves), strict=True)))
    zeros, nans = runs
    return [name for name in GRADIENTS if zeros[name] is not None
            and not torch.equal(zeros[name], nans[name])]


def second_backward_problems(backward_of, inputs, grad) -> list[str]:
    """What differs when one graph is differentiated twice (``retain_graph``): a gradient of the
    second backward unequal to the first's, or one of the first's changed by the second. The
    forward allocates a host-bound call's buffers (``triton_common.keep_for_backward``); if
    the second backward reused them, its value gradient would add onto the first's, in the tensor
    the caller holds. Bit for bit: the interpreter runs the atomic adds in one order."""
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = backward_of(*leaves)
    first = torch.autograd.grad(out, leaves, grad, retain_graph=True, allow_unused=True)
    kept = [None if g is None else g.clone() for g in first]
    second = torch.autograd.grad(out, leaves, grad, allow_unused=True)
    problems = []
    for name, was, now, again in zip(GRADIENTS, kept, first, second, strict=True):
        if was is None:
            continue
        if not torch.equal(was, now):
            problems.append(f"{name}: the first gradient changed")
        if not torch.equal(was, again):
            problems.append(f"{name}: the second gradient differs")
    return problems

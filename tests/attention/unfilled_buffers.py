"""Shared by the classic and ragged interpreter checks: does a backward store every element of
the gradient buffers it allocates unfilled (``triton_provider.stored_by_kernel``)?"""

from __future__ import annotations

import torch

from libreyolo.kernels.attention.ms_deform_attn import triton_provider

GRADIENTS = ("value", "sampling_locations", "attention_weights")


def unstored_gradients(monkeypatch, backward_of, inputs, grad) -> list[str]:
    """The gradients that differ, bit for bit, between a backward whose unfilled buffers start
    as NaN and one whose buffers start as zeros: an element the kernel does not store keeps its
    NaN. ``backward_of(value, locations, weights)`` runs the forward on the given leaves; a
    gradient that comes back None (discrete sampling's locations) is not compared."""
    runs = []
    for fill in (0.0, float("nan")):
        monkeypatch.setattr(triton_provider, "stored_by_kernel",
                            lambda like, fill=fill: torch.full_like(like, fill))
        leaves = [t.detach().clone().requires_grad_() for t in inputs]
        backward_of(*leaves).backward(grad)
        runs.append(dict(zip(GRADIENTS, (leaf.grad for leaf in leaves), strict=True)))
    zeros, nans = runs
    return [name for name in GRADIENTS if zeros[name] is not None
            and not torch.equal(zeros[name], nans[name])]

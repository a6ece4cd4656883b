"""The straight-through estimator as one autograd Function, for the references and the kernels.

Forward: the fake-quantized tensor. Backward: the upstream gradient where the input lies on the
grid's range (the mask), zero elsewhere, and no gradient for anything else: scales, given or
computed, are constants (docs/quantization.md, rule 8). Who computes the two differs — the
reference keeps its quantizer's mask, a Triton kernel recomputes the masked gradient in one
launch — so the Function runs a ``step``: any object with

- ``forward(x, *extra) -> (out, saved, state)``: ``saved`` the tensors autograd keeps (so a
  backward after one of them changed in place is refused), ``state`` anything else;
- ``backward(saved, state, grad, *extra) -> x's gradient``.

A step is stateless (a module-level instance); what one call needs travels in ``extra``.
"""

from __future__ import annotations

import torch


class StraightThrough(torch.autograd.Function):
    """``StraightThrough.apply(x, step, *extra)``: see the module docstring."""

    @staticmethod
    def forward(ctx, x, step, *extra):
        out, saved, state = step.forward(x, *extra)
        ctx.save_for_backward(*saved)
        ctx.step, ctx.state, ctx.extra = step, state, extra
        return out

    @staticmethod
    def backward(ctx, grad):
        grad_x = ctx.step.backward(ctx.saved_tensors, ctx.state, grad, *ctx.extra)
        return (grad_x, None, *(None for _ in ctx.extra))

"""The straight-through estimator both implementations share: forward values, backward
`where(mask, grad, 0)` (docs/quantization.md, rule 8)."""

from __future__ import annotations

import torch


class StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, values, mask):
        ctx.save_for_backward(mask)
        return values

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return torch.where(mask, grad, 0.0), None, None


def fake_quantized(x: torch.Tensor, rounded: torch.Tensor, scale: torch.Tensor, qmin: int,
                   qmax: int, zero_point: int = 0) -> torch.Tensor:
    """From `rounded` = round(x / scale) + zero_point (float32, scale broadcast to x): the
    clamped codes times the scale, rounded once to x's dtype, canonical NaN for NaN, +0.0 for a
    zero code or a zero scale; the gradient passes where qmin <= rounded <= qmax, x is finite
    and the scale is not zero."""
    zero_scale = scale == 0
    mask = (rounded >= qmin) & (rounded <= qmax) & torch.isfinite(x) & ~zero_scale
    codes = torch.clamp(rounded, qmin, qmax) - zero_point
    values = torch.where(zero_scale, 0.0, codes * scale) + 0.0  # + 0.0 turns -0 into +0
    nan = torch.tensor(float("nan"), dtype=x.dtype, device=x.device)
    out = torch.where(torch.isnan(x), nan, values.to(x.dtype))
    return StraightThrough.apply(x, out, mask)

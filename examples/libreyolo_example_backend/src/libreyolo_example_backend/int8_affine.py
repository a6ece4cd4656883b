"""Affine int8 fake quantization, written from the rules in LibreYOLO's docs/quantization.md.

q = clamp(round_half_even(x / scale) + zp, -128, 127); out = (q - zp) * scale, computed in float32
and rounded once to x's dtype. NaN gives the canonical quiet NaN; a zero scale gives +0.0. The
gradient passes where -128 <= round(x / scale) + zp <= 127 for finite x and a non-zero scale.
"""

from __future__ import annotations

import torch

from libreyolo.kernels import register

SLOT = "fake_quant_int8_affine"
QMIN, QMAX = -128, 127


def round_half_even(y: torch.Tensor) -> torch.Tensor:
    return torch.round(y)


def round_half_away(y: torch.Tensor) -> torch.Tensor:
    """The classic bug: C's round(), halves away from zero."""
    return torch.sign(y) * torch.floor(y.abs() + 0.5)


def _quantize(x: torch.Tensor, scale: torch.Tensor, zero_point: int, rounding):
    x32 = x.float()
    zero_scale = scale == 0
    rounded = rounding(x32 / torch.where(zero_scale, 1.0, scale)) + zero_point
    mask = (rounded >= QMIN) & (rounded <= QMAX) & torch.isfinite(x32) & ~zero_scale
    codes = torch.clamp(rounded, QMIN, QMAX) - zero_point
    values = torch.where(zero_scale, 0.0, codes * scale) + 0.0  # + 0.0 turns -0 into +0
    nan = torch.tensor(float("nan"), dtype=x.dtype, device=x.device)
    return torch.where(torch.isnan(x), nan, values.to(x.dtype)), mask


class _FakeQuant(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale, zero_point, rounding):
        out, mask = _quantize(x, scale, zero_point, rounding)
        ctx.save_for_backward(mask)
        return out

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return torch.where(mask, grad, 0.0), None, None, None


def _implementation(rounding):
    def fake_quant_int8_affine(x, scale, zero_point):
        return _FakeQuant.apply(x, scale, int(zero_point), rounding)

    return fake_quant_int8_affine


def accepts(x, scale, zero_point):
    """This backend takes floating-point tensors on CPU (declines anything else, with why)."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        return "x must be a floating-point tensor"
    if x.device.type != "cpu":
        return f"x is on {x.device}; this backend runs on CPU"
    return None


def register_all() -> None:
    register(SLOT, _implementation(round_half_even), name="example-correct", accepts=accepts)
    register(SLOT, _implementation(round_half_away), name="example-broken", accepts=accepts)

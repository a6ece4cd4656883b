"""Negative controls for the fake-quant slots: the reference, broken in one narrow way each.

Each is wrong on a sliver of inputs (ties, values past the max, one column per group, a ragged
last block, non-contiguous views, one dtype...), so only the case built for it catches it.
"""

from __future__ import annotations

import torch

from conformance.negative import breaks
from libreyolo.quant import fake_quant as ref

E4M3_MAX = 448.0


def _broadcast(scale: torch.Tensor, x: torch.Tensor, axis: int) -> torch.Tensor:
    shape = [1] * x.dim()
    shape[axis % x.dim()] = -1
    return scale.reshape(shape)


@breaks("fake_quant_int8_per_channel")
def ties_away_from_zero(x, scale, axis=0):
    """Rounds exact halves away from zero (C's `round`) instead of to even."""
    out = ref.fake_quant_int8_per_channel(x, scale, axis)
    s = _broadcast(scale, x, axis)
    y = x.float() / torch.where(s == 0, 1.0, s)
    tie = (y.abs() % 1 == 0.5) & (y.abs() < 127) & (s != 0)
    away = (torch.sign(y) * torch.ceil(y.abs()) * s).to(x.dtype)
    return torch.where(tie, away, out)


@breaks("fake_quant_int8_per_channel")
def scale_per_row(x, scale, axis=0):
    """Applies the per-channel scale along dim 0 whatever `axis` says (per-row, not per-column)."""
    return ref.fake_quant_int8_per_channel(x, scale, 0 if scale.numel() == x.shape[0] else axis)


@breaks("fake_quant_fp8")
def missing_saturation(x, scale=None, *, fmt="e4m3", axis=None):
    """Lets finite values past the format's max through unclamped (per-tensor scales)."""
    out = ref.fake_quant_fp8(x, scale, fmt=fmt, axis=axis)
    if scale is None or scale.dim() != 0 or fmt != "e4m3" or float(scale) == 0:
        return out
    over = torch.isfinite(x) & ((x.float() / scale).abs() > 2 * E4M3_MAX)
    return torch.where(over, x, out)


class _MaskFromUnrounded(torch.autograd.Function):
    """Forward: the reference. Backward: mask |x / scale| <= max, not |round(x / scale)| <= max."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x, scale)
        return ref.fake_quant_fp8(x, scale).detach()

    @staticmethod
    def backward(ctx, grad):
        x, scale = ctx.saved_tensors
        keep = (x.float() / scale).abs() <= E4M3_MAX
        return torch.where(keep & (scale != 0), grad, 0.0), None


@breaks("fake_quant_fp8")
def wrong_ste_mask(x, scale=None, *, fmt="e4m3", axis=None):
    """Zeroes the gradient of values just past 448 that round back onto it (e4m3 per-tensor)."""
    if scale is None or scale.dim() != 0 or fmt != "e4m3":
        return ref.fake_quant_fp8(x, scale, fmt=fmt, axis=axis)
    return _MaskFromUnrounded.apply(x, scale)


@breaks("fake_quant_fp8")
def reads_past_row_end(x, scale=None, *, fmt="e4m3", axis=None):
    """Dynamic per-row scales (2-D inputs) whose amax also reads the element just past each
    row's end when the storage holds one: the next row's first element, or a strided view's gap."""
    if scale is not None or x.dim() != 2 or x.numel() == 0:
        return ref.fake_quant_fp8(x, scale, fmt=fmt, axis=axis)
    storage = torch.empty(0, dtype=x.dtype, device=x.device).set_(x.untyped_storage())
    rows = torch.arange(x.shape[0], device=x.device)
    past = x.storage_offset() + rows * x.stride(0) + x.shape[1] * x.stride(1)
    extra = storage[past.clamp(max=storage.numel() - 1)].float()
    extra = torch.where((past < storage.numel()) & torch.isfinite(extra), extra.abs(), 0.0)
    x32 = x.detach().float()
    amax = torch.maximum(torch.where(torch.isfinite(x32), x32.abs(), 0.0).amax(dim=1), extra)
    fmax = torch.tensor({"e4m3": E4M3_MAX, "e5m2": 57344.0}[fmt])
    return ref.fake_quant_fp8(x, torch.where(amax == 0, 1.0, amax / fmax), fmt=fmt, axis=0)


@breaks("fake_quant_fp8")
def nan_to_zero(x, scale=None, *, fmt="e4m3", axis=None):
    """Turns NaN inputs into +0.0 instead of the canonical NaN."""
    out = ref.fake_quant_fp8(x, scale, fmt=fmt, axis=axis)
    return torch.where(torch.isnan(x), torch.zeros((), dtype=out.dtype), out)


@breaks("fake_quant_int8_affine")
def ignores_strides(x, scale, zero_point):
    """Reads the input's storage as if it were contiguous (right only for contiguous inputs)."""
    strides = torch.empty(x.shape, device="meta").stride()
    return ref.fake_quant_int8_affine(torch.as_strided(x, x.shape, strides), scale, zero_point)


@breaks("fake_quant_int8_affine")
def writes_into_input(x, scale, zero_point):
    """Computes correctly, then scrubs NaN inputs to zero in place (the caller's tensor)."""
    out = ref.fake_quant_int8_affine(x, scale, zero_point)
    with torch.no_grad():
        x.masked_fill_(torch.isnan(x), 0.0)
    return out


@breaks("fake_quant_int_grouped")
def group_boundary_off_by_one(w, bits, group_size):
    """Quantizes the first column of every group after the first with the previous group's
    scale (a group index computed as (col - 1) // group_size for that column)."""
    out = ref.fake_quant_int_grouped(w, bits, group_size)
    cols = list(range(group_size, w.shape[1], group_size))
    if not cols or w.shape[0] == 0:
        return out
    qmax = 2 ** (bits - 1) - 1
    w32 = w.detach().float()
    fixed = out.clone()
    for c in cols:
        group = w32[:, c - group_size:c]
        amax = torch.where(torch.isfinite(group), group.abs(), 0.0).amax(dim=1)
        s = torch.where(amax == 0, 1.0, amax / torch.tensor(float(qmax)))
        q = torch.clamp(torch.round(w32[:, c] / s), -qmax, qmax) * s
        keep = ~torch.isfinite(w32[:, c])
        fixed[:, c] = torch.where(keep, out[:, c], q.to(out.dtype))
    return fixed


@breaks("fake_quant_nvfp4_dynamic")
def partial_block_tail_lost(x):
    """Drops the last element of a ragged last 16-block (a mask one lane too short)."""
    out = ref.fake_quant_nvfp4_dynamic(x)
    if x.shape[-1] % 16 == 0 or x.numel() == 0:
        return out
    keep = torch.ones(x.shape[-1], dtype=torch.bool)
    keep[-1] = False
    return torch.where(keep.to(x.device), out, torch.zeros((), dtype=out.dtype))


@breaks("fake_quant_mxfp4_dynamic")
def bfloat16_returns_float32(x):
    """Returns float32 for bfloat16 inputs (right values, wrong dtype)."""
    out = ref.fake_quant_mxfp4_dynamic(x)
    return out.float() if x.dtype == torch.bfloat16 else out


@breaks("fake_quant_mxfp8_dynamic")
def squeezes_unit_dims(x):
    """Returns its result with size-1 dimensions squeezed away (right values, wrong shape)."""
    return ref.fake_quant_mxfp8_dynamic(x).squeeze()


@breaks("fake_quant_int_grouped")
def fails_on_empty(w, bits, group_size):
    """Computes a launch grid that divides by the row count: raises on a weight with no rows."""
    if w.shape[0] == 0:
        raise RuntimeError("grid dimension must be positive")
    return ref.fake_quant_int_grouped(w, bits, group_size)


def _declines_float16(x):
    return "float16 not supported" if x.dtype == torch.float16 else None


@breaks("fake_quant_mxfp8_weight", accepts=_declines_float16)
def declines_float16(w):
    """Correct on what it takes, but declines float16, which the catalogue says all take."""
    return ref.fake_quant_mxfp8_weight(w)


CONTROLS = [
    ("ties_away_from_zero", ties_away_from_zero,
     "exact: shape sets inject exact ties k + 0.5 at power-of-two scales"),
    ("scale_per_row", scale_per_row,
     "exact: cases with axis 1 / -1 and a channel count equal to dim 0"),
    ("missing_saturation", missing_saturation,
     "exact: over-max values (2 * max, 3e38) in per-tensor e4m3 cases"),
    ("wrong_ste_mask", wrong_ste_mask,
     "ste: values in (448, 464] round to 448 and keep their gradient"),
    ("reads_past_row_end", reads_past_row_end,
     "exact: gapped views hold 1e30 sentinels after each row; anchors differ per row"),
    ("nan_to_zero", nan_to_zero, "exact: NaN injected as an edge value"),
    ("ignores_strides", ignores_strides, "exact: gapped and transposed layouts"),
    ("writes_into_input", writes_into_input,
     "inputs-unmodified: storage bits compared before and after the call"),
    ("group_boundary_off_by_one", group_boundary_off_by_one,
     "exact: several groups per row with power-of-two scales that differ per group"),
    ("partial_block_tail_lost", partial_block_tail_lost,
     "exact: prime and 3 x 1024 + 5 row lengths leave a ragged last block"),
    ("bfloat16_returns_float32", bfloat16_returns_float32, "dtype: bfloat16 cases"),
    ("squeezes_unit_dims", squeezes_unit_dims, "shape: cases with a size-1 dimension"),
    ("fails_on_empty", fails_on_empty, "crash: the empty_rows case is a valid input"),
    ("declines_float16", declines_float16,
     "accepts: declining a case the catalogue says every implementation takes is a failure"),
]

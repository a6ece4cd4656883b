"""Exact float32 building blocks of the references: powers of two, grid rounding, finite amax.

Everything here is exact (torch.frexp, table lookups of powers of two, multiplication by powers
of two), IEEE float32 arithmetic on tensors, or torch.round (round half to even on every device),
so the bits do not depend on the device or torch version. No float8 cast is used: torch's float8
casts changed their saturation between releases.
"""

from __future__ import annotations

import torch

from libreyolo.capture import is_capturing
from libreyolo.quant.formats import FloatFormat

_FP32_MIN_EXPONENT = -149  # the smallest float32 subnormal is 2^-149
_FP32_MAX_EXPONENT = 127


def pow2(exponent: torch.Tensor) -> torch.Tensor:
    """2.0 ** exponent as float32, exactly, for integer exponents in [-149, 127].

    A lookup in an exact table (every power of two is a float32, subnormals included), because
    exp2/ldexp are not guaranteed exact on every device, and bit casts (`Tensor.view(dtype)`)
    break torch.jit.trace.
    """
    table = torch.tensor(
        [2.0**k for k in range(_FP32_MIN_EXPONENT, _FP32_MAX_EXPONENT + 1)],
        dtype=torch.float32,
        device=exponent.device,
    )
    index = torch.clamp(exponent, _FP32_MIN_EXPONENT, _FP32_MAX_EXPONENT) - _FP32_MIN_EXPONENT
    return table[index.long()]


def floor_log2(magnitude: torch.Tensor) -> torch.Tensor:
    """floor(log2(m)) as int32 for finite float32 m > 0 (subnormals included); -1 for m = 0.

    torch.frexp is exact on every device: m = mantissa * 2^e with mantissa in [0.5, 1).
    Callers handle m = 0 themselves. While a graph is captured the same integers come from
    ``_floor_log2_exportable``: frexp has no ONNX translation in either exporter.
    """
    if is_capturing():
        return _floor_log2_exportable(magnitude)
    return torch.frexp(magnitude).exponent - 1


def _floor_log2_exportable(magnitude: torch.Tensor) -> torch.Tensor:
    """floor_log2 from ops every exporter translates: log2's floor (clamped to float32's
    exponents, so a log2 that flushed a subnormal to -inf stays an integer), corrected once each
    way against exact powers of two, which is exact wherever log2 is within one of the truth.
    Equal to frexp's on every float32 power of two, its neighbours and the subnormals, in torch
    and in onnxruntime (tests/quant/test_quant_format_tables.py, tests/nn/)."""
    estimate = torch.clamp(torch.floor(torch.log2(magnitude)), _FP32_MIN_EXPONENT,
                           _FP32_MAX_EXPONENT).to(torch.int32)
    estimate = estimate - (pow2(estimate) > magnitude).to(torch.int32)
    above = (estimate < _FP32_MAX_EXPONENT) & (pow2(estimate + 1) <= magnitude)
    return torch.where(magnitude == 0, -1, estimate + above.to(torch.int32))


def round_to_float_grid(y: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """Round float32 `y` to the nearest value of `fmt`'s grid, ties to even, without saturation.

    The grid spacing at y is 2^(max(floor(log2|y|), emin) - mantissa_bits), so subnormals are on
    the grid; scaling by that power of two is exact, torch.round does the tie-to-even, scaling
    back is exact (or overflows to inf for |y| near float32's max, which then saturates anyway).
    Non-finite y passes through unchanged; signs of zeros are kept.
    """
    finite = torch.isfinite(y)
    y_finite = torch.where(finite, y, 0.0)
    exponent = torch.clamp(floor_log2(y_finite.abs()), min=fmt.min_normal_exponent)
    step = exponent - fmt.mantissa_bits
    rounded = torch.round(y_finite * pow2(-step)) * pow2(step)
    return torch.where(finite, rounded, y)


def round_to_integer(y: torch.Tensor) -> torch.Tensor:
    """Nearest integer, ties to even. Integer codes have no signed zero, so -0.0 becomes +0.0."""
    rounded = torch.round(y)
    return torch.where(rounded == 0, 0.0, rounded)


def finite_amax(x: torch.Tensor, dim: int | tuple[int, ...] | None = None) -> torch.Tensor:
    """max |x| over `dim` (all dims when None) ignoring NaN and inf; 0 for an empty reduction.

    Kept dims are retained (keepdim) so the result broadcasts back over x.
    """
    dims = tuple(range(x.dim())) if dim is None else dim
    if x.numel() == 0:
        shape = [1 if d in _normalized(dims, x.dim()) else n for d, n in enumerate(x.shape)]
        return torch.zeros(shape, dtype=torch.float32, device=x.device)
    magnitude = torch.where(torch.isfinite(x), x.abs(), 0.0)
    return torch.amax(magnitude, dim=dims, keepdim=True).to(torch.float32)


def scale_from_amax(amax: torch.Tensor, qmax: float) -> torch.Tensor:
    """amax / qmax by IEEE float32 division by a tensor; an amax of zero gives scale 1."""
    quotient = amax / torch.full((), qmax, dtype=torch.float32, device=amax.device)
    return torch.where(amax == 0, 1.0, quotient)


def canonical_nan_like(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A 0-dim canonical quiet NaN of `dtype` (0x7FC00000, 0x7E00, 0x7FC0).

    Filled from a Python NaN, which torch converts on the host with c10's scalar conversion;
    tensor casts are not used because torch's vectorized float32 -> bfloat16 cast turns NaN
    into 0xFFFF. The bits are checked against literal constants in the tests, on every device.
    """
    return torch.full((), float("nan"), dtype=dtype, device=device)


def _normalized(dims: int | tuple[int, ...], ndim: int) -> tuple[int, ...]:
    dims = (dims,) if isinstance(dims, int) else dims
    return tuple(d % ndim for d in dims)

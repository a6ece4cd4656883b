"""The quantizers: from an input and its parameters to codes, scales and the straight-through mask.

One function per op, shared by the fake-quant references (which return `values`) and the packers
(which store `codes` and `scales`), so a packed checkpoint and a fake-quantized tensor cannot
disagree. `docs/quantization.md` states the rules these functions implement.

The fake-quant op of a declared slot ``fake_quant_<q>`` is made from quantizer ``<q>``
(`libreyolo.quant.fake_quant`), and the quantizer's docstring is the op's: it states the op's
formula, its scales and its straight-through mask, in terms of the op's arguments.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from libreyolo.quant import validation as v
from libreyolo.quant.formats import (
    E2M1,
    E4M3,
    E8M0_MAX_EXPONENT,
    E8M0_MIN_EXPONENT,
    FP8_FORMATS,
    INT8_AFFINE_MAX,
    INT8_AFFINE_MIN,
    MX_BLOCK_SIZE,
    NVFP4_BLOCK_SIZE,
    NVFP4_TENSOR_SCALE_DIVISOR,
    FloatFormat,
    int_qmax,
)
from libreyolo.quant.numerics import (
    finite_amax,
    floor_log2,
    pow2,
    round_to_float_grid,
    round_to_integer,
    scale_from_amax,
)

INT8_QMAX = int_qmax(8)


@dataclass
class Quantized:
    """The result of quantizing x (all float32, x's shape unless said otherwise).

    codes:  the quantized values on the format's grid, before scaling (+0.0 where the scale is 0)
    values: codes * scale, the fake-quantized tensor before the cast back to x's dtype
    mask:   the straight-through mask (bool): True where the gradient passes
    scales: named scale tensors in their storage shapes (what packing writes)
    """

    codes: torch.Tensor
    values: torch.Tensor
    mask: torch.Tensor
    scales: dict[str, torch.Tensor] = field(default_factory=dict)


def quantize(
    x: torch.Tensor,
    scale: torch.Tensor,
    round_fn: Callable[[torch.Tensor], torch.Tensor],
    qmin: float,
    qmax: float,
    zero_point: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """codes, values, mask for float32 x and a broadcastable float32 scale.

    r = round_fn(x / scale) + zero_point (IEEE division by a tensor); codes = clamp(r) - zero_point;
    values = codes * scale; mask = qmin <= r <= qmax. Where scale == 0 nothing is divided: codes
    and values are +0.0 and the mask is False.
    """
    zero_scale = scale == 0
    rounded = round_fn(x / torch.where(zero_scale, 1.0, scale))
    if zero_point:
        rounded = rounded + zero_point
    mask = (rounded >= qmin) & (rounded <= qmax) & ~zero_scale
    codes = torch.clamp(rounded, qmin, qmax)
    if zero_point:
        codes = codes - zero_point
    codes = torch.where(zero_scale, 0.0, codes)
    # where(), not codes * scale: a scale of -0.0 is zero too, and 0 * -0.0 would be -0.0
    return codes, torch.where(zero_scale, 0.0, codes * scale), mask


def int8_per_channel(x: torch.Tensor, scale: torch.Tensor, axis: int = 0, *,
                     x_name: str = "x") -> Quantized:
    """Symmetric int8 per channel: clamp(round(x / scale), -127, 127) * scale.

    `scale`: 1-D float32 of length x.shape[axis]. Mask: -127 <= round(x / scale) <= 127, False
    for NaN/inf inputs and zero-scale channels. A zero code is +0.0 (integers have no -0).

    ``x_name``: what the caller calls ``x`` (packing's ``w``), for its errors.
    """
    v.check_float_tensor(x_name, x)
    v.check_min_rank(x_name, x, 1)
    axis = v.check_axis("axis", axis, x.dim())
    v.check_scale("scale", scale, (x.shape[axis],), x.device)
    shape = [1] * x.dim()
    shape[axis] = -1
    codes, values, mask = quantize(
        x.float(), scale.view(shape), round_to_integer, -INT8_QMAX, INT8_QMAX
    )
    return Quantized(codes, values, mask, {"scale": scale})


def int8_affine(x: torch.Tensor, scale: torch.Tensor, zero_point: int | torch.Tensor) -> Quantized:
    """Affine int8 per tensor: (clamp(round(x / scale) + zp, -128, 127) - zp) * scale.

    `scale`: 0-dim float32; `zero_point`: int in [-128, 127]. Mask: -128 <= round(x / scale) + zp
    <= 127, False for NaN/inf inputs and a zero scale.
    """
    v.check_float_tensor("x", x)
    v.check_scale("scale", scale, (), x.device)
    zero_point = v.check_zero_point("zero_point", zero_point)
    codes, values, mask = quantize(
        x.float(), scale, round_to_integer, INT8_AFFINE_MIN, INT8_AFFINE_MAX, zero_point
    )
    return Quantized(codes, values, mask, {"scale": scale})


def fp8(
    x: torch.Tensor,
    scale: torch.Tensor | None = None,
    *,
    fmt: str = "e4m3",
    axis: int | None = None,
    x_name: str = "x",
) -> Quantized:
    """FP8 (E4M3 or E5M2, both saturating): clamp(round_fp8(x / scale), -max, max) * scale.

    `scale` 0-dim: per tensor; 1-D with `axis`: per channel; None: per row along the last dim,
    scale = finite row amax / max (1 when that amax is 0). Mask: |round_fp8(x / scale)| <= max
    (rounded on the unbounded grid), False for NaN/inf inputs and a zero scale.

    ``x_name``: what the caller calls ``x`` (packing's ``w``), for its errors.
    """
    fmt, mode, axis = v.check_fp8_arguments(x, scale, fmt, axis, x_name)
    fmt_info = FP8_FORMATS[fmt]
    x32 = x.float()
    if mode == "row":
        broadcast = stored = scale_from_amax(finite_amax(x32, -1), fmt_info.max_value)
    elif mode == "tensor":
        broadcast = stored = scale
    else:
        shape = [1] * x.dim()
        shape[axis] = -1
        broadcast, stored = scale.view(shape), scale
    codes, values, mask = _quantize_float(x32, broadcast, fmt_info)
    return Quantized(codes, values, mask, {"scale": stored})


def int_grouped(w: torch.Tensor, bits: int, group_size: int) -> Quantized:
    """Symmetric intN (N = 2, 4, 8) per group of `group_size` along dim 1 of a 2-D weight.

    scale = finite group amax / (2^(N-1) - 1) (1 when that amax is 0), ragged last group. Mask:
    |round(w / scale)| <= 2^(N-1) - 1, False for NaN/inf and zero (underflowed) scales.
    """
    v.check_float_tensor("w", w)
    v.check_rank("w", w, 2)
    qmax = int_qmax(v.check_bits("bits", bits))
    group_size = group_length(v.check_positive_int("group_size", group_size), w.shape[1])
    blocks = _to_blocks(w.float(), group_size)
    scale = scale_from_amax(finite_amax(blocks, -1), qmax)
    codes, values, mask = quantize(blocks, scale, round_to_integer, -qmax, qmax)
    return _from_blocks(w, codes, values, mask, {"scale": scale.squeeze(-1)})


def nvfp4_weight(w: torch.Tensor, global_amax: torch.Tensor | None = None) -> Quantized:
    """NVFP4 on a 2-D weight: E2M1 values in blocks of 16 along dim 1, E4M3 block scales.

    s_t = amax / 2688 (amax = `global_amax` or the finite amax of w; 1 when 0), s_b =
    E4M3(block amax / (6 s_t)) saturated at 448 (1 for an all-zero block), scale s_b * s_t.
    Mask: |round_e2m1(w / scale)| <= 6, False for NaN/inf and zero (underflowed) scales.
    """
    v.check_float_tensor("w", w)
    v.check_rank("w", w, 2)
    if global_amax is None:
        global_amax = finite_amax(w.float()).reshape(())
    else:
        v.check_scale("global_amax", global_amax, (), w.device)
    return _nvfp4(w, global_amax)


def nvfp4_dynamic(x: torch.Tensor) -> Quantized:
    """NVFP4 on activations: as the weight op, blocks of 16 along the last dim, s_t from x.

    Mask: |round_e2m1(x / scale)| <= 6, False for NaN/inf and zero (underflowed) scales.
    """
    v.check_float_tensor("x", x)
    v.check_min_rank("x", x, 1)
    return _rows_of(x, lambda rows: _nvfp4(rows, finite_amax(x.float()).reshape(())))


def mx_weight(w: torch.Tensor, element: FloatFormat) -> Quantized:
    v.check_float_tensor("w", w)
    v.check_rank("w", w, 2)
    return _mx(w, element)


def mx_dynamic(x: torch.Tensor, element: FloatFormat) -> Quantized:
    v.check_float_tensor("x", x)
    v.check_min_rank("x", x, 1)
    return _rows_of(x, lambda rows: _mx(rows, element))


def mxfp4_weight(w: torch.Tensor) -> Quantized:
    """MXFP4 on a 2-D weight: E2M1 values in blocks of 32 along dim 1, E8M0 scales.

    scale = 2^clamp(floor(log2(finite block amax)) - 2, -127, 127) (1 for amax 0).
    Mask: |round_e2m1(w / scale)| <= 6, False for NaN/inf inputs.
    """
    return mx_weight(w, E2M1)


def mxfp4_dynamic(x: torch.Tensor) -> Quantized:
    """MXFP4 on activations: as the weight op, blocks of 32 along the last dim of any rank.

    Mask: |round_e2m1(x / scale)| <= 6, False for NaN/inf inputs.
    """
    return mx_dynamic(x, E2M1)


def mxfp8_weight(w: torch.Tensor) -> Quantized:
    """MXFP8 on a 2-D weight: E4M3 values in blocks of 32 along dim 1, E8M0 scales.

    scale = 2^clamp(floor(log2(finite block amax)) - 8, -127, 127) (1 for amax 0).
    Mask: |round_e4m3(w / scale)| <= 448, False for NaN/inf inputs.
    """
    return mx_weight(w, E4M3)


def mxfp8_dynamic(x: torch.Tensor) -> Quantized:
    """MXFP8 on activations: as the weight op, blocks of 32 along the last dim of any rank.

    Mask: |round_e4m3(x / scale)| <= 448, False for NaN/inf inputs.
    """
    return mx_dynamic(x, E4M3)


def _quantize_float(x32: torch.Tensor, scale: torch.Tensor, fmt: FloatFormat):
    return quantize(
        x32, scale, lambda y: round_to_float_grid(y, fmt), -fmt.max_value, fmt.max_value
    )


def _nvfp4(w: torch.Tensor, global_amax: torch.Tensor) -> Quantized:
    """NVFP4 on a 2-D tensor: s_t = amax / 2688, s_b = E4M3(block_amax / (6 s_t)), s = s_b s_t."""
    blocks = _to_blocks(w.float(), NVFP4_BLOCK_SIZE)
    tensor_scale = scale_from_amax(global_amax, NVFP4_TENSOR_SCALE_DIVISOR)
    divisor = tensor_scale * torch.full((), E2M1.max_value, dtype=torch.float32, device=w.device)
    block_amax = finite_amax(blocks, -1)
    raw = block_amax / torch.where(divisor == 0, 1.0, divisor)
    raw = torch.where(block_amax == 0, 1.0, raw)
    block_scale = torch.clamp(round_to_float_grid(raw, E4M3), max=E4M3.max_value)
    codes, values, mask = _quantize_float(blocks, block_scale * tensor_scale, E2M1)
    scales = {"block_scale": block_scale.squeeze(-1), "tensor_scale": tensor_scale}
    return _from_blocks(w, codes, values, mask, scales)


def _mx(w: torch.Tensor, element: FloatFormat) -> Quantized:
    """MX on a 2-D tensor: scale 2^(floor(log2(block_amax)) - emax_elem), clamped to E8M0."""
    blocks = _to_blocks(w.float(), MX_BLOCK_SIZE)
    block_amax = finite_amax(blocks, -1)
    exponent = torch.clamp(
        floor_log2(block_amax) - element.max_exponent, E8M0_MIN_EXPONENT, E8M0_MAX_EXPONENT
    )
    exponent = torch.where(block_amax == 0, 0, exponent)
    codes, values, mask = _quantize_float(blocks, pow2(exponent), element)
    return _from_blocks(w, codes, values, mask, {"exponent": exponent.squeeze(-1)})


def _to_blocks(w32: torch.Tensor, block: int) -> torch.Tensor:
    """(rows, cols) -> (rows, ceil(cols / block), block), the ragged last block padded with 0."""
    rows, cols = w32.shape
    padded = F.pad(w32, (0, block_padding(cols, block)))
    return padded.view(rows, padded.shape[1] // block, block)


def group_length(group_size: int, cols: int) -> int:
    """The columns a group spans: ``group_size``, or the row's length when the group is longer
    (one group a row either way, with the same scale: zeros padding a group change no amax), so a
    huge ``group_size`` never pads a row to its length (``2**40`` columns of zeros)."""
    return min(group_size, max(cols, 1))


def block_padding(n: int, block: int) -> int:
    """Columns that complete the last block, from non-negative operands only: a traced graph
    records this arithmetic, and ONNX's integer division truncates where Python's floors."""
    return (block - n % block) % block


def _from_blocks(w, codes, values, mask, scales) -> Quantized:
    rows, cols = w.shape

    def unblock(t):
        return t.reshape(rows, t.shape[1] * t.shape[2])[:, :cols]

    return Quantized(unblock(codes), unblock(values), unblock(mask), scales)


def _rows_of(x: torch.Tensor, quantize_rows: Callable[[torch.Tensor], Quantized]) -> Quantized:
    """Apply a 2-D quantizer to x viewed as rows along its last dim, and restore x's shape."""
    result = quantize_rows(x.reshape(math.prod(x.shape[:-1]), x.shape[-1]))
    return Quantized(
        result.codes.reshape(x.shape),
        result.values.reshape(x.shape),
        result.mask.reshape(x.shape),
        result.scales,
    )

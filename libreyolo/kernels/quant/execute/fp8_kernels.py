"""The Triton kernels of the FP8 execute path: the activation prologue and the GEMM epilogue.

``fp8_cast_kernel`` quantizes activations to E4M3 bytes in one pass: per tensor (a given scale),
or dynamic per row (the row's finite amax, its scale and its codes from one tile holding the whole
row). It writes into a buffer whose rows may be longer than the input's (zeros in the pad), which
is how ``torch._scaled_mm`` gets its K multiple of 16 without another copy.
``fp8_epilogue_kernel`` applies per-row and per-column scales, a bias and ReLU to a float32
accumulator and writes the output dtype.

Exactness rules (docs/fp8_execute.md; DESIGN.md, "Facts for kernel authors"): the arithmetic is
the fake-quant kernels' own float32 helpers (``tl.div_rn``, rounding by exact powers of two and
the 2^23 trick, integer round-to-nearest-even for bfloat16), the E4M3 byte is assembled from the
code's float32 bits in integer arithmetic (no fp8 cast: the interpreter's is wrong), launches
pass ``enable_fp_fusion=False`` so no multiply is contracted into the following add.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..simulate.kernels import (
    _amax_to_scale,
    _finite_abs,
    _load_float32,
    _output_bits,
    _round_to_float_grid,
)

E4M3_MAX = tl.constexpr(448.0)


@triton.jit
def _e4m3_byte(level):
    """The E4M3 (e4m3fn) byte of a float32 ``level`` already on the E4M3 grid, |level| <= 448.

    Normal codes (|level| >= 2^-6, float32 biased exponent >= 121) take the rebiased exponent and
    the top three mantissa bits; subnormals are ``|level| * 2^9`` (an exact integer 0..7). The
    sign bit is kept, so -0.0 is 0x80 (OCP OFP8 rev 1.0, table 1)."""
    bits = level.to(tl.uint32, bitcast=True)
    biased = ((bits >> 23) & 0xFF).to(tl.int32)
    normal = ((biased - 120) << 3) | ((bits >> 20) & 7).to(tl.int32)
    subnormal = (tl.abs(level) * 512.0).to(tl.int32)
    magnitude = tl.where(biased >= 121, normal, subnormal)
    return magnitude | ((bits >> 24) & 0x80).to(tl.int32)


@triton.jit
def fp8_cast_kernel(
    x_ptr, scale_ptr, codes_ptr, row_scale_ptr,
    rows, cols, padded_cols, x_row_stride, x_col_stride,
    IN_KIND: tl.constexpr, DYNAMIC: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
    GELU: tl.constexpr = False,
):
    """``codes[r, c]`` = E4M3 byte of ``clamp(round(x[r, c] / scale), -448, 448)`` for
    ``c < cols``, 0 for ``cols <= c < padded_cols``; NaN gives 0x7F, a zero scale +0.

    ``DYNAMIC``: scale = finite amax of row r / 448 (1 when 0), stored to ``row_scale[r]``; the
    tile holds the whole row (``BLOCK_C >= cols``, one program column). Else ``scale_ptr`` is the
    0-dim scale and ``row_scale_ptr`` is not touched. ``x`` is read through its strides;
    ``codes`` is a contiguous (rows, padded_cols) uint8 buffer.

    ``GELU`` (not a slot: ``fused_fp8_mlp``'s fold of the previous layer's activation) quantizes
    ``gelu(x) = x / 2 * (1 + erf(x / sqrt 2))`` instead of ``x``; ``erf`` is the device's, so those
    codes are not bit-exact against a reference.
    """
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    in_rows = r < rows
    valid = in_rows[:, None] & (c < cols)[None, :]
    r64 = r.to(tl.int64)[:, None]
    x = _load_float32(x_ptr, r64 * x_row_stride + c.to(tl.int64)[None, :] * x_col_stride, valid,
                      IN_KIND)
    if GELU:
        x = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    if DYNAMIC:
        amax = tl.max(_finite_abs(x, valid), axis=1)
        row_scale = _amax_to_scale(amax, E4M3_MAX)
        tl.store(row_scale_ptr + r, row_scale, mask=in_rows)
        scale = row_scale[:, None]
    else:
        scale = tl.load(scale_ptr + tl.zeros([BLOCK_R, 1], dtype=tl.int32))
    nonzero = scale != 0.0
    # E4M3: 3 mantissa bits, smallest normal exponent -6 (OCP OFP8 rev 1.0, table 1)
    level = _round_to_float_grid(tl.div_rn(x, tl.where(nonzero, scale, 1.0)), 3, -6)
    level = tl.where(tl.abs(level) <= E4M3_MAX, level, tl.where(level < 0.0, -E4M3_MAX, E4M3_MAX))
    byte = tl.where(x != x, 0x7F, _e4m3_byte(level))
    byte = tl.where(valid & nonzero, byte, 0)
    written = in_rows[:, None] & (c < padded_cols)[None, :]
    tl.store(codes_ptr + r64 * padded_cols + c[None, :], byte.to(tl.uint8), mask=written)


@triton.jit
def fp8_epilogue_kernel(
    acc_ptr, row_scale_ptr, col_scale_ptr, bias_ptr, out_ptr,
    rows, cols, acc_row_stride, acc_col_stride, row_scale_stride, col_scale_stride, bias_stride,
    HAS_BIAS: tl.constexpr, RELU: tl.constexpr, OUT_KIND: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """``out = act(((acc * row_scale) * col_scale) + bias)``, float32, rounded once to the output
    dtype (stored as its bits; NaN as the canonical quiet NaN). ``bias`` has the output dtype
    (bfloat16 arrives as int16 bits); ``out`` is contiguous."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    valid = (r < rows)[:, None] & (c < cols)[None, :]
    r64 = r.to(tl.int64)
    acc = tl.load(acc_ptr + r64[:, None] * acc_row_stride + c.to(tl.int64)[None, :] *
                  acc_col_stride, mask=valid, other=0.0)
    row_scale = tl.load(row_scale_ptr + r64 * row_scale_stride, mask=r < rows, other=1.0)
    col_scale = tl.load(col_scale_ptr + c * col_scale_stride, mask=c < cols, other=1.0)
    y = acc * row_scale[:, None]
    y = y * col_scale[None, :]
    if HAS_BIAS:
        y = y + _load_float32(bias_ptr, c * bias_stride, c < cols, OUT_KIND)[None, :]
    if RELU:
        y = tl.where(y < 0.0, 0.0, y)
    tl.store(out_ptr + r64[:, None] * cols + c[None, :], _output_bits(y, y != y, OUT_KIND),
             mask=valid)

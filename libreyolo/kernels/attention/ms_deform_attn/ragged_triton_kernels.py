"""Triton kernels for ragged deformable attention, forward and backward. Imports triton.

The classic kernels' layout and tiling, and their bilinear steps (``triton_kernels``' helpers,
called here), with two differences: the point count varies by level, and sampling is bilinear or
discrete (nearest pixel). Locations are ``(B, len_q, heads, sum(points), 2)`` and weights
``(B, len_q, heads, sum(points))``, level 0's points first. The per-level counts and
first-point indices are compile-time constants packed ``COUNT_BITS`` bits per level into one
integer each (``COUNTS``, ``FIRSTS``), so every loop over points is unrolled as in the classic
kernels (the provider chooses ``COUNT_BITS``); a layout compiles once per (dtype, C, counts,
method).

Discrete sampling reads pixel ``floor(u * W + 0.5)`` clamped to ``[0, W - 1]`` per axis, with
the arithmetic rounded as the portable path's tensor ops round it in the input dtype (``W`` and
the product rounded to the dtype, then the sum): the kernel picks the pixel the portable path
picks, bit for bit: ``u * W`` is ``product_uncontracted`` (``triton_arithmetic``), so it is not
contracted with ``+ 0.5`` into one FMA, which would round once where the portable path rounds
twice, whatever options compile the kernel. The weighted sums contract as the classic kernels'
do (the slot's contract is bounded there).
"""

import triton
import triton.language as tl

from libreyolo.kernels.attention.ms_deform_attn.deterministic_kernels import (
    add_value_gradient,
    fixed_point_scale,
)
from libreyolo.kernels.attention.ms_deform_attn.triton_kernels import (
    _ZEROING,
    _bilinear_accumulate,
    _bilinear_point_backward,
    _channels,
    _corner_offsets,
    _grad_out_tile,
    _level_size,
    _query_block,
    zero_value_gradient,
)
from libreyolo.kernels.triton_arithmetic import product_uncontracted
from libreyolo.kernels.triton_kit import FloatKind

#: The DTYPE constant (``FloatKind``): which rounding the discrete index arithmetic emulates.
FLOAT16 = tl.constexpr(int(FloatKind.FLOAT16))
BFLOAT16 = tl.constexpr(int(FloatKind.BFLOAT16))

_SIZES = ["len_in", "len_q", "heads"]


@triton.jit
def _round_to(x, DTYPE: tl.constexpr):
    """``x`` (float32) rounded to nearest-even in the input dtype, kept in float32. bfloat16 is
    rounded on the bits: the interpreter truncates float32 -> bfloat16 casts
    (docs/architecture.md, "Facts for kernel authors")."""
    if DTYPE == FLOAT16:
        x = x.to(tl.float16).to(tl.float32)
    elif DTYPE == BFLOAT16:
        bits = x.to(tl.int32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
        x = bits.to(tl.float32, bitcast=True)
    return x


@triton.jit
def _nearest_axis(u, size, DTYPE: tl.constexpr, PTX: tl.constexpr):
    """Discrete sampling's pixel along one axis of ``size`` pixels, as int32."""
    size_rounded = _round_to(size.to(tl.float32), DTYPE)
    scaled = _round_to(product_uncontracted(u, size_rounded, PTX), DTYPE)
    index = tl.floor(_round_to(scaled + 0.5, DTYPE))
    return tl.minimum(tl.maximum(index, 0.0), (size - 1).to(tl.float32)).to(tl.int32)


@triton.jit
def _nearest_pixel(loc_ptr, attn_ptr, p_offset, height, width, start, len_in, row_stride, q_mask,
                   DTYPE: tl.constexpr, PTX: tl.constexpr):
    """One discrete point, for a block of queries: its pixel's row offset in the value (as
    ``_corner_offsets``), where that pixel exists, and the point's weight."""
    u = tl.load(loc_ptr + 2 * p_offset, mask=q_mask, other=0.0).to(tl.float32)
    v = tl.load(loc_ptr + 2 * p_offset + 1, mask=q_mask, other=0.0).to(tl.float32)
    weight = tl.load(attn_ptr + p_offset, mask=q_mask, other=0.0).to(tl.float32)
    offset, inside = _nearest_offset(u, v, height, width, start, len_in, row_stride, q_mask,
                                     DTYPE, PTX)
    return offset, inside, weight


@triton.jit
def _nearest_offset(u, v, height, width, start, len_in, row_stride, q_mask, DTYPE: tl.constexpr,
                    PTX: tl.constexpr):
    """The row offset of location (u, v)'s pixel (float32), and where it exists."""
    x = _nearest_axis(u, width, DTYPE, PTX)
    y = _nearest_axis(v, height, DTYPE, PTX)
    return _corner_offsets(x, y, height, width, start, len_in, row_stride, q_mask)


@triton.jit(do_not_specialize=_SIZES + _ZEROING)
def ms_deform_attn_ragged_fwd_kernel(
    value_ptr, shapes_ptr, loc_ptr, attn_ptr, out_ptr, grad_value_ptr,
    len_in, len_q, heads, zero_count, zero_share,
    C: tl.constexpr, LEVELS: tl.constexpr, COUNTS: tl.constexpr, FIRSTS: tl.constexpr,
    COUNT_BITS: tl.constexpr, TOTAL: tl.constexpr, DISCRETE: tl.constexpr, DTYPE: tl.constexpr,
    PTX: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_C: tl.constexpr, ZERO_GRAD_VALUE: tl.constexpr,
    ZERO_BLOCK: tl.constexpr,
):
    """Grid: (query blocks, batch * heads, channel blocks). Accumulates in float32, level by
    level, point by point in the locations' order. ``ZERO_GRAD_VALUE``: as the classic
    forward's."""
    if ZERO_GRAD_VALUE:
        zero_value_gradient(grad_value_ptr, zero_count, zero_share, ZERO_BLOCK)
    q_mask, row_stride, head_offset, out_rows, qh = _query_block(len_in, len_q, heads, C, BLOCK_Q)
    c, c_mask = _channels(tl.program_id(2) * BLOCK_C, C, BLOCK_C)
    v_base = value_ptr + head_offset + c[None, :]
    acc = tl.zeros((BLOCK_Q, BLOCK_C), dtype=tl.float32)
    MASK: tl.constexpr = (1 << COUNT_BITS) - 1
    start = 0
    for level in tl.static_range(LEVELS):
        height, width = _level_size(shapes_ptr, level)
        for point in tl.static_range(COUNTS >> COUNT_BITS * level & MASK):
            p_offset = qh * TOTAL + (FIRSTS >> COUNT_BITS * level & MASK) + point
            if DISCRETE:
                offset, inside, weight = _nearest_pixel(loc_ptr, attn_ptr, p_offset, height,
                                                        width, start, len_in, row_stride, q_mask,
                                                        DTYPE, PTX)
                pixel = tl.load(v_base + offset[:, None],
                                mask=inside[:, None] & c_mask[None, :], other=0.0)
                acc += weight[:, None] * pixel.to(tl.float32)
            else:
                acc = _bilinear_accumulate(acc, v_base, loc_ptr, attn_ptr, p_offset, height,
                                           width, start, len_in, row_stride, q_mask, c_mask)
        start += height * width
    out = out_ptr + out_rows[:, None] + c[None, :]
    # rounded here, so the cast below is exact (and the interpreter's bfloat16 cast is not used)
    tl.store(out, _round_to(acc, DTYPE).to(out_ptr.dtype.element_ty),
             mask=q_mask[:, None] & c_mask[None, :])


@triton.jit
def _discrete_point_backward(value_ptr, loc_ptr, attn_ptr, grad_out_ptr, grad_value_ptr,
                             grad_attn_ptr, head_offset, g_rows, p_offset, height, width, start,
                             len_in, row_stride, q_mask, C: tl.constexpr, BLOCK_Q: tl.constexpr,
                             BLOCK_C: tl.constexpr, DTYPE: tl.constexpr, PTX: tl.constexpr):
    """One discrete point's backward for a block of queries, the counterpart of the classic
    ``_bilinear_point_backward`` (it samples its point too): d/d weight = <g, v_pixel>;
    d/d v_pixel += weight * g; no location gradient (the pixel is a step function of the
    location, as the portable path's floor). The value gradient: ``add_value_gradient``."""
    scale = fixed_point_scale(grad_value_ptr)  # deterministic_kernels: unused for float32
    # loaded here, not by _nearest_pixel: the pixel addresses the value gradient
    # (triton_kernels' module doc)
    u = tl.load(loc_ptr + 2 * p_offset, mask=q_mask, other=0.0).to(tl.float32)
    v = tl.load(loc_ptr + 2 * p_offset + 1, mask=q_mask, other=0.0).to(tl.float32)
    weight = tl.load(attn_ptr + p_offset, mask=q_mask, other=0.0).to(tl.float32)
    offset, inside = _nearest_offset(u, v, height, width, start, len_in, row_stride, q_mask,
                                     DTYPE, PTX)
    grad_weight = tl.zeros((BLOCK_Q,), dtype=tl.float32)
    for c0 in range(0, C, BLOCK_C):
        c, c_mask = _channels(c0, C, BLOCK_C)
        g = _grad_out_tile(grad_out_ptr, g_rows, c, c_mask, q_mask)
        m = inside[:, None] & c_mask[None, :]
        pixel = tl.load(value_ptr + head_offset + c[None, :] + offset[:, None], mask=m,
                        other=0.0).to(tl.float32)
        grad_weight += tl.sum(g * pixel, axis=1)
        add_value_gradient(grad_value_ptr + head_offset + c[None, :] + offset[:, None],
                           weight[:, None] * g, m, scale)
    tl.store(grad_attn_ptr + p_offset, grad_weight.to(grad_attn_ptr.dtype.element_ty),
             mask=q_mask)


@triton.jit(do_not_specialize=_SIZES)
def ms_deform_attn_ragged_bwd_kernel(
    value_ptr, shapes_ptr, loc_ptr, attn_ptr, grad_out_ptr,
    grad_value_ptr, grad_loc_ptr, grad_attn_ptr,
    len_in, len_q, heads,
    C: tl.constexpr, LEVELS: tl.constexpr, COUNTS: tl.constexpr, FIRSTS: tl.constexpr,
    COUNT_BITS: tl.constexpr, TOTAL: tl.constexpr, DISCRETE: tl.constexpr, DTYPE: tl.constexpr,
    PTX: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """Grid: (query blocks, batch * heads); channels are looped inside each point's step."""
    q_mask, row_stride, head_offset, out_rows, qh = _query_block(len_in, len_q, heads, C, BLOCK_Q)
    g_rows = out_rows[:, None]  # grad_out has out's layout
    MASK: tl.constexpr = (1 << COUNT_BITS) - 1
    start = 0
    for level in tl.static_range(LEVELS):
        # loaded here, not by _level_size: the sizes address the value gradient
        # (triton_kernels' module doc)
        height = tl.load(shapes_ptr + 2 * level).to(tl.int32)
        width = tl.load(shapes_ptr + 2 * level + 1).to(tl.int32)
        for point in tl.static_range(COUNTS >> COUNT_BITS * level & MASK):
            p_offset = qh * TOTAL + (FIRSTS >> COUNT_BITS * level & MASK) + point
            if DISCRETE:
                _discrete_point_backward(value_ptr, loc_ptr, attn_ptr, grad_out_ptr,
                                         grad_value_ptr, grad_attn_ptr, head_offset, g_rows,
                                         p_offset, height, width, start, len_in, row_stride,
                                         q_mask, C, BLOCK_Q, BLOCK_C, DTYPE, PTX)
            else:
                _bilinear_point_backward(value_ptr, loc_ptr, attn_ptr, grad_out_ptr,
                                         grad_value_ptr, grad_loc_ptr, grad_attn_ptr, head_offset,
                                         g_rows, p_offset, height, width, start, len_in,
                                         row_stride, q_mask, C, BLOCK_Q, BLOCK_C)
        start += height * width

"""Triton kernels for ragged deformable attention, forward and backward. Imports triton.

The classic kernels' layout and tiling (``triton_kernels``), with two differences: the point
count varies by level, and sampling is bilinear or discrete (nearest pixel). Locations are
``(B, len_q, heads, sum(points), 2)`` and weights ``(B, len_q, heads, sum(points))``, level 0's
points first. The per-level counts and first-point indices are compile-time constants packed
``COUNT_BITS`` bits per level into one integer each (``COUNTS``, ``FIRSTS``), so every loop over
points is unrolled as in the classic kernels (the provider chooses ``COUNT_BITS``); a layout
compiles once per (dtype, C, counts, method).

Discrete sampling reads pixel ``floor(u * W + 0.5)`` clamped to ``[0, W - 1]`` per axis, with
the arithmetic rounded as the portable path's tensor ops round it in the input dtype (``W`` and
the product rounded to the dtype, then the sum): the kernel picks the pixel the portable path
picks, bit for bit. Launches pass ``enable_fp_fusion=False``, so ``u * W + 0.5`` is not
contracted into one fma, which would round once where the portable path rounds twice.
"""

import triton
import triton.language as tl

from libreyolo.kernels.attention.ms_deform_attn.triton_kernels import (
    _ZEROING,
    _bilinear_point_backward,
    _corner_offsets,
    _sample_point,
    zero_value_gradient,
)

#: DTYPE constant: which rounding the discrete index arithmetic emulates.
FLOAT32, FLOAT16, BFLOAT16 = 0, 1, 2

_SIZES = ["len_in", "len_q", "heads"]


@triton.jit
def _round_to(x, DTYPE: tl.constexpr):
    """``x`` (float32) rounded to nearest-even in the input dtype, kept in float32. bfloat16 is
    rounded on the bits: the interpreter truncates float32 -> bfloat16 casts (DESIGN.md)."""
    if DTYPE == 1:
        x = x.to(tl.float16).to(tl.float32)
    elif DTYPE == 2:
        bits = x.to(tl.int32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
        x = bits.to(tl.float32, bitcast=True)
    return x


@triton.jit
def _nearest_axis(u, size, DTYPE: tl.constexpr):
    """Discrete sampling's pixel along one axis of ``size`` pixels, as int32."""
    scaled = _round_to(u * _round_to(size.to(tl.float32), DTYPE), DTYPE)
    index = tl.floor(_round_to(scaled + 0.5, DTYPE))
    return tl.minimum(tl.maximum(index, 0.0), (size - 1).to(tl.float32)).to(tl.int32)


@triton.jit
def _nearest_point(loc_ptr, attn_ptr, p_offset, height, width, q_mask, DTYPE: tl.constexpr):
    """One discrete point: its pixel (x, y) and its weight."""
    u = tl.load(loc_ptr + 2 * p_offset, mask=q_mask, other=0.0).to(tl.float32)
    v = tl.load(loc_ptr + 2 * p_offset + 1, mask=q_mask, other=0.0).to(tl.float32)
    weight = tl.load(attn_ptr + p_offset, mask=q_mask, other=0.0).to(tl.float32)
    return _nearest_axis(u, width, DTYPE), _nearest_axis(v, height, DTYPE), weight


@triton.jit(do_not_specialize=_SIZES + _ZEROING)
def ms_deform_attn_ragged_fwd_kernel(
    value_ptr, shapes_ptr, loc_ptr, attn_ptr, out_ptr, grad_value_ptr,
    len_in, len_q, heads, zero_count, zero_share,
    C: tl.constexpr, LEVELS: tl.constexpr, COUNTS: tl.constexpr, FIRSTS: tl.constexpr,
    COUNT_BITS: tl.constexpr, TOTAL: tl.constexpr, DISCRETE: tl.constexpr, DTYPE: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_C: tl.constexpr, ZERO_GRAD_VALUE: tl.constexpr,
    ZERO_BLOCK: tl.constexpr,
):
    """Grid: (query blocks, batch * heads, channel blocks). Accumulates in float32, level by
    level, point by point in the locations' order (for discrete sampling: each term one rounded
    product ``weight * value``, summed in that order). ``ZERO_GRAD_VALUE``: as the classic
    forward's."""
    if ZERO_GRAD_VALUE:
        zero_value_gradient(grad_value_ptr, zero_count, zero_share, ZERO_BLOCK)
    pid_q = tl.program_id(0)
    pid_bh = tl.program_id(1)
    pid_c = tl.program_id(2)
    b = pid_bh // heads
    h = pid_bh % heads
    q = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    q_mask = q < len_q
    c = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    c_mask = c < C
    row_stride = heads * C
    v_base = value_ptr + b * len_in * row_stride + h * C + c[None, :]
    qh = (b * len_q + q) * heads + h
    acc = tl.zeros((BLOCK_Q, BLOCK_C), dtype=tl.float32)
    MASK: tl.constexpr = (1 << COUNT_BITS) - 1
    start = 0
    for level in tl.static_range(LEVELS):
        height = tl.load(shapes_ptr + 2 * level).to(tl.int32)
        width = tl.load(shapes_ptr + 2 * level + 1).to(tl.int32)
        for point in tl.static_range(COUNTS >> COUNT_BITS * level & MASK):
            p_offset = qh * TOTAL + (FIRSTS >> COUNT_BITS * level & MASK) + point
            if DISCRETE:
                x, y, weight = _nearest_point(loc_ptr, attn_ptr, p_offset, height, width,
                                              q_mask, DTYPE)
                offset, inside = _corner_offsets(x, y, height, width, start, len_in,
                                                  row_stride, q_mask)
                pixel = tl.load(v_base + offset[:, None],
                                mask=inside[:, None] & c_mask[None, :], other=0.0)
                acc += weight[:, None] * pixel.to(tl.float32)
            else:
                x0, y0, fx, fy, weight = _sample_point(loc_ptr, attn_ptr, p_offset, height,
                                                       width, q_mask)
                for dy in tl.static_range(2):
                    for dx in tl.static_range(2):
                        offset, inside = _corner_offsets(x0 + dx, y0 + dy, height, width,
                                                         start, len_in, row_stride, q_mask)
                        corner = tl.load(v_base + offset[:, None],
                                         mask=inside[:, None] & c_mask[None, :], other=0.0)
                        wx = fx if dx == 1 else 1.0 - fx
                        wy = fy if dy == 1 else 1.0 - fy
                        acc += (weight * wx * wy)[:, None] * corner.to(tl.float32)
        start += height * width
    out = out_ptr + ((b * len_q + q) * row_stride + h * C)[:, None] + c[None, :]
    # rounded here, so the cast below is exact (and the interpreter's bfloat16 cast is not used)
    tl.store(out, _round_to(acc, DTYPE).to(out_ptr.dtype.element_ty),
             mask=q_mask[:, None] & c_mask[None, :])


@triton.jit
def _discrete_point_backward(value_ptr, grad_out_ptr, grad_value_ptr, grad_attn_ptr,
                             head_offset, g_rows, p_offset, offset, inside, weight, q_mask,
                             C: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_C: tl.constexpr):
    """d/d weight = <g, v_pixel>; d/d v_pixel += weight * g; no location gradient (the pixel
    is a step function of the location, as the portable path's floor)."""
    grad_weight = tl.zeros((BLOCK_Q,), dtype=tl.float32)
    for c0 in range(0, C, BLOCK_C):
        c = c0 + tl.arange(0, BLOCK_C)
        c_mask = c < C
        g = tl.load(grad_out_ptr + g_rows + c[None, :],
                    mask=q_mask[:, None] & c_mask[None, :], other=0.0).to(tl.float32)
        m = inside[:, None] & c_mask[None, :]
        pixel = tl.load(value_ptr + head_offset + c[None, :] + offset[:, None], mask=m,
                        other=0.0).to(tl.float32)
        grad_weight += tl.sum(g * pixel, axis=1)
        tl.atomic_add(grad_value_ptr + head_offset + c[None, :] + offset[:, None],
                      weight[:, None] * g, mask=m)
    tl.store(grad_attn_ptr + p_offset, grad_weight.to(grad_attn_ptr.dtype.element_ty),
             mask=q_mask)


@triton.jit(do_not_specialize=_SIZES)
def ms_deform_attn_ragged_bwd_kernel(
    value_ptr, shapes_ptr, loc_ptr, attn_ptr, grad_out_ptr,
    grad_value_ptr, grad_loc_ptr, grad_attn_ptr,
    len_in, len_q, heads,
    C: tl.constexpr, LEVELS: tl.constexpr, COUNTS: tl.constexpr, FIRSTS: tl.constexpr,
    COUNT_BITS: tl.constexpr, TOTAL: tl.constexpr, DISCRETE: tl.constexpr, DTYPE: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """Grid: (query blocks, batch * heads); channels are looped inside each point's step."""
    pid_q = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // heads
    h = pid_bh % heads
    q = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    q_mask = q < len_q
    row_stride = heads * C
    head_offset = b * len_in * row_stride + h * C
    g_rows = ((b * len_q + q) * row_stride + h * C)[:, None]
    qh = (b * len_q + q) * heads + h
    MASK: tl.constexpr = (1 << COUNT_BITS) - 1
    start = 0
    for level in tl.static_range(LEVELS):
        height = tl.load(shapes_ptr + 2 * level).to(tl.int32)
        width = tl.load(shapes_ptr + 2 * level + 1).to(tl.int32)
        for point in tl.static_range(COUNTS >> COUNT_BITS * level & MASK):
            p_offset = qh * TOTAL + (FIRSTS >> COUNT_BITS * level & MASK) + point
            if DISCRETE:
                x, y, weight = _nearest_point(loc_ptr, attn_ptr, p_offset, height, width,
                                              q_mask, DTYPE)
                offset, inside = _corner_offsets(x, y, height, width, start, len_in,
                                                  row_stride, q_mask)
                _discrete_point_backward(value_ptr, grad_out_ptr, grad_value_ptr,
                                         grad_attn_ptr, head_offset, g_rows, p_offset, offset,
                                         inside, weight, q_mask, C, BLOCK_Q, BLOCK_C)
            else:
                x0, y0, fx, fy, weight = _sample_point(loc_ptr, attn_ptr, p_offset, height,
                                                       width, q_mask)
                _bilinear_point_backward(value_ptr, grad_out_ptr, grad_value_ptr, grad_loc_ptr,
                                         grad_attn_ptr, head_offset, g_rows, p_offset, x0, y0,
                                         fx, fy, weight, height, width, start, len_in,
                                         row_stride, q_mask, C, BLOCK_Q, BLOCK_C)
        start += height * width

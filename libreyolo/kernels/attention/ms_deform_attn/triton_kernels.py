"""Triton kernels for multi-scale deformable attention, forward and backward. Imports triton.

Layout (all contiguous): value ``(B, len_in, heads, C)``, shapes ``(levels, 2)`` int64 on the
device, locations ``(B, len_q, heads, levels, points, 2)``, weights ``(B, len_q, heads, levels,
points)``, output ``(B, len_q, heads * C)``. One program handles a block of queries of one
(batch, head); channels are a vector dimension, so each bilinear corner is one coalesced gather
of a row of C values. Levels' sizes are read inside the kernel and their start offsets summed
there, so the host never reads the device tensor (no sync; CUDA-graph capturable).

Arithmetic is float32 whatever the input dtype. Pixel coordinates follow ``grid_sample`` with
``align_corners=False``: ``x = u * W - 0.5``; corners outside the level read zero.

Torch's ``wrap_triton`` (a compiled graph launching these kernels) finds which tensors a kernel
writes from its TTIR, where each helper is a call: a call result that feeds a store's address
counts every pointer given to that call as written. So a helper whose results address a store
takes no pointer, and what a backward loads to address its value gradient (level sizes,
locations) it loads itself.
"""

import triton
import triton.language as tl

from libreyolo.kernels.attention.ms_deform_attn.deterministic_kernels import (
    add_value_gradient,
    fixed_point_scale,
)


@triton.jit
def _query_block(len_in, len_q, heads, C: tl.constexpr, BLOCK_Q: tl.constexpr):
    """The block of queries of one (batch, head) that this program takes (program ids 0 and 1),
    as every kernel here and in ``ragged_triton_kernels`` tiles: which queries exist, the row
    stride of value and out, the (batch, head)'s offset in value, each query's row offset in out
    (and grad_out), and the (query, head) index into the per-point tensors."""
    pid_q = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // heads
    h = pid_bh % heads
    q = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    q_mask = q < len_q
    row_stride = heads * C
    head_offset = b * len_in * row_stride + h * C
    out_rows = (b * len_q + q) * row_stride + h * C
    qh = (b * len_q + q) * heads + h
    return q_mask, row_stride, head_offset, out_rows, qh


@triton.jit
def _channels(c0, C: tl.constexpr, BLOCK_C: tl.constexpr):
    """Channels ``c0`` to ``c0 + BLOCK_C`` and which exist: a forward program's (``c0`` from
    program id 2) and each backward step's tile, here and in ``ragged_triton_kernels``."""
    c = c0 + tl.arange(0, BLOCK_C)
    return c, c < C


@triton.jit
def _level_size(shapes_ptr, level):
    """Level ``level``'s (height, width), read from the device's shapes (no host sync), as int32
    like every offset in these kernels."""
    height = tl.load(shapes_ptr + 2 * level).to(tl.int32)
    width = tl.load(shapes_ptr + 2 * level + 1).to(tl.int32)
    return height, width


@triton.jit
def _corner_offsets(xi, yi, height, width, start, len_in, row_stride, q_mask):
    """Row offsets of pixel (yi, xi) of the level starting at ``start``, and where it exists."""
    inside = q_mask & (xi >= 0) & (xi < width) & (yi >= 0) & (yi < height)
    row = start + yi * width + xi
    # A spatial_shapes that overstates len_in (or overflows int32) must not read or write
    # outside the value tensor.
    inside = inside & (row >= 0) & (row < len_in)
    return tl.where(inside, row, 0) * row_stride, inside


@triton.jit
def _sample_point(loc_ptr, attn_ptr, lp_offset, height, width, q_mask):
    """Load one point's location and weight; return its corners' coordinates and weights."""
    u = tl.load(loc_ptr + 2 * lp_offset, mask=q_mask, other=0.0).to(tl.float32)
    v = tl.load(loc_ptr + 2 * lp_offset + 1, mask=q_mask, other=0.0).to(tl.float32)
    weight = tl.load(attn_ptr + lp_offset, mask=q_mask, other=0.0).to(tl.float32)
    x0, y0, fx, fy = _corner(u, v, height, width)
    return x0, y0, fx, fy, weight


@triton.jit
def _corner(u, v, height, width):
    """The top-left corner (x0, y0) of location (u, v) (float32) on a level, and the location's
    fractions (fx, fy) past it."""
    # A non-finite coordinate (NaN fails every comparison) moves a whole level outside, where
    # it reads zero with a zero gradient: the portable core's rule, made explicit because the
    # interpreter's maximum propagates NaN where the GPU's drops it.
    u = tl.where(tl.abs(u) < float("inf"), u, -1.0)
    v = tl.where(tl.abs(v) < float("inf"), v, -1.0)
    # Clamping keeps far-away locations from overflowing int32; beyond the pad every corner
    # is outside the level either way, so the result and its gradient (zero) are unchanged.
    x = tl.minimum(tl.maximum(u * width.to(tl.float32) - 0.5, -2.0), width.to(tl.float32) + 1.0)
    y = tl.minimum(tl.maximum(v * height.to(tl.float32) - 0.5, -2.0), height.to(tl.float32) + 1.0)
    x0f = tl.floor(x)
    y0f = tl.floor(y)
    return x0f.to(tl.int32), y0f.to(tl.int32), x - x0f, y - y0f


@triton.jit
def _bilinear_accumulate(acc, v_base, loc_ptr, attn_ptr, p_offset, height, width, start, len_in,
                         row_stride, q_mask, c_mask):
    """``acc`` plus one point's weighted bilinear sample, for a block of queries and channels
    (both forwards' step). The four corners are added to ``acc`` one at a time, in this order,
    so the float32 sums round as they always have."""
    x0, y0, fx, fy, weight = _sample_point(loc_ptr, attn_ptr, p_offset, height, width, q_mask)
    for dy in tl.static_range(2):
        for dx in tl.static_range(2):
            offset, inside = _corner_offsets(x0 + dx, y0 + dy, height, width, start, len_in,
                                             row_stride, q_mask)
            corner = tl.load(v_base + offset[:, None], mask=inside[:, None] & c_mask[None, :],
                             other=0.0)
            wx = fx if dx == 1 else 1.0 - fx
            wy = fy if dy == 1 else 1.0 - fy
            acc += (weight * wx * wy)[:, None] * corner.to(tl.float32)
    return acc


@triton.jit
def _grad_out_tile(grad_out_ptr, g_rows, c, c_mask, q_mask):
    """Channels ``c`` (``_channels``) of the output gradient's rows ``g_rows``, in float32: the
    tile each backward point step loops over (here and in ``ragged_triton_kernels``)."""
    return tl.load(grad_out_ptr + g_rows + c[None, :], mask=q_mask[:, None] & c_mask[None, :],
                   other=0.0).to(tl.float32)


@triton.jit
def zero_value_gradient(grad_value_ptr, zero_count, zero_share, ZERO_BLOCK: tl.constexpr):
    """This program's share of the value gradient's ``zero_count`` float32 zeros: a forward that
    allocated the backward's buffers zeroes it here instead of a fill kernel launched beside it,
    which cost more host time than the rest of the allocation (benchmarks/NOTES.md, "MSDA v9").
    The programs, in launch order, each store one contiguous run of ``zero_share`` (a multiple
    of ``ZERO_BLOCK``, worked out by the provider from the grid's size, which bounds it)."""
    pid = tl.program_id(0) + tl.num_programs(0) * (tl.program_id(1)
                                                   + tl.num_programs(1) * tl.program_id(2))
    first = pid.to(tl.int64) * zero_share
    zeros = tl.zeros((ZERO_BLOCK,), tl.float32)
    # a while loop: the interpreter (CI) cannot take a ``range`` bounded by a kernel argument
    # (its scalars are 1-element arrays, which NumPy 2 refuses to read as an index)
    offset = 0
    while offset < zero_share:
        index = first + offset + tl.arange(0, ZERO_BLOCK)
        tl.store(grad_value_ptr + index, zeros, mask=index < zero_count)
        offset += ZERO_BLOCK


# Sizes are not specialized: one compiled kernel per (dtype, C, levels, points) serves every
# batch and sequence length (alignment comes from the constexpr C).
_SIZES = ["len_in", "len_q", "heads"]


# The forward's zeroing sizes vary with the value's too.
_ZEROING = ["zero_count", "zero_share"]


@triton.jit(do_not_specialize=_SIZES + _ZEROING)
def ms_deform_attn_fwd_kernel(
    value_ptr, shapes_ptr, loc_ptr, attn_ptr, out_ptr, grad_value_ptr,
    len_in, len_q, heads, zero_count, zero_share,
    C: tl.constexpr, LEVELS: tl.constexpr, POINTS: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_C: tl.constexpr, ZERO_GRAD_VALUE: tl.constexpr,
    ZERO_BLOCK: tl.constexpr,
):
    """Grid: (query blocks, batch * heads, channel blocks). With ``ZERO_GRAD_VALUE`` the programs
    also zero ``grad_value`` (``zero_value_gradient``); without, it is never touched."""
    if ZERO_GRAD_VALUE:
        zero_value_gradient(grad_value_ptr, zero_count, zero_share, ZERO_BLOCK)
    q_mask, row_stride, head_offset, out_rows, qh = _query_block(len_in, len_q, heads, C, BLOCK_Q)
    c, c_mask = _channels(tl.program_id(2) * BLOCK_C, C, BLOCK_C)
    v_base = value_ptr + head_offset + c[None, :]
    acc = tl.zeros((BLOCK_Q, BLOCK_C), dtype=tl.float32)
    start = 0
    for level in tl.static_range(LEVELS):
        height, width = _level_size(shapes_ptr, level)
        for point in tl.static_range(POINTS):
            lp_offset = qh * (LEVELS * POINTS) + level * POINTS + point
            acc = _bilinear_accumulate(acc, v_base, loc_ptr, attn_ptr, lp_offset, height, width,
                                       start, len_in, row_stride, q_mask, c_mask)
        start += height * width
    out = out_ptr + out_rows[:, None] + c[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=q_mask[:, None] & c_mask[None, :])


@triton.jit(do_not_specialize=_SIZES)
def ms_deform_attn_bwd_kernel(
    value_ptr, shapes_ptr, loc_ptr, attn_ptr, grad_out_ptr,
    grad_value_ptr, grad_loc_ptr, grad_attn_ptr,
    len_in, len_q, heads,
    C: tl.constexpr, LEVELS: tl.constexpr, POINTS: tl.constexpr,
    BLOCK_Q: tl.constexpr, BLOCK_C: tl.constexpr, SPLIT_LEVELS: tl.constexpr,
):
    """Grid: (query blocks, batch * heads, LEVELS if SPLIT_LEVELS else 1). Channels are looped
    inside the program, so the location and weight gradients (sums over channels) are complete
    here and stored once; grad_value (float32) takes atomic adds because many queries sample the
    same pixel. ``SPLIT_LEVELS``: each program takes one level's points (its third program id),
    so a decoder's few query blocks make LEVELS times as many, shorter programs.

    With ``s = sum_corners w_corner * v_corner`` and ``g`` the output gradient:
    ``d/d weight = <g, s>``; ``d/d v_corner += weight * w_corner * g``;
    ``d/d u = weight * W * <g, (1-fy)(v01-v00) + fy(v11-v10)>`` and
    ``d/d v = weight * H * <g, (1-fx)(v10-v00) + fx(v11-v01)>`` (v_yx: corner offsets).
    """
    q_mask, row_stride, head_offset, out_rows, qh = _query_block(len_in, len_q, heads, C, BLOCK_Q)
    g_rows = out_rows[:, None]  # grad_out has out's layout
    if SPLIT_LEVELS:
        level = tl.program_id(2)
        start = 0
        for earlier in tl.static_range(LEVELS - 1):  # this level's first row
            height = tl.load(shapes_ptr + 2 * earlier).to(tl.int32)  # loaded here (module doc)
            width = tl.load(shapes_ptr + 2 * earlier + 1).to(tl.int32)
            start += tl.where(earlier < level, height * width, 0)
        height = tl.load(shapes_ptr + 2 * level).to(tl.int32)
        width = tl.load(shapes_ptr + 2 * level + 1).to(tl.int32)
        _backward_level(value_ptr, loc_ptr, attn_ptr, grad_out_ptr, grad_value_ptr,
                        grad_loc_ptr, grad_attn_ptr, len_in, level, height, width, start, qh,
                        q_mask, g_rows, head_offset, row_stride, C, LEVELS, POINTS, BLOCK_Q,
                        BLOCK_C)
    else:
        start = 0
        for level in tl.static_range(LEVELS):
            height = tl.load(shapes_ptr + 2 * level).to(tl.int32)
            width = tl.load(shapes_ptr + 2 * level + 1).to(tl.int32)
            _backward_level(value_ptr, loc_ptr, attn_ptr, grad_out_ptr, grad_value_ptr,
                            grad_loc_ptr, grad_attn_ptr, len_in, level, height, width, start,
                            qh, q_mask, g_rows, head_offset, row_stride, C, LEVELS, POINTS,
                            BLOCK_Q, BLOCK_C)
            start += height * width


@triton.jit
def _backward_level(value_ptr, loc_ptr, attn_ptr, grad_out_ptr, grad_value_ptr, grad_loc_ptr,
                    grad_attn_ptr, len_in, level, height, width, start, qh, q_mask, g_rows,
                    head_offset, row_stride, C: tl.constexpr, LEVELS: tl.constexpr,
                    POINTS: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_C: tl.constexpr):
    """The backward of one level's points for a block of queries of one (batch, head), the
    level (``height`` x ``width``) rows starting at ``start``."""
    for point in tl.static_range(POINTS):
        lp_offset = qh * (LEVELS * POINTS) + level * POINTS + point
        _bilinear_point_backward(value_ptr, loc_ptr, attn_ptr, grad_out_ptr, grad_value_ptr,
                                 grad_loc_ptr, grad_attn_ptr, head_offset, g_rows, lp_offset,
                                 height, width, start, len_in, row_stride, q_mask, C, BLOCK_Q,
                                 BLOCK_C)


@triton.jit
def _bilinear_point_backward(value_ptr, loc_ptr, attn_ptr, grad_out_ptr, grad_value_ptr,
                             grad_loc_ptr, grad_attn_ptr, head_offset, g_rows, p_offset, height,
                             width, start, len_in, row_stride, q_mask, C: tl.constexpr,
                             BLOCK_Q: tl.constexpr, BLOCK_C: tl.constexpr):
    """One point's backward for a block of queries (``ms_deform_attn_bwd_kernel`` states the
    derivatives; the ragged backward takes the same step): the weight and location gradients,
    complete over the channels, stored at ``p_offset``; the value gradient by float32 atomic
    adds, or int64 fixed-point ones when it is the deterministic backward's accumulator."""
    scale = fixed_point_scale(grad_value_ptr)  # deterministic_kernels: unused for float32
    # loaded here, not by _sample_point: the corners address the value gradient (module doc)
    u = tl.load(loc_ptr + 2 * p_offset, mask=q_mask, other=0.0).to(tl.float32)
    v = tl.load(loc_ptr + 2 * p_offset + 1, mask=q_mask, other=0.0).to(tl.float32)
    weight = tl.load(attn_ptr + p_offset, mask=q_mask, other=0.0).to(tl.float32)
    x0, y0, fx, fy = _corner(u, v, height, width)
    o00, in00 = _corner_offsets(x0, y0, height, width, start, len_in, row_stride, q_mask)
    o01, in01 = _corner_offsets(x0 + 1, y0, height, width, start, len_in, row_stride, q_mask)
    o10, in10 = _corner_offsets(x0, y0 + 1, height, width, start, len_in, row_stride, q_mask)
    o11, in11 = _corner_offsets(x0 + 1, y0 + 1, height, width, start, len_in, row_stride,
                                q_mask)
    w00 = (1.0 - fx) * (1.0 - fy)
    w01 = fx * (1.0 - fy)
    w10 = (1.0 - fx) * fy
    w11 = fx * fy
    grad_weight = tl.zeros((BLOCK_Q,), dtype=tl.float32)
    grad_x = tl.zeros((BLOCK_Q,), dtype=tl.float32)
    grad_y = tl.zeros((BLOCK_Q,), dtype=tl.float32)
    for c0 in range(0, C, BLOCK_C):
        c, c_mask = _channels(c0, C, BLOCK_C)
        g = _grad_out_tile(grad_out_ptr, g_rows, c, c_mask, q_mask)
        v_ptr = value_ptr + head_offset + c[None, :]
        gv_ptr = grad_value_ptr + head_offset + c[None, :]
        m00 = in00[:, None] & c_mask[None, :]
        m01 = in01[:, None] & c_mask[None, :]
        m10 = in10[:, None] & c_mask[None, :]
        m11 = in11[:, None] & c_mask[None, :]
        v00 = tl.load(v_ptr + o00[:, None], mask=m00, other=0.0).to(tl.float32)
        v01 = tl.load(v_ptr + o01[:, None], mask=m01, other=0.0).to(tl.float32)
        v10 = tl.load(v_ptr + o10[:, None], mask=m10, other=0.0).to(tl.float32)
        v11 = tl.load(v_ptr + o11[:, None], mask=m11, other=0.0).to(tl.float32)
        sampled = (w00[:, None] * v00 + w01[:, None] * v01
                   + w10[:, None] * v10 + w11[:, None] * v11)
        grad_weight += tl.sum(g * sampled, axis=1)
        grad_x += tl.sum(g * ((1.0 - fy)[:, None] * (v01 - v00) + fy[:, None] * (v11 - v10)),
                         axis=1)
        grad_y += tl.sum(g * ((1.0 - fx)[:, None] * (v10 - v00) + fx[:, None] * (v11 - v01)),
                         axis=1)
        weighted = weight[:, None] * g
        add_value_gradient(gv_ptr + o00[:, None], w00[:, None] * weighted, m00, scale)
        add_value_gradient(gv_ptr + o01[:, None], w01[:, None] * weighted, m01, scale)
        add_value_gradient(gv_ptr + o10[:, None], w10[:, None] * weighted, m10, scale)
        add_value_gradient(gv_ptr + o11[:, None], w11[:, None] * weighted, m11, scale)
    tl.store(grad_attn_ptr + p_offset, grad_weight.to(grad_attn_ptr.dtype.element_ty),
             mask=q_mask)
    grad_u = weight * width.to(tl.float32) * grad_x
    grad_v = weight * height.to(tl.float32) * grad_y
    tl.store(grad_loc_ptr + 2 * p_offset, grad_u.to(grad_loc_ptr.dtype.element_ty), mask=q_mask)
    tl.store(grad_loc_ptr + 2 * p_offset + 1, grad_v.to(grad_loc_ptr.dtype.element_ty),
             mask=q_mask)

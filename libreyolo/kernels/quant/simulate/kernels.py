"""The Triton kernels: one fake-quantizer for every format and scale mode, and a finite-amax pass.

The data is seen as a row-major ``(rows, cols)`` matrix cut into *units*: runs of ``unit``
consecutive columns of one row (the last unit of a row may be ragged). A program handles
``BLOCK_UNITS`` units as a ``[BLOCK_UNITS, UNIT_PAD]`` tile, so a scale that belongs to a unit (a
block, a group, a whole row) is computed from the tile alone, and per-row and per-column scales
are indexed per unit or per lane, never by a per-element division.

Exactness rules (docs/quantization.md; docs/architecture.md, "Facts for kernel authors"):
- everything is computed in float32; division by a scale is ``tl.div_rn`` (IEEE, correctly
  rounded), scaling onto a grid is by exact powers of two built from exponent bits;
- round-to-nearest-even is the 2^23 trick, ``(|v| + 2^23) - 2^23``, exact for ``|v| < 2^23``;
- no fp8 or bf16 casts, no libdevice, no inline asm: the interpreter reproduces every operation,
  so CPU runs under ``TRITON_INTERPRET=1`` check the same arithmetic the GPU runs;
- inputs and outputs move as integer bits: bf16 is widened by a shift, results are rounded to
  bf16 in integer arithmetic, and NaN outputs are written as the canonical quiet NaN explicitly
  (the GPU's own NaN is ``0x7FFFFFFF``);
- launches pass ``enable_fp_fusion=False`` so no multiply is contracted into an add.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...triton_kit import FloatKind
from .plan import AmaxFrom, ScaleRule, ScaleSource

# The plan's codes as constexpr globals (the only globals a Triton kernel may read).
FLOAT32 = tl.constexpr(int(FloatKind.FLOAT32))
FLOAT16 = tl.constexpr(int(FloatKind.FLOAT16))
TENSOR = tl.constexpr(int(ScaleSource.TENSOR))
PER_ROW = tl.constexpr(int(ScaleSource.PER_ROW))
PER_COL = tl.constexpr(int(ScaleSource.PER_COL))
OF_UNIT = tl.constexpr(int(AmaxFrom.UNIT))
RULE_E8M0 = tl.constexpr(int(ScaleRule.E8M0))
RULE_NVFP4 = tl.constexpr(int(ScaleRule.NVFP4))


@triton.jit
def _round_half_even(v):
    """``v`` rounded to an integer, ties to even, sign kept (``-0.3 -> -0.0``); ``|v| >= 2^23``
    (already integral) and ±inf pass through."""
    magnitude = tl.abs(v)
    rounded = (magnitude + 8388608.0) - 8388608.0
    sign = v.to(tl.uint32, bitcast=True) & 0x80000000
    signed = (rounded.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True)
    return tl.where(magnitude < 8388608.0, signed, v)


@triton.jit
def _power_of_two(exponent):
    """2^exponent as float32, for integer exponents in [-127, 127] (2^-127 is subnormal)."""
    normal = (exponent + 127).to(tl.uint32) << 23
    return tl.where(exponent >= -126, normal, 0x00400000).to(tl.float32, bitcast=True)


@triton.jit
def _round_to_float_grid(y, MBITS: tl.constexpr, EMIN: tl.constexpr):
    """``y`` rounded to nearest-even on the grid of spacing 2^(max(floor(log2|y|), EMIN) - MBITS),
    unbounded above (the caller saturates). inf stays inf; NaN stays NaN."""
    biased = ((y.to(tl.uint32, bitcast=True) >> 23) & 0xFF).to(tl.int32)
    # biased 0 (zero, subnormal) -> -127 -> EMIN; 255 (inf, NaN) -> 128 -> 127 so 2^-e stays normal.
    exponent = tl.minimum(tl.maximum(biased - 127, EMIN), 127)
    up = ((MBITS - exponent + 127).to(tl.uint32) << 23).to(tl.float32, bitcast=True)
    down = ((exponent - MBITS + 127).to(tl.uint32) << 23).to(tl.float32, bitcast=True)
    return _round_half_even(y * up) * down


@triton.jit
def _finite_abs(x, valid):
    """|x| where x is finite and inside the tensor, 0 elsewhere: the amax of rule 6 ignores
    NaN and ±inf (``tl.max`` would drop NaN anyway; inf must be dropped explicitly)."""
    magnitude = tl.abs(x)
    return tl.where(valid & (magnitude < float("inf")), magnitude, 0.0)


@triton.jit
def _load_float32(ptr, offsets, valid, IN_KIND: tl.constexpr):
    """Load elements as float32: float16 widens exactly; bfloat16 (read as int16) by a shift."""
    raw = tl.load(ptr + offsets, mask=valid, other=0)
    if IN_KIND != FLOAT32 and IN_KIND != FLOAT16:  # bfloat16 bits
        return (raw.to(tl.int32) << 16).to(tl.float32, bitcast=True)
    else:
        return raw.to(tl.float32)


@triton.jit
def _finite_amax(x_ptr, base, length, first, step,
                 IN_KIND: tl.constexpr, CHUNK: tl.constexpr, ITERATIONS: tl.constexpr):
    """The finite amax of chunks ``first, first + step, ...`` (``ITERATIONS`` of them, each
    ``CHUNK`` elements) of the ``length`` elements from ``x_ptr + base``; chunks past the end
    read nothing. Shared by the amax pass (one program per partial) and the quantizing pass of
    a small NVFP4 tensor (each program reduces the whole tensor itself)."""
    lanes = tl.arange(0, CHUNK)
    running = tl.zeros([CHUNK], dtype=tl.float32)
    for i in range(ITERATIONS):
        col = tl.cast(first + i * step, tl.int64) * CHUNK + lanes
        valid = col < length
        x = _load_float32(x_ptr, base + col, valid, IN_KIND)
        running = tl.maximum(running, _finite_abs(x, valid))
    return tl.max(running, axis=0)


@triton.jit
def _output_bits(value, is_nan, IN_KIND: tl.constexpr):
    """The bits to store for float32 ``value`` in the input's dtype, rounded to nearest-even,
    with NaN written as that dtype's canonical quiet NaN."""
    if IN_KIND == FLOAT32:
        bits = value.to(tl.int32, bitcast=True)
        return tl.where(is_nan, 0x7FC00000, bits)
    elif IN_KIND == FLOAT16:
        bits = value.to(tl.float16).to(tl.int16, bitcast=True)
        return tl.where(is_nan, 0x7E00, bits).to(tl.int16)
    else:
        wide = value.to(tl.uint32, bitcast=True)
        rounded = (wide + (0x7FFF + ((wide >> 16) & 1))) >> 16
        bits = tl.where(is_nan, 0x7FC0, rounded.to(tl.int32))
        return (((bits + 0x8000) & 0xFFFF) - 0x8000).to(tl.int16)  # two's complement int16


@triton.jit
def _e8m0_exponent(amax, ELEMENT_EMAX: tl.constexpr):
    """The E8M0 scale's exponent, clamp(floor(log2 amax) - element_emax, -127, 127)."""
    biased = ((amax.to(tl.uint32, bitcast=True) >> 23) & 0xFF).to(tl.int32)
    # floor(log2(amax)) of a subnormal is below -126: the clamp covers it exactly.
    return tl.minimum(tl.maximum(biased - 127 - ELEMENT_EMAX, -127), 127)


@triton.jit
def _amax_to_scale(amax, AMAX_DIVISOR: tl.constexpr):
    """Rule 6: amax / divisor (IEEE division) from a finite amax; an amax of zero gives 1.
    (E8M0 scales are built inline, with their exact reciprocal.)"""
    scale = tl.div_rn(amax, tl.full(amax.shape, AMAX_DIVISOR, tl.float32))
    return tl.where(amax > 0.0, scale, 1.0)


@triton.jit
def fake_quant_kernel(
    x_ptr, out_ptr, grad_ptr, scale_ptr, partials_ptr,
    n_units, units_per_row, cols, unit, channels, n_partials, zero_point,
    IN_KIND: tl.constexpr,
    FLOAT_GRID: tl.constexpr, QMIN: tl.constexpr, QMAX: tl.constexpr,
    MBITS: tl.constexpr, EMIN: tl.constexpr, FMAX: tl.constexpr,
    SCALE_SOURCE: tl.constexpr, AMAX_FROM: tl.constexpr, SCALE_RULE: tl.constexpr,
    AMAX_DIVISOR: tl.constexpr, ELEMENT_EMAX: tl.constexpr,
    SCALE_MBITS: tl.constexpr, SCALE_EMIN: tl.constexpr, SCALE_MAX: tl.constexpr,
    HAS_ZERO_POINT: tl.constexpr, BACKWARD: tl.constexpr,
    BLOCK_UNITS: tl.constexpr, UNIT_PAD: tl.constexpr, PARTIALS_PAD: tl.constexpr,
    INLINE_AMAX_ITERATIONS: tl.constexpr,
):
    """Forward: ``out = fake_quant(x)``. Backward (``BACKWARD``): ``out = where(mask, grad, 0)``
    with the straight-through mask of the same elements, recomputed from ``x``.

    ``grad_ptr`` is read only in backward and ``partials_ptr`` only for amax-derived scales
    (row partials, or the NVFP4 tensor amax); callers pass any tensor otherwise. ``SCALE_*``
    describe the grid of NVFP4's block scales (E4M3), unused by the other rules.
    ``INLINE_AMAX_ITERATIONS`` > 0 (NVFP4 on a tensor of a few tiles, no amax pass): each
    program finds the tensor amax itself, reading the whole tensor in that many tile-sized
    chunks (a power of two), and backward recomputes it the same way, so both see one amax.
    """
    # Tiles in reverse launch order: the tensor's tail comes first, which is what the producer
    # of ``x`` (or the amax pass, which reads its chunks in order) touched last and L2 still
    # holds. Each tile's arithmetic is its own, so the order cannot change a bit.
    pid = tl.num_programs(0) - 1 - tl.program_id(0)
    units = pid * BLOCK_UNITS + tl.arange(0, BLOCK_UNITS)
    lanes = tl.arange(0, UNIT_PAD)
    row = units // units_per_row
    col = (units - row * units_per_row)[:, None] * unit + lanes[None, :]
    valid = (units < n_units)[:, None] & (lanes < unit)[None, :] & (col < cols)
    offsets = row.to(tl.int64)[:, None] * cols + col
    x = _load_float32(x_ptr, offsets, valid, IN_KIND)

    if SCALE_SOURCE == TENSOR:
        scale = tl.load(scale_ptr + tl.zeros([BLOCK_UNITS, 1], dtype=tl.int32))
    elif SCALE_SOURCE == PER_ROW:
        scale = tl.load(scale_ptr + row % channels, mask=units < n_units, other=1.0)[:, None]
    elif SCALE_SOURCE == PER_COL:
        scale = tl.load(scale_ptr + col, mask=valid, other=1.0)
    else:
        if AMAX_FROM == OF_UNIT:
            amax = tl.max(_finite_abs(x, valid), axis=1)
        else:
            slots = tl.arange(0, PARTIALS_PAD)
            in_row = (units < n_units)[:, None] & (slots < n_partials)[None, :]
            partial = tl.load(partials_ptr + row[:, None] * n_partials + slots[None, :],
                              mask=in_row, other=0.0)
            amax = tl.max(partial, axis=1)
        if SCALE_RULE == RULE_NVFP4:
            if INLINE_AMAX_ITERATIONS > 0:  # a small tensor: its amax, read whole by each program
                tensor_amax = _finite_amax(x_ptr, 0, (n_units // units_per_row) * cols, 0, 1,
                                           IN_KIND, BLOCK_UNITS * UNIT_PAD,
                                           INLINE_AMAX_ITERATIONS)
            else:
                slots = tl.arange(0, PARTIALS_PAD)
                tensor_amax = tl.max(tl.load(partials_ptr + slots, mask=slots < n_partials,
                                             other=0.0), axis=0)
            tensor_scale = _amax_to_scale(tensor_amax, AMAX_DIVISOR)
            divisor = tensor_scale * FMAX  # FMAX: the E2M1 max, 6
            divisor = tl.where(divisor == 0.0, 1.0, divisor)
            block = tl.where(amax == 0.0, 1.0, tl.div_rn(amax, divisor))
            block = tl.minimum(_round_to_float_grid(block, SCALE_MBITS, SCALE_EMIN), SCALE_MAX)
            scale = (block * tensor_scale)[:, None]
        elif SCALE_RULE == RULE_E8M0:
            exponent = _e8m0_exponent(amax, ELEMENT_EMAX)
            scale = tl.where(amax > 0.0, _power_of_two(exponent), 1.0)[:, None]
            inverse = tl.where(amax > 0.0, _power_of_two(-exponent), 1.0)[:, None]
        else:
            scale = _amax_to_scale(amax, AMAX_DIVISOR)[:, None]

    nonzero_scale = scale != 0.0
    if SCALE_RULE == RULE_E8M0:  # only FROM_AMAX plans use this rule
        # Division by 2^e is multiplication by 2^-e, which is exact for every e in [-127, 127]
        # (2^-127 is a subnormal, still exact): the real quotient and the real product are the
        # same number, so one round-to-nearest-even gives the same bits, subnormal results,
        # zeros, infinities and NaN included. It saves the ~10-instruction IEEE division.
        y = x * inverse
    else:
        y = tl.div_rn(x, tl.where(nonzero_scale, scale, 1.0))
    if FLOAT_GRID:
        level = _round_to_float_grid(y, MBITS, EMIN)
        in_range = tl.abs(level) <= FMAX
        level = tl.where(in_range, level, tl.where(level < 0.0, -FMAX, FMAX))
    else:
        level = _round_half_even(y)
        level = tl.where(level == 0.0, 0.0, level)  # integer codes have no -0
        if HAS_ZERO_POINT:
            level = level + zero_point
        in_range = (level >= QMIN) & (level <= QMAX)
        level = tl.minimum(tl.maximum(level, QMIN), QMAX)
        if HAS_ZERO_POINT:
            level = level - zero_point
    keep = in_range & nonzero_scale  # false for NaN and ±inf: their level is never in range

    if BACKWARD:
        grad = tl.load(grad_ptr + offsets, mask=valid, other=0)
        bits = tl.where(keep, grad, 0)
    else:
        value = tl.where(nonzero_scale, level * scale, 0.0)
        bits = _output_bits(value, x != x, IN_KIND)
    # ``out`` is the output itself (float32, float16: no view per call) or bfloat16's int16
    # bits; either way the bits are stored unchanged (a bitcast, never a conversion)
    tl.store(out_ptr + offsets, bits.to(out_ptr.dtype.element_ty, bitcast=True), mask=valid)


@triton.jit
def finite_amax_partials_kernel(
    x_ptr, partials_ptr, cols, n_partials,
    IN_KIND: tl.constexpr, CHUNK: tl.constexpr, ITERATIONS: tl.constexpr,
):
    """``partials[r, p]`` = finite amax of row ``r``'s chunks ``p, p + n_partials, ...``.

    The first pass of the ops whose scale needs more elements than one tile holds (the NVFP4
    tensor scale, per-row scales of very long rows). A fixed, small number of partials per row
    (no atomics, no zero-filled buffer) keeps it deterministic and lets the quantizing pass
    reduce them itself, so such an op costs two launches and one extra read of the input.
    ``ITERATIONS`` is a power of two (constexpr: the interpreter cannot loop to a runtime bound),
    so a handful of compiled variants cover every size.
    """
    r = tl.program_id(0)
    p = tl.program_id(1)
    amax = _finite_amax(x_ptr, r.to(tl.int64) * cols, cols, p, n_partials,
                        IN_KIND, CHUNK, ITERATIONS)
    tl.store(partials_ptr + r * n_partials + p, amax)

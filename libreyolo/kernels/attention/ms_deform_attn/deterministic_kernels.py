"""Triton kernels and helpers of the deterministic value gradient (``deterministic.py`` gives the
design, its error bound and its NaN rule). Imports triton.

The accumulator is an int64 tensor of ``HEADER + value.numel()`` elements: the header holds the
two maxima the scale is made from (float32 bit patterns, written by ``gradient_bound_kernel``),
the rest the value gradient in units of ``1 / scale``. Every kernel is handed the whole
accumulator and finds the header at its start and the value gradient ``HEADER`` elements on,
never a view past the header: a compiled graph copies a view that a kernel writes without the
memory around it, and a header read before the view's start then read whatever preceded the copy
(under inductor the value gradient came out 2**106 times too large: ``benchmarks/NOTES.md``). The
backward kernels keep their signature: whether a backward accumulates in float32 atomics or in
fixed point is the value gradient pointer's element type, a compile-time fact (one compiled
kernel for each).

Every kernel here works the scale out from the header with the same integer and float32
operations, so each gets the same bits without a host sync or another launch.
"""

import triton
import triton.language as tl

#: int64 elements before the fixed-point value gradient: max fl(|g| * hits) and max |w|.
HEADER = tl.constexpr(2)
#: The largest sum is kept below 2**FIXED_BITS (int64 holds 2**63 - 1: one bit of headroom for
#: the roundings of the bound, see ``deterministic.py``).
FIXED_BITS = tl.constexpr(62)
#: Bounds below 2**MIN_EXPONENT use the scale of 2**MIN_EXPONENT, 2**126: its reciprocal
#: 2**-126 is float32's smallest normal, so the conversion's multiply stays exact.
MIN_EXPONENT = tl.constexpr(-64)
#: 2**23: adding and subtracting it rounds a float32 below it to the nearest integer, ties to
#: even (the interpreter has no libdevice ``rint``).
ROUNDING = tl.constexpr(8388608.0)


@triton.jit
def _header_exponent(header_ptr):
    """(e, finite): the bound ``B = fl(H0 * H1)`` read from the header, and ``e = ceil(log2 B)``
    clamped below at ``MIN_EXPONENT`` (so ``2**e >= B``, and ``2**e < 2 * B`` unless clamped).
    ``finite`` is false when B is NaN or infinite (a NaN or inf among the maxima, or their
    product beyond float32): the NaN rule of ``deterministic.py``."""
    g = tl.load(header_ptr).to(tl.int32).to(tl.float32, bitcast=True)
    w = tl.load(header_ptr + 1).to(tl.int32).to(tl.float32, bitcast=True)
    bits = (g * w).to(tl.int32, bitcast=True)
    biased = (bits >> 23) & 0xFF
    exponent = biased - 127 + ((bits & 0x7FFFFF) != 0).to(tl.int32)  # ceil: up unless 2**k
    return tl.maximum(exponent, MIN_EXPONENT), biased != 0xFF


@triton.jit
def _power_of_two(exponent):
    """2**exponent as float32, built from its bits (exponent within float32's normal range)."""
    return ((exponent + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def fixed_point_scale(grad_value_ptr):
    """The scale of a fixed-point (int64) value gradient, the accumulator ``grad_value_ptr``:
    ``2**(FIXED_BITS - e)``, or 0 when the bound is not finite (contributions are then dropped;
    the conversion makes them NaN). For a float32 value gradient (the atomic backward) 0.0,
    unused: nothing is loaded."""
    scale = 0.0
    if grad_value_ptr.dtype.element_ty == tl.int64:
        exponent, finite = _header_exponent(grad_value_ptr)
        # the tensor first: the interpreter's constexpr - tensor is a constexpr
        scale = tl.where(finite, _power_of_two(-exponent + FIXED_BITS), 0.0)
    return scale


@triton.jit
def _to_fixed_point(contribution, scale):
    """``round(contribution * scale)`` as int64, to nearest, ties to even. The product is exact
    (a power of two; ``|product| <= 2**62``); below 2**23 the 2**23 trick rounds it, above it is an
    integer already. A zero scale (non-finite bound) gives zeros, never a cast of a NaN."""
    scaled = tl.where(scale > 0.0, contribution * scale, 0.0)
    size = tl.abs(scaled)
    rounded = tl.where(size < ROUNDING, (size + ROUNDING) - ROUNDING, size).to(tl.int64)
    return tl.where(scaled < 0.0, -rounded, rounded)


@triton.jit
def add_value_gradient(pointers, contribution, mask, scale):
    """Add float32 ``contribution`` to the value gradient at ``pointers`` (the value gradient's
    pointer plus the elements' offsets): float32 atomic adds (the atomic backward: the order of the
    adds, hence the bits, varies run to run), or int64 atomic adds of its fixed-point value when
    the gradient is the int64 accumulator, past its header (integer addition is associative: any
    order gives the same bits). ``scale`` is ``fixed_point_scale(grad_value_ptr)``."""
    if pointers.dtype.element_ty == tl.int64:
        tl.atomic_add(pointers + HEADER, _to_fixed_point(contribution, scale), mask=mask,
                      sem="relaxed")
    else:
        tl.atomic_add(pointers, contribution, mask=mask)


_SIZES = ["grad_count", "weight_count", "hits"]


@triton.jit(do_not_specialize=_SIZES)
def gradient_bound_kernel(grad_out_ptr, weights_ptr, fixed_ptr, grad_count, weight_count, hits,
                          BLOCK: tl.constexpr):
    """Grid: (cdiv(max(grad_count, weight_count), BLOCK),). Writes the header of the zeroed
    accumulator ``fixed_ptr``: ``max fl(|g| * hits)`` over the output gradient and ``max |w|``
    over the attention weights, as float32 bit patterns with the sign cleared. Integer maxima
    (atomic, so any order gives the same bits): a NaN's pattern is above infinity's, which is
    above every finite one, so the header says whether anything was not finite (a float ``max``
    may drop NaN: the interpreter's does)."""
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    g = tl.load(grad_out_ptr + offsets, mask=offsets < grad_count, other=0.0).to(tl.float32)
    # tl.cast, not hits.to: torch's trace of the kernel (wrap_triton) specializes an int of 1 to a
    # Python constant, which has no .to
    g_bits = (tl.abs(g) * tl.cast(hits, tl.float32)).to(tl.int32, bitcast=True) & 0x7FFFFFFF
    tl.atomic_max(fixed_ptr, tl.max(g_bits, axis=0).to(tl.int64), sem="relaxed")
    w = tl.load(weights_ptr + offsets, mask=offsets < weight_count, other=0.0).to(tl.float32)
    w_bits = w.to(tl.int32, bitcast=True) & 0x7FFFFFFF
    tl.atomic_max(fixed_ptr + 1, tl.max(w_bits, axis=0).to(tl.int64), sem="relaxed")


@triton.jit(do_not_specialize=["count"])
def fixed_point_to_float_kernel(fixed_ptr, out_ptr, count, BLOCK: tl.constexpr):
    """Grid: (cdiv(count, BLOCK),). ``out = float32(fixed) * 2**(e - FIXED_BITS)``: the int64 to
    float32 conversion rounds once (to nearest), the multiply by a power of two is exact. NaN
    everywhere when the bound is not finite. ``fixed_ptr`` is the whole accumulator, ``count``
    the elements past its header."""
    exponent, finite = _header_exponent(fixed_ptr)
    unit = tl.where(finite, _power_of_two(exponent - FIXED_BITS), float("nan"))
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < count
    fixed = tl.load(fixed_ptr + HEADER + offsets, mask=mask, other=0)
    tl.store(out_ptr + offsets, fixed.to(tl.float32) * unit, mask=mask)

"""The Triton kernels of the FP8 execute path: the activation prologue and the GEMM epilogue.

``fp8_cast_kernel`` quantizes activations to E4M3 bytes in one pass: per tensor (a given scale),
or dynamic per row (the row's finite amax, its scale and its codes from one tile holding the whole
row). It writes into a buffer whose rows may be longer than the input's (zeros in the pad), which
is how ``torch._scaled_mm`` gets its K multiple of 16 without another copy.
``fp8_epilogue_kernel`` applies per-row and per-column scales, a bias and ReLU to a float32
accumulator and writes the output dtype.

Exactness rules (docs/fp8_execute.md; docs/architecture.md, "Facts for kernel authors"):
float32 arithmetic the interpreter reproduces (``tl.div_rn`` for the reference's IEEE division,
rounding onto the grid by adding and subtracting a power of two, exact power-of-two scaling,
integer round-to-nearest-even for bfloat16 outputs), the E4M3 byte read off float32 bits (no fp8
cast: the interpreter's is wrong), launches with ``enable_fp_fusion=False`` so no multiply is
contracted into the following add, and the epilogue's column scale an uncontracted multiply
(``triton_arithmetic``), since a traced launch is compiled with fusion on. The prologue is an
ALU-bound kernel at copy-sized bytes (``benchmarks/NOTES.md``, "The FP8 prologue is bound by
instructions"), so its per-element work is kept to the few operations counted in
``fp8_cast_kernel``'s docstring. On sm_89+ its rounding and byte are the hardware's E4M3 conversion
(``_e4m3_code_hardware``, PTX that the interpreter cannot run: CI checks the software rounding, the
GPU the hardware one, and both equal the reference bit for bit).
"""

from __future__ import annotations

import triton
import triton.language as tl

from libreyolo.kernels.triton_arithmetic import product_uncontracted

from ..simulate.kernels import (
    _amax_to_scale,
    _load_float32,
    _output_bits,
)

E4M3_MAX = tl.constexpr(448.0)
FLOAT32_INF_BITS = tl.constexpr(0x7F800000)
# E4M3's smallest normal (2^-6), the magic's scale over a binade (2^20 = 2^(23 - 3 mantissa
# bits)) and the rebias that lays float32 bits out as E4M3's (2^-120 = 2^(7 - 127)).
E4M3_MIN_NORMAL = tl.constexpr(2.0 ** -6)
GRID_MAGIC = tl.constexpr(2.0 ** 20)
E4M3_REBIAS = tl.constexpr(2.0 ** -120)
# divisors whose FMA division needs no underflow argument (``_quotient``)
DIVISOR_LOW = tl.constexpr(2.0 ** -64)
DIVISOR_HIGH = tl.constexpr(2.0 ** 64)


@triton.jit
def _e4m3_code(q):
    """The E4M3 (e4m3fn) code, 0..0x7E, of ``q`` in [0, 448] (not NaN), rounded to nearest-even
    on the E4M3 grid: the reference's ``round_to_float_grid`` then the byte, in six operations.

    Rounding: ``q + magic`` with ``magic = 2^20`` times q's binade (at least 2^-6, E4M3's smallest
    normal exponent) has a float32 ulp equal to the grid's spacing there (3 mantissa bits; 2^-9
    below 2^-6), so the addition rounds q onto the grid, ties to even (magic's own ulp count,
    2^23, is even); subtracting magic again is exact (Sterbenz). Byte: ``level * 2^-120`` is
    exact and lays float32's bits out as E4M3's (biased exponent e + 7 = float32's e + 127 - 120;
    E4M3 subnormals k * 2^-9 become float32 subnormals k * 2^-129), so the code is those bits
    >> 20 (OCP OFP8 rev 1.0, table 1). No float-to-integer conversion, no comparison."""
    binade = (tl.maximum(q, E4M3_MIN_NORMAL).to(tl.uint32, bitcast=True) & 0x7F800000).to(
        tl.float32, bitcast=True)
    magic = binade * GRID_MAGIC
    level = (q + magic) - magic
    return (level * E4M3_REBIAS).to(tl.uint32, bitcast=True) >> 20


@triton.jit
def _e4m3_code_hardware(q):
    """The E4M3 byte of ``q``, a clamped quotient carrying x's sign (in [-448, 448], never NaN),
    by the conversion instruction of sm_89+, four elements an instance (``pack=4``).

    PTX ISA (7.8+, "Data Movement and Conversion Instructions: cvt"): ``cvt.rn.satfinite.
    e4m3x2.f32 d, a, b`` converts two float32 values to E4M3 rounding to nearest, ties to even
    (``.rn``), and packs them into the 16-bit d, a's byte in the upper half and b's in the
    lower; ``mov.b32 d, {lo, hi}`` puts lo in the lower half. Element 0 is passed as the first
    pair's b, so the bytes land in element order, lowest first (little-endian: the order they
    are stored in).

    Where it equals the reference bit for bit (``_quantize_rows`` fences the rest): on
    [-448, 448] every float32 is finite and within E4M3's range, so the conversion is one
    round-to-nearest-even onto E4M3's grid, subnormals (k * 2^-9) included, which is the
    reference's ``round_to_float_grid``; ``.satfinite`` (the syntax requires it) never
    engages, 448 being E4M3's largest finite value; the format is sign-magnitude and the
    rounding symmetric, so -v converts to v's byte with the sign bit set, and a negative
    quotient that rounds to zero (or -0.0) gives 0x80, as the reference's sign bit does.
    NaN, inf, overflow and a zero scale never reach it (the caller's clamp and selects).
    Four elements an instance need four a thread: the launcher's tiles hold at least 4096
    elements over at most 512 threads."""
    return tl.inline_asm_elementwise(
        "{ .reg .b16 lo, hi; cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1; "
        "cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3; mov.b32 $0, {lo, hi}; }",
        "=r,r,r,r,r", [q], dtype=tl.uint8, is_pure=True, pack=4)


#: GELU's fold (``_gelu``): log2(Phi(-s)) for s in [0, GELU_FIT_END] as a polynomial in s,
#: lowest degree first: a Chebyshev least-squares fit of degree 11 at 60,001 evenly spaced points
#: (float64, ``math.erfc``), converted to monomials and rounded to float32.
GELU_LOG2_TAIL = tl.constexpr((
    -0.9999998211860657, -1.1511093378067017, -0.4591915011405945, -0.05250755324959755,
    0.007017077878117561, -3.3999644074356183e-05, -0.00027688342379406095,
    8.107269241008908e-05, -1.322669140790822e-05, 1.3339712268134463e-06,
    -7.773002863586953e-08, 2.0070356487877916e-09))
GELU_FIT_END = tl.constexpr(6.0)


@triton.jit
def _gelu(x):
    """GELU(x) = x * Phi(x), Phi the standard normal CDF, in about 17 instructions an element
    (SASS, sm_90) where ``0.5 * x * (1 + erf(x / sqrt 2))`` with the device's ``erf`` takes about
    32 and leaves ``fused_fp8_mlp``'s fold ALU-bound (``benchmarks/NOTES.md``, "The GELU fold's
    own GELU").

    The tail h = Phi(-|x|) = erfc(|x| / sqrt 2) / 2 is ``exp2`` of a degree-11 polynomial in |x|
    (``GELU_LOG2_TAIL``, Horner with FMAs): one ``exp2`` and no division or branch. Then Phi(x)
    is ``1 - h`` for x > 0 and ``h`` otherwise, so the negative side carries h's relative
    accuracy instead of cancelling in ``1 + erf``. Error of h against float64 on [0, 6]: at most
    8e-8 absolute and 4e-6 relative (tests/kernels/quant/fp8_linear_checks.py checks it), so a
    positive GELU is within ~2 float32 ulps of exact and a negative one within 4e-6 relative.
    Below -6 (h < 1e-9) it returns -0.0, as float32 ``F.gelu`` does from about -5.5 on; +inf
    gives inf, -inf and NaN give NaN, as ``F.gelu``."""
    s = tl.abs(x)
    log2_tail = tl.full(x.shape, GELU_LOG2_TAIL[11], tl.float32)
    for i in tl.static_range(10, -1, -1):
        log2_tail = tl.fma(log2_tail, s, GELU_LOG2_TAIL[i])
    tail = tl.where(s < GELU_FIT_END, tl.exp2(log2_tail), 0.0)
    return x * tl.where(x > 0.0, 1.0 - tail, tail)


@triton.jit
def _quotient(magnitude, divisor, FMA_DIVISION: tl.constexpr, ROUNDED_ONCE: tl.constexpr):
    """``magnitude / divisor`` rounded once (IEEE, as the reference's division by a tensor), for
    ``magnitude >= 0`` (inf and NaN included) and a positive per-row ``divisor`` (BLOCK_R, 1).

    ``tl.div_rn`` costs ten instructions an element on sm_90 (a reciprocal, five FMAs, a
    range check and a branch around its slow path, per element: ptxas keeps none of it per
    row). ``FMA_DIVISION`` takes the reciprocal once per row, y = 1/divisor correctly rounded,
    and corrects the product twice, five instructions an element: Markstein's theorem (IBM J.
    Res. Dev. 34(1), 1990; J.-M. Muller et al., Handbook of Floating-Point Arithmetic, "Newton-
    Raphson-based division with an FMA"): if y is within half an ulp of 1/b and q within one ulp
    of a/b, the residual r = a - bq is exact in an FMA and RN(q + ry) = RN(a/b). q0 = RN(ay) can
    be 1.5 ulps off, so a first correction makes it faithful (its error is then half an ulp plus
    ~2^-46 of one) and the second rounds correctly. The theorem excludes underflow: a tile takes
    the FMA path only when every divisor is in [2^-64, 2^64], where any quotient at or above
    E4M3's rounding threshold (2^-10) has normal residuals; smaller quotients round to zero
    codes either way (their sign is x's). inf or a quotient that overflows becomes NaN in the
    residual, which the caller's ``min`` with the 448 limit turns into 448 (PTX ``min`` returns
    the operand that is not NaN; NaN inputs are replaced after). The interpreter's ``tl.fma``
    rounds twice (numpy), so interpreted launches pass ``FMA_DIVISION=False``.
    ``ROUNDED_ONCE=False`` (the GELU fold, whose GELU is an approximation anyway) keeps q0, one
    instruction an element, within 1.5 ulps of the quotient."""
    if FMA_DIVISION:
        in_range = (divisor >= DIVISOR_LOW) & (divisor <= DIVISOR_HIGH)
        if tl.min(in_range.to(tl.int32)) != 0:
            y = tl.div_rn(tl.full(divisor.shape, 1.0, tl.float32), divisor)
            q = magnitude * y
            if ROUNDED_ONCE:
                q = tl.fma(tl.fma(-divisor, q, magnitude), y, q)
                q = tl.fma(tl.fma(-divisor, q, magnitude), y, q)
        else:
            q = tl.div_rn(magnitude, divisor)
    else:
        q = tl.div_rn(magnitude, divisor)
    return q


@triton.jit
def _load_rows(x_ptr, r, c, rows, cols, x_row_stride, x_col_stride, IN_KIND: tl.constexpr):
    """x[r, c] as float32, 0 outside the tensor (rows past ``rows`` included)."""
    valid = (r < rows)[:, None] & (c < cols)[None, :]
    offsets = r.to(tl.int64)[:, None] * x_row_stride + c.to(tl.int64)[None, :] * x_col_stride
    return _load_float32(x_ptr, offsets, valid, IN_KIND)


@triton.jit
def _quantize_rows(x, r, c, rows, cols, padded_cols, scale_ptr, codes_ptr, row_scale_ptr,
                   DYNAMIC: tl.constexpr, GELU: tl.constexpr, FMA_DIVISION: tl.constexpr,
                   HARDWARE_E4M3: tl.constexpr):
    """Codes (and, ``DYNAMIC``, row scales) of the loaded rows ``x`` = x[r, c]: see
    ``fp8_cast_kernel``."""
    in_rows = r < rows
    if GELU:
        x = _gelu(x)
    magnitude = tl.abs(x)
    # Reductions on the magnitudes' bits (non-negative floats order as integers): one max an
    # element, and no NaN semantics to trust (numpy's max, the interpreter's, mishandles
    # signalling NaNs). ``special``: the tile holds inf or NaN (bits at or above inf's).
    bits = magnitude.to(tl.int32, bitcast=True)
    if DYNAMIC or HARDWARE_E4M3:
        amax_bits = tl.max(bits, axis=1)
        special = tl.max(amax_bits, axis=0) >= FLOAT32_INF_BITS
    if DYNAMIC:
        # only a tile holding inf or NaN takes the second, exact pass of the finite amax
        if special:
            amax_bits = tl.max(tl.where(bits < FLOAT32_INF_BITS, bits, 0), axis=1)
        row_scale = _amax_to_scale(amax_bits.to(tl.float32, bitcast=True), E4M3_MAX)
        tl.store(row_scale_ptr + r, row_scale, mask=in_rows)
        scale = row_scale[:, None]
    else:
        scale = tl.load(scale_ptr + tl.zeros([r.shape[0], 1], dtype=tl.int32))
    nonzero = scale != 0.0
    limit = tl.where(nonzero, E4M3_MAX, 0.0)
    sign_bit = tl.where(nonzero, 0x80, 0).to(tl.uint32)
    nan_byte = tl.where(nonzero, 0x7F, 0).to(tl.uint32)
    quotient = tl.minimum(_quotient(magnitude, tl.where(nonzero, scale, 1.0), FMA_DIVISION,
                                    not GELU), limit)
    if HARDWARE_E4M3:
        # x's sign on the clamped quotient (none under a zero scale), so the conversion writes
        # the sign bit itself; NaN is replaced only in tiles holding one (a select on the
        # packed bytes costs ~5 instructions an element, ``special`` is one reduction)
        signed = quotient.to(tl.uint32, bitcast=True) | (x.to(tl.uint32, bitcast=True) &
                                                         (sign_bit << 24))
        byte = _e4m3_code_hardware(signed.to(tl.float32, bitcast=True))
        if special:
            byte = tl.where(x != x, nan_byte.to(tl.uint8), byte)
    else:
        sign = (x.to(tl.uint32, bitcast=True) >> 24) & sign_bit
        byte = tl.where(x != x, nan_byte, _e4m3_code(quotient) | sign).to(tl.uint8)
    written = in_rows[:, None] & (c < padded_cols)[None, :]
    tl.store(codes_ptr + r.to(tl.int64)[:, None] * padded_cols + c[None, :], byte,
             mask=written)


@triton.jit
def fp8_cast_kernel(
    x_ptr, scale_ptr, codes_ptr, row_scale_ptr,
    rows, cols, padded_cols, x_row_stride, x_col_stride,
    IN_KIND: tl.constexpr, DYNAMIC: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
    GELU: tl.constexpr = False, FMA_DIVISION: tl.constexpr = False,
    HARDWARE_E4M3: tl.constexpr = False,
):
    """``codes[r, c]`` = E4M3 byte of ``clamp(round(x[r, c] / scale), -448, 448)`` for
    ``c < cols``, 0 for ``cols <= c < padded_cols``; NaN gives 0x7F, a zero scale +0.

    ``DYNAMIC``: scale = finite amax of row r / 448 (1 when 0), stored to ``row_scale[r]``; the
    tile holds whole rows (``BLOCK_C >= cols``, one program column). Else ``scale_ptr`` is the
    0-dim scale and ``row_scale_ptr`` is not touched. ``x`` is read through its strides;
    ``codes`` is a contiguous (rows, padded_cols) uint8 buffer.

    One row tile a program (persistent programs that load their next tile while quantizing this
    one measured no gain: benchmarks/NOTES.md, "v2, persistent programs measured").

    Per element (the work that decides its speed: docs/fp8_execute.md, "The prologue's
    arithmetic"): the magnitude is divided (``_quotient``: IEEE, as the reference's division by a
    tensor) and clamped to 448 before rounding (a quotient at or above 448 rounds to at least
    448, so clamping first gives the reference's clamp after), ``_e4m3_code`` rounds and encodes
    (``HARDWARE_E4M3``: the sm_89+ conversion instruction does, ``_e4m3_code_hardware``), and
    the sign bit is x's own (the quotient of a magnitude by a positive scale has x's sign,
    -0.0 included). A zero scale divides by 1 and clamps to 0, and masks the sign and NaN bytes.

    ``GELU`` (not a slot: ``fused_fp8_mlp``'s fold of the previous layer's activation) quantizes
    GELU(x) instead of ``x``, by ``_gelu``'s approximation and with the quotient's first
    product (``_quotient``'s ``ROUNDED_ONCE=False``), so those codes are not bit-exact against a
    reference.
    """
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    x = _load_rows(x_ptr, r, c, rows, cols, x_row_stride, x_col_stride, IN_KIND)
    _quantize_rows(x, r, c, rows, cols, padded_cols, scale_ptr, codes_ptr, row_scale_ptr,
                   DYNAMIC, GELU, FMA_DIVISION, HARDWARE_E4M3)


@triton.jit
def fp8_epilogue_kernel(
    acc_ptr, row_scale_ptr, col_scale_ptr, bias_ptr, out_ptr,
    rows, cols, acc_row_stride, acc_col_stride, row_scale_stride, col_scale_stride, bias_stride,
    HAS_BIAS: tl.constexpr, RELU: tl.constexpr, OUT_KIND: tl.constexpr, PTX: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """``out = act(((acc * row_scale) * col_scale) + bias)``, float32, rounded once to the output
    dtype (stored as its bits; NaN as the canonical quiet NaN). ``bias`` has the output dtype
    (bfloat16 arrives as int16 bits); ``out`` is contiguous. ``PTX``: as
    ``product_uncontracted``'s."""
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    valid = (r < rows)[:, None] & (c < cols)[None, :]
    r64 = r.to(tl.int64)
    acc = tl.load(acc_ptr + r64[:, None] * acc_row_stride + c.to(tl.int64)[None, :] *
                  acc_col_stride, mask=valid, other=0.0)
    row_scale = tl.load(row_scale_ptr + r64 * row_scale_stride, mask=r < rows, other=1.0)
    col_scale = tl.load(col_scale_ptr + c * col_scale_stride, mask=c < cols, other=1.0)
    y = acc * row_scale[:, None]
    y = product_uncontracted(y, col_scale[None, :], PTX)
    if HAS_BIAS:
        y = y + _load_float32(bias_ptr, c * bias_stride, c < cols, OUT_KIND)[None, :]
    if RELU:
        y = tl.where(y < 0.0, 0.0, y)
    tl.store(out_ptr + r64[:, None] * cols + c[None, :], _output_bits(y, y != y, OUT_KIND),
             mask=valid)

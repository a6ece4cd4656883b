"""The Triton unpack kernel: packed codes and scales to floats, bit for bit as
``libreyolo.quant.packing``'s reference unpackers compute them on the CPU.

It is a streaming kernel bound by its instructions (at copy bandwidth an H200-class GPU's integer
pipe leaves about ten an output element), so the layout is built to spend few (the counts, and
the first version's: benchmarks/NOTES.md, "bench_unpack.py v2"):
- the output is written in *words*: ``FIELDS`` consecutive outputs packed into one integer (two
  float32 in an int64, two or four 16-bit floats in an int32 / int64), each word decoded from
  one code byte (``WORDS_PER_BYTE`` words share a byte when a byte holds more fields than a
  word). Code bytes and words are tiles of one shape with ``VECTOR`` contiguous words (a 16-byte
  store) innermost, so both get the same thread layout: vector loads of code bytes, 16-byte
  stores, no gather and no shuffle through shared memory;
- scales per group: the tile's second dimension counts scale groups of ``GROUP_WORDS`` words,
  and a scale is loaded and decoded once per 16-byte store (a warp's lanes walk a group's
  stores, so each holds one; a thread holding a whole group, lanes along groups, decoded it once
  but made each warp store span 32 groups, at a fraction of the copy's speed: benchmarks/NOTES.md
  "bench_unpack.py v4"). Where a group is not a power-of-two number of words (int groups of 5,
  7, ...), ``BLOCK_G`` is 1 and ``SCALE_PER_WORD`` loads one scale per word instead;
- fields are decoded with shifts, masks and exact power-of-two multiplies on float32 bits (E2M1
  and E4M3 sign and magnitude placed so that they read as a fixed power of two times the value;
  integers as offset binary in the mantissa of 2^23), never a float8 cast, which the interpreter
  gets wrong, nor an int-to-float conversion, which runs at a quarter of the integer rate;
- float16 outputs are kept in the upper half of an int32 until two are packed into a word (one
  byte permute); bfloat16 pairs are rounded by one instruction, PTX ``cvt.rn.bf16x2.f32`` (two
  float32 in, a packed pair out), where a per-output integer rounding took four (the tie bit,
  the add, a NaN test and select) and a permute per pair (``HARDWARE_BF16``: set by the plan;
  one-output words, int8 and MXFP8, convert one product as both halves);
- NaN rules (below) cost a test and a select per element only where the format lets a NaN
  appear and its bits matter (float32, float16; MXFP8's NaN codes); what depends only on the
  scale (its NaN's bits) is computed with the scale. bfloat16 NaN has one pattern whatever its
  source, so a word-level fix of the conversion's NaN serves every output (``_bf16_nan``).

Exactness rules (docs/architecture.md, "Facts for kernel authors"):
- the reference multiplies float32 code values by float32 scales (NVFP4: block scale times tensor
  scale first), rounded once; the kernel does the same multiplies. Where a product is NaN it
  writes the NaN the reference's CPU arithmetic gives, since the GPU's own NaN is
  ``0x7FFFFFFF``. On x86 a NaN operand comes out quieted with its sign and payload, the scale's
  when both are NaN (measured with torch 2.13: its vectorized ``a * b`` keeps ``b``'s, and a
  0-d tensor's whichever side it is on), and ``0 * inf`` gives ``0xFFC00000``;
- outputs are stored as integer bits: float16 by the hardware's round-to-nearest-even cast with
  NaN as torch's CPU conversion writes it (sign, quiet bit and the payload's top 9 bits);
  bfloat16 rounded to nearest-even by ``cvt.rn.bf16x2.f32`` compiled, by the same rounding in
  integer arithmetic under the interpreter (it truncates casts and runs no inline asm), both
  writing NaN as the canonical ``0x7FFF``, then made ``0xFFFF`` (torch's vectorized CPU
  conversion) by one shared fix. MXFP4 products (an E2M1 value, at most two significant bits,
  times a power of two, within float32's exponent range) are exact in bfloat16, so there the
  conversion is a truncation;
- launches pass ``enable_fp_fusion=False`` (the decode's multiplies must not contract).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ...triton_kit import FloatKind
from .unpack_plan import Format

# The plan's codes as constexpr globals (the only globals a Triton kernel may read).
INT_GROUPED = tl.constexpr(int(Format.INT_GROUPED))
NVFP4 = tl.constexpr(int(Format.NVFP4))
MXFP4 = tl.constexpr(int(Format.MXFP4))
MXFP8 = tl.constexpr(int(Format.MXFP8))
OUT_FLOAT32 = tl.constexpr(int(FloatKind.FLOAT32))
OUT_FLOAT16 = tl.constexpr(int(FloatKind.FLOAT16))
OUT_BFLOAT16 = tl.constexpr(int(FloatKind.BFLOAT16))
TWO_POW_126 = tl.constexpr(2.0**126)
TWO_POW_120 = tl.constexpr(2.0**120)
TWO_POW_23 = tl.constexpr(2.0**23)
QUIET = tl.constexpr(0x400000)


def _int32(bits: int) -> tl.constexpr:
    """A 32-bit pattern as the int32 constant Triton needs (0x80000000 and up are negative)."""
    return tl.constexpr(bits - (1 << 32) if bits >= 1 << 31 else bits)


X86_DEFAULT_NAN = _int32(0xFFC00000)  # what x86 gives for 0 * inf
SIGN = _int32(0x80000000)
UPPER_HALF = _int32(0xFFFF0000)
BF16_CANONICAL_NAN = _int32(0x7FFF0000)  # cvt.rn.bf16x2.f32's NaN, in the upper half
BF16_SIGNS = _int32(0x80008000)  # the sign bits of a bfloat16 pair
E4M3_FIELDS = _int32(0x87F00000)  # sign, and a shifted E4M3 magnitude (see _e4m3)
E2M1_FIELDS = _int32(0x81C00000)  # sign, and a shifted E2M1 magnitude (see _value)


@triton.jit
def _e4m3(code):
    """The float32 value of an E4M3 (e4m3fn) code sign-extended from 8 bits, NaN codes left to
    the caller (they give 480, which no other code does): bias 7, subnormals m * 2^-9. Shifted 20
    bits up, the 7 magnitude bits sit at float32 bits 26-20, reading as 2^-120 times the value,
    and the sign's copies fill bits 31-27, of which the mask keeps bit 31."""
    return ((code << 20) & E4M3_FIELDS).to(tl.float32, bitcast=True) * TWO_POW_120


@triton.jit
def _e8m0_bits(code):
    """float32 bits of 2^(code - 127), the exponent clamped to float32's 127 as the reference's
    ``pow2`` clamps it (code 255, NaN in the MX spec, is never written by the packer)."""
    return tl.where(code == 0, 0x00400000, tl.minimum(code, 254) << 23)


@triton.jit
def _scale(raw, tensor_scale_ptr, FORMAT: tl.constexpr):
    """A group's scale as float32 and, for scales that may be NaN or infinite, the bits of the
    NaN its products take (the scale's, quieted; else ``0 * inf``'s): the reference's x86 rule
    with the code side never NaN (E2M1 and integer codes have no NaN)."""
    if FORMAT == INT_GROUPED:
        scale = raw
    elif FORMAT == NVFP4:
        code = raw.to(tl.int8, bitcast=True).to(tl.int32)
        block = tl.where((code & 0x7F) == 0x7F, (code << 24) | 0x7FF00000,
                         _e4m3(code).to(tl.int32, bitcast=True))
        tensor_bits = tl.load(tensor_scale_ptr).to(tl.int32, bitcast=True)
        block_f = block.to(tl.float32, bitcast=True)
        tensor = tensor_bits.to(tl.float32, bitcast=True)
        product = (block_f * tensor).to(tl.int32, bitcast=True)
        nan = tl.where(tensor != tensor, tensor_bits | QUIET,
                       tl.where(block_f != block_f, block | QUIET, X86_DEFAULT_NAN))
        scale = tl.where((product & 0x7FFFFFFF) > 0x7F800000, nan, product)
        scale = scale.to(tl.float32, bitcast=True)
    else:
        scale = _e8m0_bits(raw.to(tl.int32)).to(tl.float32, bitcast=True)
    bits = scale.to(tl.int32, bitcast=True)
    nan = tl.where(scale != scale, bits | QUIET, X86_DEFAULT_NAN)
    return scale, nan


@triton.jit
def _value(code, FORMAT: tl.constexpr, BITS: tl.constexpr):
    """The float32 value of a ``BITS``-wide field in the low bits of ``code`` (a byte sign-extended
    and shifted: higher bits hold other fields or the sign's copies), exact. E4M3 NaN codes give
    a finite value; ``_field`` overrides them."""
    if FORMAT == INT_GROUPED:
        # two's complement -> offset binary x = field ^ sign bit, read as 2^23 + x: exact, and
        # no int-to-float conversion (one 32-bit xor does both: the field is below 2^BITS)
        sign: tl.constexpr = 1 << (BITS - 1)
        offset = (code & ((1 << BITS) - 1)) ^ (0x4B000000 | sign)
        return offset.to(tl.float32, bitcast=True) - (TWO_POW_23 + sign)
    elif FORMAT == MXFP8:
        return _e4m3(code)
    else:
        # E2M1 (sign, 2 exponent bits, 1 mantissa bit; bias 1): shifted so that the sign lands
        # on bit 31, copied by the arithmetic shift into bits 30-25 and masked off there, leaving
        # the 3 magnitude bits at float32 bits 24-22: 2^-126 times the value, 0.5 included
        bits = ((code << 28) >> 6) & E2M1_FIELDS
        return bits.to(tl.float32, bitcast=True) * TWO_POW_126


@triton.jit
def _field(code, scale, nan, FORMAT: tl.constexpr, BITS: tl.constexpr, OUT_KIND: tl.constexpr):
    """The bits of ``value(code) * scale`` in the output dtype: float32 bits, or a float16's in
    the upper half of an int32 (the lower half is not cleared: ``_word`` moves halves); for
    bfloat16 the float32 product itself (``_word`` converts pairs and handles NaN)."""
    value = _value(code, FORMAT, BITS)
    product = value * scale
    bits = product.to(tl.int32, bitcast=True)
    if FORMAT == MXFP4:
        is_nan = False  # E2M1 times a finite power of two
    elif FORMAT == MXFP8:
        # the NaN codes S.1111.111 (decoded as 480): the code's NaN widened (0x7FF00000, signed)
        is_nan = tl.abs(value) == 480.0
        nan = (code << 24) | 0x7FF00000
    else:
        is_nan = product != product
    if OUT_KIND == OUT_BFLOAT16:
        out = product
    elif OUT_KIND == OUT_FLOAT32:
        out = bits
        if FORMAT != MXFP4:
            out = tl.where(is_nan, nan, out)
    else:
        out = product.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32) << 16
        if FORMAT != MXFP4:
            nan16 = (nan & SIGN) | 0x7E000000 | ((nan << 3) & 0x03FF0000)
            out = tl.where(is_nan, nan16, out)
    return out


@triton.jit
def _bf16_rounded(x):
    """The bfloat16 ``cvt.rn`` makes of float32 ``x``, in the upper half of an int32 (the lower
    half is not cleared), in integer arithmetic: to nearest, ties to even, at bit 16 (+ 0x7FFF
    and the kept part's lowest bit, bit 16, here the high word of (bits << 15) * 2: ``umulhi``,
    which the compiler folds into one shift-and-add); NaN as the canonical 0x7FFF. Overflow
    rounds to infinity and subnormals round like normal numbers, as the instruction's do."""
    bits = x.to(tl.int32, bitcast=True)
    lsb = tl.umulhi((bits << 15).to(tl.uint32, bitcast=True), 2).to(tl.int32, bitcast=True)
    return tl.where(x != x, BF16_CANONICAL_NAN, bits + 0x7FFF + lsb)


@triton.jit
def _upper_halves(low, high):
    """The upper halves of two int32, ``low``'s in the lower half of the result: one byte
    permute."""
    return ((low.to(tl.uint32, bitcast=True) >> 16)
            | (high & UPPER_HALF).to(tl.uint32, bitcast=True)).to(tl.int32, bitcast=True)


@triton.jit
def _bf16x2(high, low, HARDWARE_BF16: tl.constexpr):
    """Two float32 as a bfloat16 pair, ``high``'s bits in the upper half of the int32: PTX
    ``cvt.rn.bf16x2.f32`` (one instruction for both: round to nearest even, no flush of
    subnormals, NaN as the canonical 0x7FFF whatever its sign and payload); under the
    interpreter, which truncates bfloat16 casts and runs no inline asm, the same bits from
    ``_bf16_rounded``. Either way ``_bf16_nan`` then writes NaN as the reference does."""
    if HARDWARE_BF16:
        return tl.inline_asm_elementwise("cvt.rn.bf16x2.f32 $0, $1, $2;", "=r,f,f", [high, low],
                                         dtype=tl.int32, is_pure=True, pack=1)
    else:
        return _upper_halves(_bf16_rounded(low), _bf16_rounded(high))


@triton.jit
def _bf16_nan(pair):
    """A bfloat16 pair from ``_bf16x2`` with NaN as the reference writes it, ``0xFFFF``: the
    conversion's NaN is 0x7FFF, the one half that gains bit 15 by adding 1 (negative halves have
    it already; no half is 0xFFFF, so no carry crosses into the upper half): an add and one
    three-input logic op per pair, where a test and a select per output did it."""
    return pair | ((pair + 0x00010001) & BF16_SIGNS)


@triton.jit
def _word(code, scale, nan, FORMAT: tl.constexpr, BITS: tl.constexpr, OUT_KIND: tl.constexpr,
          FIELDS: tl.constexpr, HARDWARE_BF16: tl.constexpr):
    """``FIELDS`` outputs from consecutive fields of ``code``, packed into one integer, the
    first output in the lowest bits."""
    first = _field(code, scale, nan, FORMAT, BITS, OUT_KIND)
    if FIELDS > 1:
        second = _field(code >> BITS, scale, nan, FORMAT, BITS, OUT_KIND)
    if FIELDS == 4:
        third = _field(code >> (2 * BITS), scale, nan, FORMAT, BITS, OUT_KIND)
        fourth = _field(code >> (3 * BITS), scale, nan, FORMAT, BITS, OUT_KIND)
    if OUT_KIND == OUT_FLOAT32 and FIELDS == 1:
        word = first
    elif OUT_KIND == OUT_FLOAT32:
        word = first.to(tl.uint32, bitcast=True).to(tl.int64) | (second.to(tl.int64) << 32)
    elif OUT_KIND == OUT_BFLOAT16 and FORMAT == MXFP8:
        # FIELDS == 1: a product is NaN only for a NaN code (E8M0 scales are finite), whose
        # bits are selected here as the float32 path selects them, so no conversion's NaN
        # needs ``_bf16_nan``. A one-output word converts its product as both halves of a pair
        # (one instruction still, against the integer rounding's two) and keeps the lower.
        word = tl.where(tl.abs(_value(code, FORMAT, BITS)) == 480.0, -1,
                        _bf16x2(first, first, HARDWARE_BF16)).to(tl.int16)
    elif OUT_KIND == OUT_BFLOAT16 and FORMAT != MXFP4:
        if FIELDS == 1:
            word = _bf16_nan(_bf16x2(first, first, HARDWARE_BF16)).to(tl.int16)
        else:
            word = _bf16_nan(_bf16x2(second, first, HARDWARE_BF16))
        if FIELDS == 4:
            high = _bf16_nan(_bf16x2(fourth, third, HARDWARE_BF16))
            word = word.to(tl.uint32, bitcast=True).to(tl.int64) | (high.to(tl.int64) << 32)
    else:
        if OUT_KIND == OUT_BFLOAT16:
            # MXFP4: exact in bfloat16 (the module docstring), so its upper half as it is
            first = first.to(tl.int32, bitcast=True)
            if FIELDS > 1:
                second = second.to(tl.int32, bitcast=True)
            if FIELDS == 4:
                third = third.to(tl.int32, bitcast=True)
                fourth = fourth.to(tl.int32, bitcast=True)
        if FIELDS == 1:
            word = (first >> 16).to(tl.int16)
        else:
            word = _upper_halves(first, second)
        if FIELDS == 4:
            high = _upper_halves(third, fourth)
            word = word.to(tl.uint32, bitcast=True).to(tl.int64) | (high.to(tl.int64) << 32)
    return word


@triton.jit
def unpack_kernel(
    codes_ptr, scale_ptr, tensor_scale_ptr, out_ptr,
    rows, words, codes_row_stride, codes_col_stride, scale_row_stride, scale_col_stride,
    FORMAT: tl.constexpr, BITS: tl.constexpr, GROUP: tl.constexpr, OUT_KIND: tl.constexpr,
    FIELDS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_G: tl.constexpr,
    GROUP_WORDS: tl.constexpr, VECTOR: tl.constexpr, SCALE_PER_WORD: tl.constexpr,
    HARDWARE_BF16: tl.constexpr,
):
    """Words ``[r, w]`` of the ``(rows, words)`` output, ``BLOCK_R`` rows by ``BLOCK_G`` groups of
    ``GROUP_WORDS`` words per program: word ``w`` holds outputs ``w * FIELDS ...`` in its
    low-to-high bits.

    Fields are ``BITS`` wide, element ``j`` of a byte at bit offset ``j * BITS`` (the first element
    in the lowest bits); output ``i`` is scaled by ``scale[r, i // GROUP]`` (a word never spans
    two groups: ``FIELDS`` divides ``GROUP``); ``tensor_scale_ptr`` is read only for NVFP4.
    ``out`` is contiguous; codes and scales are read through their strides. bfloat16 outputs
    are rounded by ``cvt.rn.bf16x2.f32`` where ``HARDWARE_BF16`` (compiled), else by its
    emulation in integer arithmetic (``_bf16x2``).

    The tile's dimensions are ``[GROUP_WORDS // VECTOR, BLOCK_G, BLOCK_R, VECTOR]``, ``VECTOR``
    words being one 16-byte store. Triton gives each load and store a thread layout from its own
    pointers' contiguity: with ``VECTOR`` contiguous code bytes and words innermost, both get the
    same one (a flat group dimension would give a byte load 16 per thread and a shuffle through
    shared memory). It orders the other dimensions, equally non-contiguous, by their index, so
    a warp's lanes walk the group's vectors, then groups, then rows: one contiguous 512-byte span
    per warp store (rows first spread a warp's stores over many KB: benchmarks/NOTES.md,
    "bench_unpack.py v2").
    """
    PER_BYTE: tl.constexpr = 8 // BITS
    WORDS_PER_BYTE: tl.constexpr = PER_BYTE // FIELDS
    WORD_BITS: tl.constexpr = FIELDS * (32 if OUT_KIND == OUT_FLOAT32 else 16)
    # a 1-D grid, rows outer: the y dimension's 65535 programs would cap rows or columns
    col_programs = tl.cdiv(words, BLOCK_G * GROUP_WORDS)
    r = tl.program_id(0) // col_programs * BLOCK_R + tl.arange(0, BLOCK_R)
    g = tl.program_id(0) % col_programs * BLOCK_G + tl.arange(0, BLOCK_G)
    # dimensions [GROUP_WORDS // VECTOR, BLOCK_G, BLOCK_R, VECTOR]: see the docstring
    r64 = r.to(tl.int64)[None, None, :, None]
    row_valid = (r < rows)[None, None, :, None]
    group_w = g[None, :, None, None] * GROUP_WORDS  # a group's first word
    w = (group_w + tl.arange(0, GROUP_WORDS // VECTOR)[:, None, None, None] * VECTOR
         + tl.arange(0, VECTOR)[None, None, None, :])
    valid = row_valid & (w < words)
    # codes and block scales as bytes whatever their dtype (float8 ones too: no view on the host)
    codes_ptr = codes_ptr.to(tl.pointer_type(tl.uint8))
    if FORMAT != INT_GROUPED:
        scale_ptr = scale_ptr.to(tl.pointer_type(tl.uint8))
    byte = tl.load(codes_ptr + r64 * codes_row_stride + (w // WORDS_PER_BYTE) * codes_col_stride,
                   mask=valid, other=0)
    if FORMAT == INT_GROUPED:
        code = byte.to(tl.int32)
    else:
        code = byte.to(tl.int8, bitcast=True).to(tl.int32)  # the sign's copies above bit 7
    if WORDS_PER_BYTE > 1:
        code = code >> ((w % WORDS_PER_BYTE) * (FIELDS * BITS))
    # the first word a scale covers: each word's, or the group's, broadcast over the group's
    # vectors (a [.., 1]-shaped tile then gets the words' thread layout: no shuffle between them)
    if SCALE_PER_WORD:
        scale_w = w
    else:
        scale_w = group_w + tl.zeros([GROUP_WORDS // VECTOR, 1, 1, 1], tl.int32)
    scale_raw = tl.load(scale_ptr + r64 * scale_row_stride
                        + (scale_w * FIELDS // GROUP) * scale_col_stride,
                        mask=row_valid & (scale_w < words), other=0)
    scale, nan = _scale(scale_raw, tensor_scale_ptr, FORMAT)
    word = _word(code, scale, nan, FORMAT, BITS, OUT_KIND, FIELDS, HARDWARE_BF16)
    # the output, typed by its dtype, as words (no host-side view: one call less per launch)
    if WORD_BITS == 16:
        words_ptr = out_ptr.to(tl.pointer_type(tl.int16))
    elif WORD_BITS == 32:
        words_ptr = out_ptr.to(tl.pointer_type(tl.int32))
    else:
        words_ptr = out_ptr.to(tl.pointer_type(tl.int64))
    tl.store(words_ptr + r64 * words + w, word, mask=valid)

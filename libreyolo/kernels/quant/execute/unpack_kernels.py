"""The Triton unpack kernel: packed codes and scales to floats, bit for bit as
``libreyolo.quant.packing``'s reference unpackers compute them on the CPU.

One program writes a ``[BLOCK_R, BLOCK_C]`` tile of the ``(rows, in_features)`` output. Each
output element gathers the byte holding its code (``col // per_byte``: the bytes of a tile are read
from L1 once per element, from memory once) and its scale (``col // GROUP``), so a tile needs no
integer division by a runtime value. Packed tensors are read through their strides, so gapped and
transposed views cost no copy.

Exactness rules (DESIGN.md, "Facts for kernel authors"):
- codes and scales are decoded from their bits (E2M1, E4M3, E8M0 and two's complement fields)
  by integer arithmetic and exact multiplies by powers of two: no float8 cast, which the
  interpreter gets wrong;
- it is a streaming kernel, so what costs is instructions per element: the NaN rules below are
  applied only where the format lets a NaN appear (constexpr flags), and decodes are a shift
  and a multiply instead of a field-by-field rebuild;
- the reference multiplies float32 code values by float32 scales (NVFP4: block scale times tensor
  scale first), rounded once; the kernel does the same multiplies. Where a product is NaN it
  writes the NaN the reference's CPU arithmetic gives, since the GPU's own NaN is
  ``0x7FFFFFFF``. On x86 a NaN operand comes out quieted with its sign and payload, the scale's
  when both are NaN (measured with torch 2.13: its vectorized ``a * b`` keeps ``b``'s, and a
  0-d tensor's whichever side it is on), and ``0 * inf`` gives ``0xFFC00000``;
- outputs are stored as integer bits: float16 by the hardware's round-to-nearest-even cast with
  NaN as torch's CPU conversion writes it (sign, quiet bit and the payload's top 9 bits);
  bfloat16 rounded to nearest-even in integer arithmetic (the interpreter truncates casts) with
  NaN as ``0xFFFF`` (torch's vectorized CPU conversion);
- launches pass ``enable_fp_fusion=False`` (there is nothing to contract; it keeps the rule).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .unpack_plan import Format, OutKind

# The plan's codes as constexpr globals (the only globals a Triton kernel may read).
INT_GROUPED = tl.constexpr(int(Format.INT_GROUPED))
NVFP4 = tl.constexpr(int(Format.NVFP4))
MXFP4 = tl.constexpr(int(Format.MXFP4))
MXFP8 = tl.constexpr(int(Format.MXFP8))
OUT_FLOAT32 = tl.constexpr(int(OutKind.FLOAT32))
OUT_FLOAT16 = tl.constexpr(int(OutKind.FLOAT16))
TWO_POW_126 = tl.constexpr(2.0**126)
TWO_POW_120 = tl.constexpr(2.0**120)


@triton.jit
def _e2m1_bits(field):
    """float32 bits of an E2M1 code (sign, 2 exponent bits, 1 mantissa bit; bias 1): 0, 0.5, 1,
    1.5, 2, 3, 4, 6, with the sign of a zero kept (code 8 is -0.0). The magnitude's 3 bits put at
    float32 bits 24-22 read as 2^-126 times the value, the subnormal 0.5 included (2^-127); one
    exact multiply by 2^126 rebiases it (cheaper than decoding the fields)."""
    magnitude = ((field & 7) << 22).to(tl.float32, bitcast=True) * TWO_POW_126
    return magnitude.to(tl.int32, bitcast=True) | ((field & 8) << 28)


@triton.jit
def _e4m3_bits(byte):
    """float32 bits of an E4M3 (e4m3fn) code: bias 7, subnormals m * 2^-9, no inf, NaN for
    S.1111.111 widened as torch widens it (sign kept, mantissa bits on top: 0x7FF00000). As for
    E2M1, the 7 magnitude bits at float32 bits 26-20 are 2^-120 times the value."""
    magnitude = ((byte & 0x7F) << 20).to(tl.float32, bitcast=True) * TWO_POW_120
    magnitude = tl.where((byte & 0x7F) == 0x7F, 0x7FF00000, magnitude.to(tl.int32, bitcast=True))
    return magnitude | ((byte & 0x80) << 24)


@triton.jit
def _e8m0_bits(code):
    """float32 bits of 2^(code - 127), the exponent clamped to float32's 127 as the reference's
    ``pow2`` clamps it (code 255, NaN in the MX spec, is never written by the packer)."""
    return tl.where(code == 0, 0x00400000, tl.minimum(code, 254) << 23)


@triton.jit
def _product_bits(a_bits, b_bits, A_MAY_BE_NAN: tl.constexpr, B_MAY_BE_SPECIAL: tl.constexpr):
    """float32 bits of ``a * b`` (one rounding; ``b`` is the scale), with the NaN the reference
    writes on an x86 CPU (see above). What the format rules out is not checked:
    ``B_MAY_BE_SPECIAL`` (a float32 or E4M3 scale: NaN or inf possible) takes the whole rule;
    else ``b`` is a finite nonzero power of two and only a NaN ``a`` makes a NaN."""
    a = a_bits.to(tl.float32, bitcast=True)
    b = b_bits.to(tl.float32, bitcast=True)
    bits = (a * b).to(tl.int32, bitcast=True)
    if B_MAY_BE_SPECIAL:
        nan = tl.where(b != b, b_bits | 0x400000, tl.where(a != a, a_bits | 0x400000, -4194304))
        return tl.where((bits & 0x7FFFFFFF) > 0x7F800000, nan, bits)
    elif A_MAY_BE_NAN:
        return tl.where(a != a, a_bits | 0x400000, bits)
    else:
        return bits


@triton.jit
def _output_bits(bits, OUT_KIND: tl.constexpr, MAY_BE_NAN: tl.constexpr):
    """What to store for float32 ``bits`` in the output dtype (int32, or int16 for 16-bit)."""
    if OUT_KIND == OUT_FLOAT32:
        return bits
    elif OUT_KIND == OUT_FLOAT16:
        half = bits.to(tl.float32, bitcast=True).to(tl.float16).to(tl.int16, bitcast=True)
        if MAY_BE_NAN:
            nan = (((bits >> 16) & 0x8000) | 0x7E00 | ((bits >> 13) & 0x3FF)).to(tl.int16)
            half = tl.where((bits & 0x7FFFFFFF) > 0x7F800000, nan, half)
        return half
    else:
        wide = bits.to(tl.uint32, bitcast=True)
        rounded = ((wide + (0x7FFF + ((wide >> 16) & 1))) >> 16).to(tl.int32)
        if MAY_BE_NAN:
            rounded = tl.where((bits & 0x7FFFFFFF) > 0x7F800000, 0xFFFF, rounded)
        return rounded.to(tl.int16)  # the low 16 bits


@triton.jit
def unpack_kernel(
    codes_ptr, scale_ptr, tensor_scale_ptr, out_ptr,
    rows, cols, codes_row_stride, codes_col_stride, scale_row_stride, scale_col_stride,
    FORMAT: tl.constexpr, BITS: tl.constexpr, GROUP: tl.constexpr, OUT_KIND: tl.constexpr,
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """``out[r, c] = value(code[r, c]) * scale[r, c // GROUP]`` for a ``[BLOCK_R, BLOCK_C]`` tile.

    Fields are ``BITS`` wide, element ``j`` of a byte at bit offset ``j * BITS`` (the first element
    in the lowest bits); ``tensor_scale_ptr`` is read only for NVFP4 (callers pass any pointer
    otherwise). ``out`` is contiguous; codes and scales are read through their strides.
    """
    r = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    valid = (r < rows)[:, None] & (c < cols)[None, :]
    r64 = r.to(tl.int64)[:, None]
    PER_BYTE: tl.constexpr = 8 // BITS
    byte = tl.load(codes_ptr + r64 * codes_row_stride + (c // PER_BYTE * codes_col_stride)[None, :],
                   mask=valid, other=0).to(tl.int32)
    if BITS == 8:
        field = byte
    else:
        field = (byte >> ((c % PER_BYTE) * BITS)[None, :]) & ((1 << BITS) - 1)
    scale_offsets = r64 * scale_row_stride + (c // GROUP * scale_col_stride)[None, :]
    if FORMAT == INT_GROUPED:
        sign: tl.constexpr = 1 << (BITS - 1)
        value = ((field ^ sign) - sign).to(tl.float32).to(tl.int32, bitcast=True)
        scale = tl.load(scale_ptr + scale_offsets, mask=valid, other=0.0)
        scale = scale.to(tl.int32, bitcast=True)
    elif FORMAT == NVFP4:
        value = _e2m1_bits(field)
        block = _e4m3_bits(tl.load(scale_ptr + scale_offsets, mask=valid, other=0).to(tl.int32))
        tensor = tl.load(tensor_scale_ptr).to(tl.int32, bitcast=True)
        scale = _product_bits(block, tensor, True, True)
    else:
        if FORMAT == MXFP8:
            value = _e4m3_bits(field)
        else:
            value = _e2m1_bits(field)
        scale = _e8m0_bits(tl.load(scale_ptr + scale_offsets, mask=valid, other=0).to(tl.int32))
    # E8M0 scales are finite nonzero powers of two; only E4M3 codes can be NaN
    special_scale: tl.constexpr = FORMAT == INT_GROUPED or FORMAT == NVFP4
    bits = _product_bits(value, scale, FORMAT == MXFP8, special_scale)
    out = _output_bits(bits, OUT_KIND, FORMAT != MXFP4)
    tl.store(out_ptr + r64 * cols + c[None, :], out, mask=valid)

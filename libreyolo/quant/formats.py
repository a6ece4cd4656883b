"""Number formats used by the quantization references, each value cited to its specification.

Sources:
- OCP 8-bit Floating Point Specification (OFP8), rev. 1.0 (2023): E4M3 (the `e4m3fn` encoding:
  no infinities, S.1111.111 is NaN, max normal 448) and E5M2 (IEEE-like: inf and NaN, max 57344).
- OCP Microscaling Formats (MX) Specification v1.0 (2023): E2M1 element format (max 6, no inf or
  NaN), E8M0 shared scale (2^(code - 127), code 255 is NaN), block size 32, and the shared exponent
  floor(log2(amax)) - emax_elem (section 6.3).
- NVIDIA NVFP4 recipe (Transformer Engine / "Pretraining LLMs with NVFP4", 2025): E2M1 values in
  blocks of 16, an E4M3 block scale and an fp32 per-tensor scale amax / (448 * 6).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FloatFormat:
    """A small floating-point element format: what rounding onto its grid needs to know."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    exponent_bias: int
    max_value: float
    has_inf: bool
    has_nan: bool

    @property
    def min_normal_exponent(self) -> int:
        """Unbiased exponent of the smallest normal number (subnormals share its grid spacing)."""
        return 1 - self.exponent_bias

    @property
    def max_exponent(self) -> int:
        """floor(log2(max_value)): the `emax_elem` the MX shared exponent subtracts."""
        return int(self.max_value).bit_length() - 1


# OCP OFP8 rev 1.0, table 1: E4M3 bias 7, max normal S.1111.110 = 1.75 * 2^8 = 448.
E4M3 = FloatFormat("e4m3", 4, 3, 7, 448.0, has_inf=False, has_nan=True)
# OCP OFP8 rev 1.0, table 1: E5M2 bias 15, max normal S.11110.11 = 1.75 * 2^15 = 57344.
E5M2 = FloatFormat("e5m2", 5, 2, 15, 57344.0, has_inf=True, has_nan=True)
# OCP MX v1.0, section 5.3.3: E2M1 bias 1, values 0, 0.5, 1, 1.5, 2, 3, 4, 6.
E2M1 = FloatFormat("e2m1", 2, 1, 1, 6.0, has_inf=False, has_nan=False)

FP8_FORMATS = {"e4m3": E4M3, "e5m2": E5M2}

# OCP MX v1.0, section 5.4.1: E8M0 encodes 2^(code - 127) for code 0..254; 255 is NaN.
E8M0_BIAS = 127
E8M0_MIN_EXPONENT = -127
E8M0_MAX_EXPONENT = 127

# OCP MX v1.0, section 5: every concrete MX format shares one scale per 32 elements.
MX_BLOCK_SIZE = 32
# NVIDIA NVFP4: one E4M3 scale per 16 E2M1 values.
NVFP4_BLOCK_SIZE = 16
# NVIDIA NVFP4 per-tensor scale denominator: the largest E4M3 block scale times the largest E2M1.
NVFP4_TENSOR_SCALE_DIVISOR = E4M3.max_value * E2M1.max_value  # 2688

# Symmetric integer formats use the narrow range [-(2^(bits-1) - 1), 2^(bits-1) - 1], so that
# zero is exact and the range is symmetric (PyTorch's `quant_min = -127` convention for weights).
GROUPED_INT_BITS = (2, 4, 8)
INT8_AFFINE_MIN = -128
INT8_AFFINE_MAX = 127


def int_qmax(bits: int) -> int:
    """Largest code of the narrow-range symmetric `bits`-bit integer format."""
    return 2 ** (bits - 1) - 1

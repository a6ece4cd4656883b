"""Independent code-point tables, decoded from bit fields with plain Python integers and Fractions.

Nothing here uses torch or the package under test: these tables are the yardstick the reference
is measured with, so a shared bug cannot cancel out. Sources: OCP OFP8 rev 1.0 (E4M3, E5M2),
OCP MX v1.0 (E2M1, E8M0).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

NAN = "nan"
INF = "inf"


@dataclass(frozen=True)
class Layout:
    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    special: str  # "fn": all-ones exponent and mantissa is NaN; "ieee": all-ones exponent is
    # inf (mantissa 0) or NaN; "none": every code is a number


E4M3 = Layout("e4m3", 4, 3, 7, "fn")
E5M2 = Layout("e5m2", 5, 2, 15, "ieee")
E2M1 = Layout("e2m1", 2, 1, 1, "none")


def decode(code: int, fmt: Layout):
    """The value of `code`: a Fraction (with sign), or NAN / (sign, INF)."""
    m_bits, e_bits = fmt.mantissa_bits, fmt.exponent_bits
    sign = -1 if (code >> (e_bits + m_bits)) & 1 else 1
    exponent = (code >> m_bits) & ((1 << e_bits) - 1)
    mantissa = code & ((1 << m_bits) - 1)
    all_ones = (1 << e_bits) - 1
    if fmt.special == "fn" and exponent == all_ones and mantissa == (1 << m_bits) - 1:
        return NAN
    if fmt.special == "ieee" and exponent == all_ones:
        return (sign, INF) if mantissa == 0 else NAN
    if exponent == 0:  # subnormal: 0.m x 2^(1 - bias)
        return sign * Fraction(mantissa, 1 << m_bits) * Fraction(2) ** (1 - fmt.bias)
    return sign * (1 + Fraction(mantissa, 1 << m_bits)) * Fraction(2) ** (exponent - fmt.bias)


def decode_e8m0(code: int):
    """OCP MX v1.0 E8M0: 2^(code - 127) for code 0..254, code 255 is NaN."""
    return NAN if code == 255 else Fraction(2) ** (code - 127)


def positive_grid(fmt: Layout) -> list[tuple[Fraction, int]]:
    """(value, code) of the non-negative finite values, ascending, plus one virtual point past
    the max (max + its spacing, with the next code's parity) so rounding can tell whether a
    value rounds beyond the max (saturates) or down to it."""
    codes = range(1 << (fmt.exponent_bits + fmt.mantissa_bits))
    grid = [(decode(c, fmt), c) for c in codes if isinstance(decode(c, fmt), Fraction)]
    grid = sorted((value, code) for value, code in grid if value >= 0 and not (value == 0 and code))
    (top, top_code), (below, _) = grid[-1], grid[-2]
    return grid + [(2 * top - below, top_code + 1)]


def round_nearest_even(value: Fraction, fmt: Layout) -> tuple[Fraction, bool]:
    """Round |value| to the format, ties to the even code; saturate at the max.

    Returns (signed result, in_range) where in_range is False when the nearest grid value (on
    the grid extended past the max) exceeds the max, i.e. when saturation changed the result.
    """
    grid = positive_grid(fmt)
    magnitude = abs(value)
    fmax = grid[-2][0]
    above = next((i for i, (v, _) in enumerate(grid) if v >= magnitude), None)
    if above is None:
        return (fmax if value > 0 else -fmax), False
    low, high = grid[max(above - 1, 0)], grid[above]
    if high[0] == magnitude or above == 0:
        chosen = high
    elif magnitude - low[0] != high[0] - magnitude:
        chosen = low if magnitude - low[0] < high[0] - magnitude else high
    else:
        chosen = low if low[1] % 2 == 0 else high
    in_range = chosen[0] <= fmax
    result = chosen[0] if in_range else fmax
    return (-result if value < 0 else result), in_range

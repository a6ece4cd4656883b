"""The reference checked against code-point tables decoded independently from bit fields."""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import pytest
import torch
from quant_codepoints import E2M1, E4M3, E5M2, decode, decode_e8m0, positive_grid
from quant_codepoints import round_nearest_even as rne
from quant_helpers import DEVICES

from libreyolo.quant import fake_quant as fq
from libreyolo.quant import formats, numerics
from libreyolo.quant import packing as pk

LAYOUTS = {"e4m3": E4M3, "e5m2": E5M2, "e2m1": E2M1}
FORMATS = {"e4m3": formats.E4M3, "e5m2": formats.E5M2, "e2m1": formats.E2M1}


def _f32(value) -> float:
    """The float32 nearest to a Python number (round trip through 4 bytes)."""
    return struct.unpack("<f", struct.pack("<f", float(value)))[0]


def _probe_values(layout) -> list[float]:
    """Every grid point, every midpoint, the float32 neighbours of each, and points past the max,
    with both signs: every tie and every saturation boundary of the format."""
    grid = [value for value, _ in positive_grid(layout)]
    points = set(grid) | {(a + b) / 2 for a, b in zip(grid, grid[1:], strict=False)}
    points |= {grid[-1] * 4, grid[-1] * 1000}
    probes = set()
    for p in points:
        f = _f32(p)
        probes |= {f, math.nextafter(f, math.inf), math.nextafter(f, -math.inf)}
    probes = {_f32(p) for p in probes}
    return sorted(probes | {-p for p in probes})


@pytest.mark.parametrize(
    "name, count, fmax, min_subnormal",
    [
        ("e4m3", 253, 448, Fraction(1, 2**9)),
        ("e5m2", 247, 57344, Fraction(1, 2**16)),
        ("e2m1", 15, 6, Fraction(1, 2)),
    ],
)
def test_code_point_table_matches_the_cited_format_constants(name, count, fmax, min_subnormal):
    layout, fmt = LAYOUTS[name], FORMATS[name]
    width = 1 + layout.exponent_bits + layout.mantissa_bits
    values = [decode(c, layout) for c in range(1 << width)]
    finite = {v for v in values if isinstance(v, Fraction)}
    assert len(finite) == count  # distinct finite values (+0 and -0 are one value)
    assert max(finite) == fmax == fmt.max_value
    assert min(v for v in finite if v > 0) == min_subnormal
    assert min_subnormal == Fraction(2) ** (fmt.min_normal_exponent - fmt.mantissa_bits)
    assert 2**fmt.max_exponent <= fmax < 2 ** (fmt.max_exponent + 1)


def test_e2m1_has_exactly_the_ocp_levels():
    levels = sorted({abs(decode(c, E2M1)) for c in range(16)})
    assert levels == [0, Fraction(1, 2), 1, Fraction(3, 2), 2, 3, 4, 6]


def test_e8m0_table_spans_two_to_the_minus_127_to_127_with_nan_at_255():
    assert decode_e8m0(0) == Fraction(1, 2**127) and decode_e8m0(254) == 2**127
    assert decode_e8m0(255) == "nan"
    assert formats.E8M0_MIN_EXPONENT == -127 and formats.E8M0_MAX_EXPONENT == 127


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_torch_float8_decode_agrees_with_the_bit_field_table(fmt):
    dtype = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[fmt]
    decoded = torch.arange(256, dtype=torch.uint8).view(dtype).float().tolist()
    for code, got in enumerate(decoded):
        want = decode(code, LAYOUTS[fmt])
        if want == "nan":
            assert math.isnan(got)
        elif isinstance(want, tuple):
            assert got == want[0] * math.inf
        else:
            assert got == want and math.copysign(1, got) == (-1 if code & 0x80 else 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_fake_quant_is_table_nearest_even_with_saturation(fmt, device):
    probes = _probe_values(LAYOUTS[fmt])
    x = torch.tensor(probes, dtype=torch.float32, device=device)
    one = torch.tensor(1.0, device=device)
    out = fq.fake_quant_fp8(x, one, fmt=fmt).tolist()
    mask = fq.ste_mask("fake_quant_fp8", x, one, fmt=fmt).tolist()
    expected = [rne(Fraction(p), LAYOUTS[fmt]) for p in probes]
    assert out == [float(value) for value, _ in expected]
    assert mask == [in_range for _, in_range in expected]


@pytest.mark.parametrize("device", DEVICES)
def test_e2m1_fake_quant_is_table_nearest_even_with_saturation(device):
    probes = [p for p in _probe_values(E2M1) if abs(p) < 8]
    # Each probe shares an MX block with 4.0, so the block's E8M0 exponent is 0 (scale 1).
    w = torch.zeros(len(probes), 32, device=device)
    w[:, 0] = torch.tensor(probes)
    w[:, 1] = 4.0
    out = fq.fake_quant_mxfp4_weight(w)[:, 0].tolist()
    mask = fq.ste_mask("fake_quant_mxfp4_weight", w)[:, 0].tolist()
    expected = [rne(Fraction(p), E2M1) for p in probes]
    assert out == [float(value) for value, _ in expected]
    assert mask == [in_range for _, in_range in expected]


def _shared_exponent(amax: float, emax: int) -> int:
    """OCP MX v1.0 6.3: floor(log2(amax)) - emax, clamped to E8M0; amax 0 -> 0 (our rule 6)."""
    if amax == 0:
        return 0
    mantissa, exponent = math.frexp(amax)  # amax = mantissa * 2^exponent, mantissa in [0.5, 1)
    return max(-127, min(127, exponent - 1 - emax))


@pytest.mark.parametrize("pack, emax", [(pk.pack_mxfp4, 2), (pk.pack_mxfp8, 8)])
def test_mx_scale_codes_are_the_biased_shared_exponent(pack, emax):
    amaxes = [0.0, 1e-45, 1e-40, 2.0**-126, 1.0, 1.5, 2.0, 7.99, 8.0, 448.0, 480.0, 3.4e38]
    w = torch.zeros(len(amaxes), 32)
    w[:, 5] = torch.tensor(amaxes)
    codes = pack(w).scale[:, 0].tolist()
    assert codes == [_shared_exponent(_f32(a), emax) + 127 for a in amaxes]
    assert [decode_e8m0(c) for c in codes] == [
        Fraction(2) ** _shared_exponent(_f32(a), emax) for a in amaxes
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_the_exportable_floor_log2_equals_frexps_on_every_exponent_boundary_and_subnormal(device):
    """Graph captures take `_floor_log2_exportable` (frexp has no ONNX translation): it must give
    frexp's integers on every float32 power of two, both its neighbours, every subnormal and
    zero, the inputs where a log2-based floor could be off by one."""
    powers = numerics.pow2(torch.arange(-149, 128, device=device))
    neighbours = torch.cat([torch.nextafter(powers, torch.zeros_like(powers)),
                            torch.nextafter(powers, torch.full_like(powers, math.inf))])
    subnormals = torch.arange(1, 1 << 23, dtype=torch.int32, device=device).view(torch.float32)
    m = torch.cat([powers, neighbours[torch.isfinite(neighbours)], subnormals,
                   torch.zeros(1, device=device)])
    expected = torch.where(m == 0, -1, torch.frexp(m).exponent - 1)
    got = numerics._floor_log2_exportable(m)
    assert got.dtype == torch.int32
    assert torch.equal(got, expected), m[got != expected][:5].tolist()

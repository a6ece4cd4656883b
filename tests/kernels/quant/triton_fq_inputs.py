"""Adversarial inputs for the cases in ``triton_fq_cases.toml`` (seeded, reproducible).

Every input carries the edge values of docs/quantization.md at seeded positions: rounding ties of
each format (in grid units, times a power-of-two scale so the ties stay exact), values just under
and over each format's max, subnormals, ±0, NaN and ±inf; plus an all-zero block and an
all-non-finite block (amax = 0: scale 1).
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import torch

CASES_FILE = Path(__file__).with_name("triton_fq_cases.toml")
_DATA = tomllib.loads(CASES_FILE.read_text())
CASES = {case["id"]: case for case in _DATA["case"]}
ERRORS = {case["id"]: case for case in _DATA["error"]}

INF, NAN = float("inf"), float("nan")
#: Ties and boundaries in grid units: int8 (x.5, ±127.5, -128.5), E4M3 (448/464/465/480, the
#: subnormal tie 2^-10), E5M2 (57344/61440), E2M1 (0.25, 0.75, 2.5, 5, 7), fp32 extremes.
EDGE_UNITS = (
    0.0, -0.0, NAN, INF, -INF, 0.5, 1.5, 2.5, -2.5, 126.5, 127.5, -127.5, -128.5, 127.49,
    448.0, 464.0, -465.0, 480.0, 2.0**-10, 3 * 2.0**-11, 57344.0, 61440.0, -61441.0,
    0.25, 0.75, 1.25, 5.0, 7.0, -3.5, 6.0, 1e-40, -1e-45, 3.0e38, -3.4e38,
)
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _values(shape: tuple[int, ...], unit: float, gen: torch.Generator,
            random_bits: bool = False) -> torch.Tensor:
    """Float32 values over a wide range of magnitudes, with the edges and special blocks.

    ``random_bits``: a third of the values are arbitrary float32 bit patterns (every exponent,
    NaN payloads included)."""
    n = math.prod(shape)
    magnitude = torch.exp2(torch.randint(-10, 11, (n,), generator=gen).float())
    x = torch.randn(n, generator=gen) * magnitude
    if random_bits:
        patterns = torch.randint(-(2**31), 2**31, (n,), generator=gen, dtype=torch.int64)
        arbitrary = patterns.to(torch.int32).view(torch.float32)
        x = torch.where(torch.rand(n, generator=gen) < 1 / 3, arbitrary, x)
    positions = torch.randperm(n, generator=gen)[: len(EDGE_UNITS)]
    x[positions] = torch.tensor(EDGE_UNITS[: len(positions)]) * unit
    if n >= 256:
        x[:64] = torch.tensor([0.0, -0.0]).repeat(32)  # an all-zero block / group / row start
        x[96:128] = torch.tensor([NAN, INF, -INF, NAN]).repeat(8)  # an all-non-finite block
    return x.reshape(shape)


def _scale(case: dict, x32: torch.Tensor, gen: torch.Generator) -> torch.Tensor | None:
    kind = case.get("scale")
    if kind == "tensor":
        return torch.tensor(case.get("scale_value", 2.0**-3))
    if kind == "global_amax":
        finite = x32[torch.isfinite(x32)]
        return finite.abs().max() / 4 if finite.numel() else torch.tensor(1.0)
    if kind == "channel":
        axis = case.get("scale_axis", case.get("kwargs", {}).get("axis", 0))
        n = x32.shape[axis]
        scale = torch.exp2(torch.randint(-4, 5, (n,), generator=gen).float())
        scale[1::3] *= torch.rand(len(scale[1::3]), generator=gen) + 0.5  # not powers of two
        scale[n // 2] = case.get("scale_value", 0.0)  # a zero scale: +0.0 out, zero gradient
        return scale
    return None


def make_arguments(case: dict, dtype: torch.dtype, seed: int = 0) -> tuple[tuple, dict]:
    """The slot's (args, kwargs) for ``case`` with ``x`` in ``dtype``."""
    gen = torch.Generator().manual_seed(seed)
    shape = tuple(case["shape"])
    unit = 2.0**-3 if case.get("scale") == "tensor" else 1.0
    x32 = _values(shape, unit, gen, case.get("random_bits", False))
    scale = _scale(case, x32, gen)
    x_dtype = getattr(torch, case["x_dtype"]) if "x_dtype" in case else dtype
    x = (x32 if x_dtype.is_floating_point else x32.nan_to_num()).to(x_dtype)
    args = (x,) + ((scale,) if scale is not None else ()) + tuple(case.get("args", ()))
    return args, dict(case.get("kwargs", {}))


def gapped(x: torch.Tensor) -> torch.Tensor:
    """The same values as a non-contiguous view whose gaps hold NaN (a kernel reading a gap
    shows it)."""
    if x.dim() == 0:
        return x
    base = torch.full((*x.shape[:-1], 2 * x.shape[-1]), NAN, dtype=x.dtype)
    view = base[..., ::2]
    view.copy_(x)
    return view


def upstream_gradient(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A gradient with NaN payloads and -0.0 in it: where(mask, g, 0) must keep their bits."""
    g = torch.randn(x.shape, generator=gen).to(x.dtype)
    flat = g.view(-1)
    if flat.numel() >= 4:
        bits = flat.view(torch.int32 if x.dtype == torch.float32 else torch.int16)
        bits[0] = {torch.float32: 0x7FC00123, torch.float16: 0x7E01}.get(x.dtype, 0x7FC1)
        flat[1] = -0.0
    return g


def bits(t: torch.Tensor) -> torch.Tensor:
    """Bit patterns, so NaN payloads and signed zeros count."""
    return t.contiguous().view(torch.int32 if t.dtype == torch.float32 else torch.int16)

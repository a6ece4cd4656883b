"""Grids of the quantization formats and the adversarial values that live on them.

Values are in *grid units* (before multiplying by a scale): ties are midpoints between adjacent
grid points, where round-half-to-even and round-half-away disagree on about half of them.
Grid definitions follow docs/quantization.md (OCP FP8 and MX v1.0 specifications).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Grid:
    """A symmetric quantization grid: integers up to `qmax`, or a float format."""

    name: str
    fmax: float
    mbits: int | None = None
    emin: int | None = None

    def points(self) -> list[float]:
        """Every non-negative grid point, ascending."""
        if self.mbits is None:
            return [float(k) for k in range(int(self.fmax) + 1)]
        step = 2.0 ** (self.emin - self.mbits)
        pts = [k * step for k in range(2**self.mbits)]
        e = self.emin
        while True:
            for k in range(2**self.mbits):
                value = (1 + k / 2**self.mbits) * 2.0**e
                if value > self.fmax:
                    return pts
                pts.append(value)
            e += 1

    def top_spacing(self) -> float:
        pts = self.points()
        return pts[-1] - pts[-2]


INT8 = Grid("int8", 127)
INT8_AFFINE = Grid("int8_affine", 127)
E4M3 = Grid("e4m3", 448.0, mbits=3, emin=-6)
E5M2 = Grid("e5m2", 57344.0, mbits=2, emin=-14)
E2M1 = Grid("e2m1", 6.0, mbits=1, emin=0)
INT_BITS = {bits: Grid(f"int{bits}", 2 ** (bits - 1) - 1) for bits in (2, 4, 8)}


def _after(value: float, direction: float) -> float:
    """The adjacent float32 value in `direction`."""
    t = torch.tensor(value, dtype=torch.float32)
    return float(torch.nextafter(t, torch.tensor(direction, dtype=torch.float32)))


def edge_values(grid: Grid, *, over_max: bool) -> torch.Tensor:
    """Adversarial values in grid units: ties and their float32 neighbours, the largest point and
    its neighbours, ±0, float32 subnormals, NaN and ±inf; with `over_max`, values past the max
    (omitted for data-derived scales, where they would only become the block's new amax)."""
    pts = grid.points()
    ties = [(a + b) / 2 for a, b in zip(pts, pts[1:], strict=False)]
    values = [*ties, *(_after(t, math.inf) for t in ties[::3])]
    values += [_after(t, 0.0) for t in ties[1::3]]
    values += [grid.fmax, _after(grid.fmax, 0.0), 0.0, -0.0, 1e-40, 1e-45]
    values += [float("nan"), float("inf"), float("-inf")]
    if over_max:
        half = grid.top_spacing() / 2
        values += [_after(grid.fmax, math.inf), grid.fmax + half,
                   _after(grid.fmax + half, math.inf), 2 * grid.fmax, 3.0e38]
    out = torch.tensor(values, dtype=torch.float32)
    return torch.cat([out, -out])

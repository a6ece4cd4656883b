"""Seeded adversarial inputs for quantizers: values on and between a grid, scaled by a unit.

The unit is chosen so the grid is exact: a given power-of-two scale, or, for scales derived from
data, an *anchor* element of magnitude `fmax * unit` in every row or block, which makes
`amax / fmax` (or the E8M0 exponent) come out as `unit` exactly. Ties stay ties after scaling, and
every row/block also meets the documented edge cases: an all-zero block, a NaN and an inf inside
an otherwise normal block.
"""

from __future__ import annotations

import contextlib
import contextvars

import torch

from conformance.inputs.layouts import apply_layout
from conformance.inputs.numerics import Grid, edge_values

EDGE_FRACTION = 0.25
_PLAIN = contextvars.ContextVar("plain_values", default=False)


@contextlib.contextmanager
def plain_values():
    """Within this block, generators make ordinary values only: no injected edge values, no
    all-zero or non-finite blocks (to measure how often a broken implementation is wrong on
    everyday inputs)."""
    token = _PLAIN.set(True)
    try:
        yield
    finally:
        _PLAIN.reset(token)


def powers_of_two(shape, gen: torch.Generator, low: int = -4, high: int = 5) -> torch.Tensor:
    return torch.pow(2.0, torch.randint(low, high, shape, generator=gen).float())


def channel_scales(n: int, gen: torch.Generator) -> torch.Tensor:
    """Per-channel scales: mostly powers of two, some arbitrary, one zero (a documented edge)."""
    scale = powers_of_two((n,), gen)
    arbitrary = torch.rand(n, generator=gen) < 0.25
    scale[arbitrary] = torch.rand(int(arbitrary.sum()), generator=gen) * 0.1 + 1e-3
    if n >= 4 and not _PLAIN.get():
        scale[n // 2] = 0.0
    return scale


def grid_values(shape, grid: Grid, gen: torch.Generator, *, over_max: bool) -> torch.Tensor:
    """Float32 values in grid units: Gaussian over the grid's range with edge values injected."""
    y = torch.randn(shape, generator=gen) * (grid.fmax / 2.5)
    edges = edge_values(grid, over_max=over_max)
    pick = torch.rand(shape, generator=gen) < (0.0 if _PLAIN.get() else EDGE_FRACTION)
    index = torch.randint(0, edges.numel(), (int(pick.sum()),), generator=gen)
    y[pick] = edges[index]
    return y


def _to_blocks(t: torch.Tensor, dim: int, size: int) -> tuple[torch.Tensor, int]:
    """`t` with `dim` moved last, zero-padded to whole blocks, viewed as (..., blocks, size)."""
    moved = t.movedim(dim, -1)
    n = moved.shape[-1]
    pad = (-n) % size
    padded = torch.nn.functional.pad(moved, (0, pad))
    return padded.reshape(*moved.shape[:-1], (n + pad) // size, size), n


def _from_blocks(blocks: torch.Tensor, dim: int, n: int) -> torch.Tensor:
    flat = blocks.reshape(*blocks.shape[:-2], -1)[..., :n]
    return flat.movedim(-1, dim).contiguous()


def blocked_values(shape, grid: Grid, gen: torch.Generator, *, dim: int, size: int,
                   anchor: float | None = None) -> torch.Tensor:
    """Values for data-derived scales with blocks of `size` along `dim` (a whole row: size =
    shape[dim]): each block has an anchor of magnitude `anchor` (default `grid.fmax`) times a
    power-of-two unit, one block is all zeros, one holds a NaN and an inf among normal values."""
    y = grid_values(shape, grid, gen, over_max=False)
    if y.numel() == 0:
        return y
    blocks, n = _to_blocks(y, dim, size)
    blocks = blocks.clone()
    signs = torch.where(torch.rand(blocks.shape[:-1], generator=gen) < 0.5, -1.0, 1.0)
    blocks[..., 0] = signs * (grid.fmax if anchor is None else anchor)
    blocks *= powers_of_two((*blocks.shape[:-1], 1), gen)
    rows = blocks.reshape(-1, size)
    if rows.shape[0] >= 3 and not _PLAIN.get():
        rows[1] = 0.0
        rows[2, size // 2] = float("nan")
        rows[2, (size - 1) // 3] = float("inf")
    return _from_blocks(rows.reshape(blocks.shape), dim, n)


def finish(x32: torch.Tensor, dtype: torch.dtype, layout: str) -> torch.Tensor:
    """Round to the case's dtype once and lay the tensor out as asked."""
    return apply_layout(x32.to(dtype), layout)

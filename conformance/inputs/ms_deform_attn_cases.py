"""The slot's shape set (``conformance/shapes/ms_deform_attn.toml``) and its input generator.

Cases are data; this module only reads them and turns one into seeded inputs in the slot's
layout, so tests, the conformance suite and the benchmark all draw the same inputs.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import torch

from conformance.inputs.layouts import apply_layout

SHAPE_SET = Path(__file__).resolve().parents[1] / "shapes" / "ms_deform_attn.toml"

SIZES = ("small", "medium", "large")
LOCATIONS = ("uniform", "outside", "centres", "borders")
# How the families hand spatial_shapes and value over (docs/ms_deform_attn.md, "The lineage").
SPATIAL_SHAPES = ("tensor", "pairs")
VALUES = ("heads_last", "channel_major")


@dataclass(frozen=True)
class Case:
    """One named layout taken from a model configuration (see the TOML file for the fields)."""

    name: str
    source: str
    size: str
    batch: int
    levels: tuple[tuple[int, int], ...]
    heads: int
    channels: int
    points: int
    queries: int
    locations: str = "uniform"
    contiguous: bool = True
    spatial_shapes: str = "tensor"
    value: str = "heads_last"

    def __post_init__(self):
        for field, allowed in (("size", SIZES), ("locations", LOCATIONS),
                               ("spatial_shapes", SPATIAL_SHAPES), ("value", VALUES)):
            if getattr(self, field) not in allowed:
                raise ValueError(f"case {self.name!r}: {field} must be one of {allowed}, "
                                 f"got {getattr(self, field)!r}")

    @property
    def len_in(self) -> int:
        return sum(h * w for h, w in self.levels)


def load_cases(path: Path = SHAPE_SET, sizes: tuple[str, ...] = SIZES) -> list[Case]:
    """The cases in ``path`` whose size tag is in ``sizes``, in file order."""
    with open(path, "rb") as f:
        tables = tomllib.load(f)["case"]
    cases = [Case(**{**t, "levels": tuple(tuple(level) for level in t["levels"])}) for t in tables]
    return [case for case in cases if case.size in sizes]


def _locations(case: Case, generator: torch.Generator) -> torch.Tensor:
    """(batch, len_q, heads, levels, points, 2) float64 locations of the case's kind."""
    shape = (case.batch, case.queries, case.heads, len(case.levels), case.points, 2)
    if case.locations in ("uniform", "outside"):
        low, high = (0.0, 1.0) if case.locations == "uniform" else (-0.25, 1.25)
        return low + (high - low) * torch.rand(shape, generator=generator, dtype=torch.float64)
    # Per level, x is measured in widths and y in heights.
    size = torch.tensor([[w, h] for h, w in case.levels], dtype=torch.float64)
    size = size.view(1, 1, 1, len(case.levels), 1, 2)
    top = size if case.locations == "borders" else size - 1
    index = torch.floor(torch.rand(shape, generator=generator, dtype=torch.float64) * (top + 1))
    offset = 0.0 if case.locations == "borders" else 0.5
    return (index + offset) / size


def make_inputs(case: Case, dtype=torch.float32, device="cpu", seed=0):
    """Seeded inputs for ``case``: ``(value, spatial_shapes, sampling_locations, weights)``.

    ``spatial_shapes`` is an int64 tensor on ``device``, or ``(H, W)`` tuples for a "pairs" case.

    Values are standard normal, weights a softmax over each query's levels x points (as the
    models produce them). Values are drawn in float64 and then cast, so every dtype sees the same
    numbers up to its rounding.
    """
    generator = torch.Generator().manual_seed(seed)
    value = torch.randn(case.batch, case.len_in, case.heads, case.channels,
                        generator=generator, dtype=torch.float64)
    locations = _locations(case, generator)
    logits = torch.randn(case.batch, case.queries, case.heads, len(case.levels) * case.points,
                         generator=generator, dtype=torch.float64)
    weights = logits.softmax(-1).view(*logits.shape[:3], len(case.levels), case.points)
    tensors = [t.to(device=device, dtype=dtype) for t in (value, locations, weights)]
    if case.value == "channel_major":
        # stored (batch, heads, channels, len_in), as RF-DETR's and D-FINE's cores hold it; the
        # slot sees the permuted view
        tensors[0] = tensors[0].permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2)
    if not case.contiguous:
        tensors = [apply_layout(t, "gapped") for t in tensors]
    value, locations, weights = tensors
    if case.spatial_shapes == "pairs":
        return value, [tuple(level) for level in case.levels], locations, weights
    shapes = torch.tensor(case.levels, dtype=torch.int64, device=device)
    return value, shapes, locations, weights

"""The ragged deformable-attention profile: a point count per level, bilinear or discrete
sampling (`PROFILES`' one kind, `deformable`).

The slot has no reference; callers keep the portable helper (the slot's declared portable path)
as their path, and the suite judges implementations against it run in float64, with the
classic slot's bounded contract (k and floor justified in
`conformance.running.ms_deform_attn_parity`, re-measured for this layout in
`docs/ms_deform_attn.md`, "Ragged layout"). Inputs are drawn here (`draw_inputs`), from the cases
of the slot's shape set, so tests and the benchmark draw the same.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from conformance.inputs.layouts import apply_layout
from conformance.schema.spec import (
    TRITON_EXPECTATION,
    Case,
    Expectation,
    Inputs,
    SlotSpec,
    error_input,
    tensor,
)
from libreyolo.kernels.attention.ms_deform_attn.portable import SAMPLING_METHODS
from libreyolo.kernels.slots import get_slot

LOCATIONS = ("uniform", "outside", "centres", "borders")
SHAPES_AS = ("pairs", "tensor")


def _point_sizes(levels, points: list[int]) -> torch.Tensor:
    """(1, 1, 1, sum(points), 2) float64: each point's level as (W, H), the locations' order."""
    return torch.tensor([[w, h] for (h, w), n in zip(levels, points, strict=True)
                         for _ in range(n)], dtype=torch.float64).reshape(1, 1, 1, -1, 2)


def _locations(params, points: list[int], generator: torch.Generator) -> torch.Tensor:
    """(batch, len_q, heads, sum(points), 2) float64 locations of the case's kind; for the
    pixel-aligned kinds each point is measured in its own level's widths and heights."""
    shape = (params["batch"], params["queries"], params["heads"], sum(points), 2)
    kind = params.get("locations", "uniform")
    if kind in ("uniform", "outside"):
        low, high = (0.0, 1.0) if kind == "uniform" else (-0.25, 1.25)
        return low + (high - low) * torch.rand(shape, generator=generator, dtype=torch.float64)
    size = _point_sizes(params["levels"], points)
    top = size if kind == "borders" else size - 1
    index = torch.floor(torch.rand(shape, generator=generator, dtype=torch.float64) * (top + 1))
    return (index + (0.0 if kind == "borders" else 0.5)) / size


def _nearest(locations: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
    """Discrete sampling's pixel per axis, ``floor(u * size + 0.5)`` clamped to the level, in the
    locations' own arithmetic (RT-DETRv2's rule, as the portable helper applies it)."""
    index = torch.floor(locations * size.to(locations.dtype) + 0.5)
    return torch.minimum(index.clamp_min(0), size.to(index.dtype) - 1)


def _unambiguous(locations: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
    """Moves every discrete location whose pixel differs between its dtype's arithmetic and
    float64's (a rounding away from a tie) to the centre of the pixel its dtype picks.

    The bounded contract compares with the portable path run in float64; there a near-tie can
    pick the neighbouring pixel, and the bound would grow by a whole value. After this move both
    precisions read the same pixels, so the bound measures the weighted sum alone; which pixel
    the input dtype's arithmetic picks is checked exactly by tests/attention (the cases' raw
    locations against the portable path in that dtype)."""
    chosen = _nearest(locations, size)
    ambiguous = (chosen != _nearest(locations.double(), size).to(chosen.dtype)).any(-1)
    centres = (chosen.double() / size).to(locations.dtype)
    return torch.where(ambiguous[..., None], centres, locations)


def draw_inputs(params, dtype=torch.float32, layout="contiguous", seed=0, device="cpu", *,
                unambiguous=True) -> tuple:
    """Seeded ``(value, spatial_shapes, sampling_locations, attention_weights, points_per_level,
    method)`` for one case's parameters. Values are standard normal, weights a softmax over each
    query's points (as the models produce them), all drawn in float64 and then cast, so every
    dtype sees the same numbers up to its rounding. With ``unambiguous`` (the suite's inputs),
    discrete locations are moved off near-ties (see :func:`_unambiguous`)."""
    if params.get("locations", "uniform") not in LOCATIONS:
        raise ValueError(f"locations must be one of {LOCATIONS}, got {params['locations']!r}")
    if params.get("spatial_shapes", "pairs") not in SHAPES_AS:
        raise ValueError(f"spatial_shapes must be one of {SHAPES_AS}, "
                         f"got {params['spatial_shapes']!r}")
    if params["method"] not in SAMPLING_METHODS:
        raise ValueError(f"method must be one of {SAMPLING_METHODS}, got {params['method']!r}")
    generator = torch.Generator().manual_seed(seed)
    levels = [tuple(level) for level in params["levels"]]
    points = list(params["points"])
    value = torch.randn(params["batch"], sum(h * w for h, w in levels), params["heads"],
                        params["channels"], generator=generator, dtype=torch.float64)
    locations = _locations(params, points, generator)
    weights = torch.randn(locations.shape[:4], generator=generator, dtype=torch.float64)
    tensors = [t.to(dtype=dtype) for t in (value, locations, weights.softmax(-1))]
    if unambiguous and params["method"] == "discrete":
        tensors[1] = _unambiguous(tensors[1], _point_sizes(levels, points))
    tensors = [apply_layout(t.to(device=device), layout) for t in tensors]
    shapes = [list(level) for level in levels]
    if params.get("spatial_shapes", "pairs") == "tensor":
        shapes = torch.tensor(levels, dtype=torch.int64, device=device)
    value, locations, weights = tensors
    return value, shapes, locations, weights, points, params["method"]


def _inputs(case: Case, dtype: torch.dtype, layout: str, gen: torch.Generator) -> Inputs:
    seed = int(torch.randint(0, 2**31 - 1, (), generator=gen))
    return Inputs(draw_inputs(case.params, dtype, layout, seed), grad_args=(0, 2, 3))


def _strategy():
    """Layouts the shape set does not enumerate: 1-4 levels of odd sizes, 0-5 points each (a
    level may have none), both sampling methods, every location kind, both shape layouts.
    Pixel centres get power-of-two sides: elsewhere a "centre" sits a rounding away from
    bilinear's kink, where either side's location gradient is right (as the classic slot's
    interpreter checks do)."""

    def layouts(locations):
        side = st.sampled_from([1, 2, 4, 8]) if locations == "centres" else st.integers(1, 9)
        level = st.tuples(side, side).map(list)
        pairs = st.lists(st.tuples(level, st.integers(0, 5)), min_size=1, max_size=4)
        return st.builds(
            lambda batch, pairs, heads, channels, queries, method, shapes_as: Case(
                "hypothesis", "hypothesis", "small",
                {"batch": batch, "levels": [lv for lv, _ in pairs],
                 "points": [n for _, n in pairs], "heads": heads, "channels": channels,
                 "queries": queries, "method": method, "locations": locations,
                 "spatial_shapes": shapes_as}),
            st.integers(1, 3), pairs, st.integers(1, 4), st.integers(1, 40), st.integers(0, 33),
            st.sampled_from(SAMPLING_METHODS), st.sampled_from(SHAPES_AS))

    return st.sampled_from(LOCATIONS).flatmap(layouts)


# Error inputs: the portable path's own checks (validate_ragged_inputs), each naming the argument. A
# valid call: batch 1, levels (2, 3) and (1, 2) as pairs (len_in 8), 2 heads of 4 channels, 5
# queries, points per level [2, 1].
RAGGED_RULE = ("docs/ms_deform_attn.md, \"Ragged layout\": the slot's layout; bad input raises "
               "naming the argument")
_RAGGED_VALID = {"value": tensor((1, 8, 2, 4)), "spatial_shapes": [[2, 3], [1, 2]],
                 "sampling_locations": tensor((1, 5, 2, 3, 2)),
                 "attention_weights": tensor((1, 5, 2, 3)), "points_per_level": [2, 1],
                 "method": "bilinear"}


def _ragged_error(name, error, match, **bad):
    """The valid call with the arguments in `bad` replaced."""
    return error_input(name, error, match, RAGGED_RULE, *{**_RAGGED_VALID, **bad}.values())


RAGGED_ERRORS = (
    _ragged_error("integer-value", TypeError, "value", value=tensor((1, 8, 2, 4), torch.int32)),
    _ragged_error("len-in-not-the-levels-sum", ValueError, "len_in",
                  value=tensor((1, 9, 2, 4))),
    _ragged_error("unknown-method", ValueError, "method", method="nearest"),
    _ragged_error("points-for-one-level-of-two", ValueError, "points_per_level",
                  points_per_level=[3]),
    _ragged_error("negative-points", ValueError, "points_per_level", points_per_level=[4, -1]),
    _ragged_error("sampling-locations-of-four-points", ValueError, "sampling_locations",
                  sampling_locations=tensor((1, 5, 2, 4, 2))),
    _ragged_error("attention-weights-of-two-points", ValueError, "attention_weights",
                  attention_weights=tensor((1, 5, 2, 2))),
)


def deformable(slot: str) -> SlotSpec:
    """RT-DETRv2's and D-FINE's layout: points per level, bilinear or discrete sampling (the
    cases' parameters: `draw_inputs`, and the header of the slot's shape set)."""
    return SlotSpec(
        name=slot,
        make_inputs=_inputs,
        strategy=_strategy,
        expects={"triton": TRITON_EXPECTATION,
                 "*": Expectation(modes=frozenset({"cpu", "cuda", "cuda-graph"}),
                                  layouts=frozenset(get_slot(slot).layouts))},
        error_inputs=RAGGED_ERRORS,
    )


PROFILES = {"deformable": deformable}

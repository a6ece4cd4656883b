"""The portable core: the definition in float64, its variants, and its errors on bad input."""

import pytest
import torch

from conformance.inputs.ms_deform_attn_cases import Case, load_cases, make_inputs
from libreyolo.kernels.attention.ms_deform_attn.portable import (
    ms_deform_attn_portable,
    ms_deform_attn_ragged,
)

from .hostile_inputs import BAD_INPUTS, HOSTILE_CASE, NON_FINITE
from .loop_reference import bilinear, deform_attn_loops, nearest_clamped

SMALL_CASES = load_cases(sizes=("small",))


def _flat_points(locations, weights):
    """Slot layout -> ragged layout: (B, Q, heads, levels * points, ...)."""
    return locations.flatten(3, 4), weights.flatten(3, 4)


@pytest.mark.parametrize("case", SMALL_CASES, ids=lambda c: c.name)
def test_matches_explicit_bilinear_loops_in_float64(case):
    value, shapes, locations, weights = make_inputs(case, dtype=torch.float64)
    expected = deform_attn_loops(value, case.levels, *_flat_points(locations, weights),
                                 [case.points] * len(case.levels))
    out = ms_deform_attn_portable(value, shapes, locations, weights)
    assert out.shape == (case.batch, case.queries, case.heads * case.channels)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_spatial_shapes_may_be_pairs_of_ints():
    value, shapes, locations, weights = make_inputs(SMALL_CASES[0], dtype=torch.float64)
    torch.testing.assert_close(
        ms_deform_attn_portable(value, shapes.tolist(), locations, weights),
        ms_deform_attn_portable(value, shapes, locations, weights), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("batch", [1, 2])
def test_half_precision_on_cpu_stays_finite_and_near_float64(batch, dtype):
    """With batch 1 and one level, a level is a strided view of ``value``; torch's CPU
    grid_sample read such views wrongly in float16/bfloat16 (NaN, found by the H200 record run
    on the RF-DETR-s-like case), so the core hands it contiguous levels."""
    case = Case("one_level", "RF-DETR-s-like", "medium", batch, ((24, 24),), 16, 16, 2, 300)
    value, shapes, locations, weights = make_inputs(case, dtype=dtype, seed=0)
    out = ms_deform_attn_portable(value, shapes, locations, weights)
    oracle = ms_deform_attn_portable(value.double(), shapes, locations.double(), weights.double())
    assert torch.isfinite(out).all()
    # CPU grid_sample computes in the input dtype, locations included (bfloat16: 8 bits)
    assert (out.double() - oracle).abs().max() < (0.1 if dtype == torch.float16 else 1.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_returns_the_input_dtype(dtype):
    out = ms_deform_attn_portable(*make_inputs(SMALL_CASES[0], dtype=dtype))
    assert out.dtype == dtype


RAGGED = Case(name="ragged", source="RT-DETRv2-like points per level", size="small", batch=2,
              levels=((4, 5), (2, 3), (1, 1)), heads=2, channels=3, points=1, queries=4,
              locations="outside")


@pytest.mark.parametrize(("method", "sample"), [("bilinear", bilinear),
                                                ("discrete", nearest_clamped)])
@pytest.mark.parametrize("points_per_level", [[3, 1, 2], [0, 2, 1]])
def test_ragged_points_per_level_match_loops(method, sample, points_per_level):
    value, shapes, _, _ = make_inputs(RAGGED, dtype=torch.float64)
    generator = torch.Generator().manual_seed(1)
    total = sum(points_per_level)
    locations = torch.rand(2, 4, 2, total, 2, generator=generator, dtype=torch.float64) * 1.5 - 0.25
    weights = torch.rand(2, 4, 2, total, generator=generator, dtype=torch.float64)
    out = ms_deform_attn_ragged(value, shapes, locations, weights, points_per_level, method)
    expected = deform_attn_loops(value, RAGGED.levels, locations, weights, points_per_level, sample)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_ragged_with_equal_points_is_the_slot():
    case = SMALL_CASES[0]
    value, shapes, locations, weights = make_inputs(case, dtype=torch.float64)
    torch.testing.assert_close(
        ms_deform_attn_ragged(value, shapes, *_flat_points(locations, weights),
                              [case.points] * len(case.levels)),
        ms_deform_attn_portable(value, shapes, locations, weights), rtol=0, atol=0)


@pytest.mark.parametrize(("break_inputs", "error", "words"),
                         [pytest.param(*row[1:], id=row[0]) for row in BAD_INPUTS])
def test_bad_input_raises_an_error_naming_the_argument(break_inputs, error, words):
    with pytest.raises(error) as raised:
        ms_deform_attn_portable(*break_inputs(*make_inputs(HOSTILE_CASE)))
    for word in words:
        assert word in str(raised.value)


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"points_per_level": [1, 1]}, ValueError, ["points_per_level", "3 levels"]),
    ({"points_per_level": [1, 1, 1], "method": "nearest"}, ValueError, ["method", "'nearest'"]),
    ({"points_per_level": [2, 2, 1]}, ValueError, ["sampling_locations", "sum(points_per_level)"]),
])
def test_ragged_bad_input(kwargs, error, words):
    case = next(c for c in SMALL_CASES if c.name == "levels_1x1")
    value, shapes, locations, weights = make_inputs(case)
    with pytest.raises(error) as raised:
        ms_deform_attn_ragged(value, shapes, *_flat_points(locations[..., :1, :], weights[..., :1]),
                              **kwargs)
    for word in words:
        assert word in str(raised.value)


@pytest.mark.parametrize("bad", NON_FINITE.values(), ids=NON_FINITE.keys())
def test_a_non_finite_location_reads_zero_with_zero_gradients(bad):
    """The rule every path follows (docs/ms_deform_attn.md): NaN or +-inf in a coordinate makes
    that point read zero, as a point outside every level does (x = -1 here)."""
    value, shapes, locations, weights = make_inputs(HOSTILE_CASE, dtype=torch.float64)
    hostile, outside = locations.clone(), locations.clone()
    hostile[0, 1, 0, 1, 2, 0] = bad
    outside[0, 1, 0, 1, 2, 0] = -1.0
    leaves = [[t.clone().requires_grad_() for t in (value, locs, weights)]
              for locs in (hostile, outside)]
    outs = [ms_deform_attn_portable(v, shapes, loc, w) for v, loc, w in leaves]
    for out in outs:
        out.sum().backward()
    assert torch.isfinite(outs[0]).all()
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)
    for got, expected in zip(leaves[0], leaves[1], strict=True):
        torch.testing.assert_close(got.grad, expected.grad, rtol=0, atol=0)
    assert leaves[0][1].grad[0, 1, 0, 1, 2].abs().sum() == 0


def test_a_spatial_shapes_tensor_made_under_inference_mode_is_read():
    """Inference tensors have no version counter; reading their level sizes must still work."""
    value, shapes, locations, weights = make_inputs(SMALL_CASES[0], dtype=torch.float64)
    with torch.inference_mode():
        frozen = shapes.clone()
        out = ms_deform_attn_portable(value, frozen, locations, weights)
    torch.testing.assert_close(out, ms_deform_attn_portable(value, shapes, locations, weights),
                               rtol=0, atol=0)

"""Checks of the ragged Triton provider that need TRITON_INTERPRET=1 (run by
test_ragged_triton_interpreter). The suite's interpreter matrix holds the kernels to the bounded
contract on every small case; these hold them to what the matrix cannot see: the pixel discrete
sampling reads (bit for bit, on raw near-tie locations), the discrete sum's proven bound, the
Prepared protocol, the declines and the routing from ``ms_deform_attn_ragged``.

Not collected on its own (no ``test_`` prefix); run directly with
``TRITON_INTERPRET=1 python -m pytest tests/attention/ragged_interpreted_checks.py``.
"""

import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 before triton kernels are imported",
                allow_module_level=True)

from conformance.catalogue import CATALOGUE  # noqa: E402
from conformance.catalogue.ms_deform_attn_ragged import draw_inputs  # noqa: E402
from conformance.inputs import shapesets  # noqa: E402
from conformance.negative.ms_deform_attn_ragged import nearest_rounding_off_by_one  # noqa: E402
from libreyolo.kernels import dispatch  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn import (  # noqa: E402  # noqa: E402
    memo,
    ms_deform_attn_ragged,
    ms_deform_attn_ragged_portable,
)
from libreyolo.kernels.attention.ms_deform_attn import (  # noqa: E402
    ragged_triton_provider as provider,
)
from libreyolo.kernels.attention.ms_deform_attn import (  # noqa: E402
    triton_common as common,
)
from libreyolo.kernels.registry import answer  # noqa: E402

from . import unfilled_buffers  # noqa: E402
from .ragged_checks import discrete_sum_excess, pixel_mismatches  # noqa: E402

CASES = shapesets.load(CATALOGUE["ms_deform_attn_ragged"].shapes)
SMALL = [c for c in CASES if c.size == "small"]
DISCRETE = [c for c in SMALL if c.params["method"] == "discrete"]
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
KERNEL = provider.ms_deform_attn_ragged_triton


def pixel_chosen_in_float32(value, shapes, locations, weights, points, method):
    """Broken on purpose: picks the pixel in float32 arithmetic whatever the input dtype."""
    return ms_deform_attn_ragged_portable(value.float(), shapes, locations.float(),
                                          weights.float(), points, method).to(value.dtype)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("case", DISCRETE, ids=lambda c: c.name)
def test_discrete_sampling_reads_the_pixel_the_portable_path_reads(case, dtype):
    assert pixel_mismatches(KERNEL, case, dtype) == 0


@pytest.mark.parametrize("control", [nearest_rounding_off_by_one, pixel_chosen_in_float32],
                         ids=["rounding_off_by_one", "pixel_chosen_in_float32"])
def test_the_pixel_check_rejects_a_wrong_pixel_rule(control):
    """Negative controls: each picks some other pixel on at least one case and dtype."""
    near = next(c for c in DISCRETE if c.name == "discrete_near_rounding_ties")
    cases = [near] if control is pixel_chosen_in_float32 else DISCRETE
    assert any(pixel_mismatches(control, c, d) for c in cases for d in DTYPES.values())


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("case", DISCRETE, ids=lambda c: c.name)
def test_the_discrete_sum_is_within_its_proven_bound(case, dtype):
    assert discrete_sum_excess(KERNEL, case, dtype) <= 1.0


def rounds_through_bfloat16(*args):
    """Broken on purpose: the right pixels and sum, passed through a bfloat16 accumulator."""
    return ms_deform_attn_ragged_portable(*args).bfloat16().to(args[0].dtype)


def test_the_sum_bound_rejects_a_low_precision_sum():
    """Negative control: the bound is tight enough to see a bfloat16 rounding of a float32 sum."""
    case = next(c for c in DISCRETE if c.name == "rt_detrv2_dsp_mini")
    assert discrete_sum_excess(rounds_through_bfloat16, case, torch.float32) > 1.0


def test_accepts_hands_its_plan_to_the_call_and_prepares_once(monkeypatch):
    calls = []
    original = provider.prepare
    monkeypatch.setattr(provider, "prepare", lambda *a: calls.append(1) or original(*a))
    args = draw_inputs(SMALL[0].params)
    assert isinstance(provider.accepts(*args), provider.RaggedPlan)
    calls.clear()
    dispatch("ms_deform_attn_ragged", *args)
    assert len(calls) == 1, "dispatch must pass accepts' plan instead of planning again"
    calls.clear()
    KERNEL(*args)
    assert len(calls) == 1, "a direct call plans for itself"


@pytest.mark.parametrize("shapes_as", ["pairs", "tensor"])
def test_ms_deform_attn_ragged_reaches_the_kernel(monkeypatch, shapes_as):
    ran = []
    original = provider._forward
    monkeypatch.setattr(provider, "_forward", lambda *a: ran.append(1) or original(*a))
    args = draw_inputs({**SMALL[0].params, "spatial_shapes": shapes_as})
    torch.testing.assert_close(ms_deform_attn_ragged(*args),
                               ms_deform_attn_ragged_portable(*args))
    assert ran == [1]


def test_gradients_only_for_inputs_that_need_them_and_none_for_discrete_locations():
    value, shapes, locations, weights, points, _ = draw_inputs(DISCRETE[0].params)
    leaves = [t.detach().requires_grad_() for t in (value, locations, weights)]
    KERNEL(leaves[0], shapes, leaves[1], leaves[2], points, "discrete").sum().backward()
    assert leaves[0].grad is not None and leaves[2].grad is not None
    assert leaves[1].grad is None, "the portable path gives discrete locations no gradient"
    value.requires_grad_()
    KERNEL(value, shapes, locations, weights, points, "bilinear").sum().backward()
    assert value.grad is not None and locations.grad is None and weights.grad is None


def _args(**change):
    params = {**SMALL[0].params, "spatial_shapes": "pairs"}
    value, shapes, locations, weights, points, method = draw_inputs(params)
    named = {"value": value, "spatial_shapes": shapes, "sampling_locations": locations,
             "attention_weights": weights, "points_per_level": points, "method": method}
    return tuple({**named, **change}.values())


def _shapes_tensor():
    """The small case's level sizes as a device tensor (its values are never read on the host,
    so a bad layout or method is declined, and the portable path then raises)."""
    return torch.tensor(SMALL[0].params["levels"], dtype=torch.int64)


def _many_levels():
    levels = [[1, 1]] * (provider.MAX_LEVELS + 1)
    return draw_inputs({**SMALL[0].params, "levels": levels, "points": [1] * len(levels)})


def _many_points():
    return draw_inputs({**SMALL[0].params, "levels": [[2, 2]],
                        "points": [provider.MAX_POINTS + 1]})


@pytest.mark.parametrize(("args", "reason_words"), [
    (lambda: tuple(t.double() if isinstance(t, torch.Tensor) else t for t in _args()), "dtype"),
    (lambda: _args(spatial_shapes=torch.tensor(SMALL[0].params["levels"]).int()), "int64"),
    (lambda: _args(sampling_locations=_args()[2].half()), "share a dtype"),
    (lambda: _args(value=_args()[0].to("meta")), "meta"),
    (_many_levels, "levels"),
    (_many_points, "points"),
    (lambda: _args(spatial_shapes=_shapes_tensor(), attention_weights=_args()[3][..., :1]),
     "ragged layout"),
    (lambda: _args(spatial_shapes=_shapes_tensor(), method="nearest"), "method"),
], ids=["float64", "int32-shapes", "mixed-dtypes", "meta-device", "levels", "points",
        "tensor-shapes-layout", "tensor-shapes-method"])
def test_declines_what_it_does_not_take_with_a_reason(args, reason_words):
    """A direct call cannot fall back: it raises what the portable path raises for an input that
    path rejects (the same error on every path), else a ValueError naming the decline."""
    inputs = args()
    reason = provider.accepts(*inputs)
    assert isinstance(reason, str) and reason_words in reason
    try:
        ms_deform_attn_ragged_portable(*inputs)
    except (TypeError, ValueError) as rejected:
        with pytest.raises(type(rejected)) as raised:
            KERNEL(*inputs)
        assert str(raised.value) == str(rejected)
    else:
        with pytest.raises(ValueError, match="declines"):
            KERNEL(*inputs)


@pytest.mark.parametrize(("change", "error"), [
    ({"method": "nearest"}, ValueError),
    ({"points_per_level": [1, 1]}, ValueError),
    ({"spatial_shapes": [[8, 8], [4, 4], [2, 3]]}, ValueError),
    ({"spatial_shapes": [[8, 8.0], [4, 4], [2, 2]]}, TypeError),
], ids=["method", "points-per-level", "len-in", "float-size"])
def test_bad_input_raises_the_portable_paths_error(change, error):
    inputs = _args(**change)
    with pytest.raises(error) as portable:
        ms_deform_attn_ragged_portable(*inputs)
    with pytest.raises(error, match=str(portable.value).replace("[", r"\[").replace("(", r"\(")
                       .replace(")", r"\)").replace("]", r"\]").replace("*", r"\*")):
        provider.accepts(*inputs)


def test_declines_while_a_graph_is_captured():
    inputs = draw_inputs(SMALL[0].params)
    reasons = []
    torch.jit.trace(lambda v: reasons.append(answer(provider.REGISTERED, (v, *inputs[1:]))) or v,
                    (inputs[0],))
    assert reasons and reasons[0].startswith("declared unsupported (a graph is being captured")


# The backward kernel stores every weight gradient, and in bilinear mode every location gradient,
# once, so their buffers start unfilled (``triton_common.stored_by_kernel``). Two query blocks
# per (batch, head) at 8 channels, a level without points, samples outside the levels.
EVERY_GRADIENT_PARAMS = {"batch": 2, "levels": [[3, 5], [2, 2], [1, 3]], "heads": 2,
                         "channels": 8, "points": [3, 0, 2], "queries": 37,
                         "locations": "outside"}


@pytest.fixture
def fresh_plans():
    """Plans made under a patched planner must not outlive the test."""
    memo._plans.clear()
    yield
    memo._plans.clear()


def unstored_gradients(monkeypatch, method) -> list[str]:
    """``unfilled_buffers.unstored_gradients`` of the ragged kernel under ``method``."""
    value, shapes, locations, weights, points, _ = draw_inputs(
        {**EVERY_GRADIENT_PARAMS, "method": method}, seed=5)
    grad = torch.randn(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3],
                       generator=torch.Generator().manual_seed(6))
    return unfilled_buffers.unstored_gradients(
        monkeypatch, lambda v, loc, w: KERNEL(v, shapes, loc, w, points, method),
        (value, locations, weights), grad)


IN_FORWARD = pytest.mark.parametrize("in_forward", [True, False],
                                     ids=["buffers-from-forward", "buffers-from-backward"])


def gradients_in_forward(monkeypatch, yes: bool) -> None:
    """Make every plan's forward allocate the gradient buffers (or leave them to the backward):
    the ragged plans follow the classic provider's threshold."""
    monkeypatch.setattr(common, "GRADIENTS_IN_FORWARD_BELOW", 2**62 if yes else 0)


@IN_FORWARD
@pytest.mark.parametrize("method", ["bilinear", "discrete"])
def test_the_backward_stores_every_gradient_it_returns(monkeypatch, fresh_plans, method,
                                                       in_forward):
    gradients_in_forward(monkeypatch, in_forward)
    assert unstored_gradients(monkeypatch, method) == []


@IN_FORWARD
@pytest.mark.parametrize("method", ["bilinear", "discrete"])
def test_a_graph_differentiated_twice_gives_equal_gradients_and_keeps_the_first(
        monkeypatch, fresh_plans, method, in_forward):
    gradients_in_forward(monkeypatch, in_forward)
    value, shapes, locations, weights, points, _ = draw_inputs(
        {**EVERY_GRADIENT_PARAMS, "method": method}, seed=9)
    grad = torch.randn(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3],
                       generator=torch.Generator().manual_seed(10))
    assert unfilled_buffers.second_backward_problems(
        lambda v, loc, w: KERNEL(v, shapes, loc, w, points, method),
        (value, locations, weights), grad) == []


@pytest.mark.parametrize(("method", "unstored"), [
    ("bilinear", ["sampling_locations", "attention_weights"]),
    ("discrete", ["attention_weights"])])
def test_the_stored_gradient_check_catches_a_launch_that_skips_queries(monkeypatch, fresh_plans,
                                                                      method, unstored):
    """Negative control: a grid one query block short leaves the last block's gradients as the
    buffers started."""
    monkeypatch.setattr(provider, "cdiv", lambda n, block: max(1, -(-n // block) - 1))
    assert unstored_gradients(monkeypatch, method) == unstored

"""Checks of the Triton provider that need TRITON_INTERPRET=1 (run by test_triton_interpreter).

Not collected on its own (no ``test_`` prefix); run directly with
``TRITON_INTERPRET=1 python -m pytest tests/attention/interpreted_checks.py``.
"""

import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 before triton kernels are imported",
                allow_module_level=True)

from conformance.inputs.ms_deform_attn_cases import (  # noqa: E402
    LOCATIONS,
    Case,
    load_cases,
    make_inputs,
)
from conformance.running.ms_deform_attn_parity import bounded_check  # noqa: E402
from libreyolo.kernels import registered  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn import levels as levels_module  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn import (
    maybe_ms_deform_attn,  # noqa: E402
    memo,  # noqa: E402
    triton_common,  # noqa: E402
    triton_provider,  # noqa: E402
)
from libreyolo.kernels.attention.ms_deform_attn.portable import (  # noqa: E402
    ms_deform_attn_portable,
)
from libreyolo.kernels.attention.ms_deform_attn.triton_provider import (  # noqa: E402
    accepts,
    ms_deform_attn_triton,
    triton_ready,
)
from libreyolo.kernels.registry import answer  # noqa: E402

from . import unfilled_buffers  # noqa: E402
from .call_sites import CALL_SITES, native_inputs  # noqa: E402
from .hostile_inputs import BAD_INPUTS, HOSTILE_CASE, NON_FINITE  # noqa: E402

SMALL_CASES = load_cases(sizes=("small",))


def test_the_environment_check_passes_under_the_interpreter():
    assert triton_ready() is True


# The small cases' forward and gradients against the bounded contract, in every dtype and layout,
# are the interpreter matrix's cells (conformance/test_interpreter.py); below, what it does not ask.


@st.composite
def layouts(draw):
    """Tiny layouts: 1x1 levels, odd sizes, zero queries, every location kind, strided views."""
    locations = draw(st.sampled_from(LOCATIONS))
    # exact pixel centres need power-of-two sizes (see the shape set); elsewhere a "centre" would
    # sit a rounding away from bilinear's kink, where either side's location gradient is right
    side = st.sampled_from([1, 2, 4, 8]) if locations == "centres" else st.integers(1, 5)
    return Case(name="hypothesis", source="hypothesis", size="small",
                batch=draw(st.integers(1, 3)),
                levels=tuple(draw(st.lists(st.tuples(side, side), min_size=1, max_size=3))),
                heads=draw(st.integers(1, 3)), channels=draw(st.integers(1, 20)),
                points=draw(st.integers(1, 3)), queries=draw(st.integers(0, 9)),
                locations=locations, contiguous=draw(st.booleans()))


@settings(max_examples=12, deadline=None)
@given(case=layouts(), seed=st.integers(0, 2**16))
def test_hypothesis_layouts_are_within_the_bounded_contract(case, seed):
    for verdict in bounded_check(ms_deform_attn_triton, *make_inputs(case, seed=seed)):
        assert verdict.passed, f"{case}: {verdict}"


@pytest.mark.parametrize("case", SMALL_CASES, ids=lambda c: c.name)
def test_returns_the_input_dtype_for_output_and_gradients(case):
    value, shapes, locations, weights = make_inputs(case, dtype=torch.float16)
    leaves = [t.detach().requires_grad_() for t in (value, locations, weights)]
    out = ms_deform_attn_triton(leaves[0], shapes, leaves[1], leaves[2])
    out.float().sum().backward()
    assert out.dtype == torch.float16
    assert [leaf.grad.dtype for leaf in leaves] == [torch.float16] * 3


def test_gradients_only_for_inputs_that_need_them():
    value, shapes, locations, weights = make_inputs(SMALL_CASES[0])
    value.requires_grad_()
    ms_deform_attn_triton(value, shapes, locations, weights).sum().backward()
    assert value.grad is not None and locations.grad is None and weights.grad is None


@pytest.mark.parametrize(("break_inputs", "error", "words"),
                         [pytest.param(*row[1:], id=row[0]) for row in BAD_INPUTS])
def test_bad_input_raises_what_the_portable_core_raises(break_inputs, error, words):
    """Same inputs, same errors: directly, and through the helper the module calls."""
    for path in (ms_deform_attn_triton, maybe_ms_deform_attn, ms_deform_attn_portable):
        with pytest.raises(error) as raised:
            path(*break_inputs(*make_inputs(HOSTILE_CASE)))
        for word in words:
            assert word in str(raised.value), path.__name__


@pytest.mark.parametrize("bad", NON_FINITE.values(), ids=NON_FINITE.keys())
def test_a_non_finite_location_gives_the_portable_result(bad):
    """Output and the three gradients equal the portable core's, which reads such a point as
    zero (test_portable states that rule)."""
    value, shapes, locations, weights = make_inputs(HOSTILE_CASE)
    locations = locations.clone()
    locations[0, 1, 0, 1, 2, 0] = bad
    locations[2, 4, 1, 0, 0] = bad
    results = []
    for fn in (ms_deform_attn_triton, ms_deform_attn_portable):
        leaves = [t.clone().requires_grad_() for t in (value, locations, weights)]
        out = fn(leaves[0], shapes, leaves[1], leaves[2])
        out.backward(torch.ones_like(out))
        results.append([out, *(leaf.grad for leaf in leaves)])
    assert torch.isfinite(results[0][0]).all()
    for got, expected in zip(*results, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("change", "reason_words"), [
    (lambda v, s, loc, w: (v.double(), s, loc.double(), w.double()), "dtype"),
    (lambda v, s, loc, w: tuple(t if t is s else t[:1].expand(65536, *t.shape[1:])
                                for t in (v, s, loc, w)), "launch grid"),
])
def test_declines_what_it_does_not_take_with_a_reason(change, reason_words):
    inputs = change(*make_inputs(SMALL_CASES[0]))
    reason = accepts(*inputs)
    assert isinstance(reason, str) and reason_words in reason
    with pytest.raises(ValueError, match="declines"):
        ms_deform_attn_triton(*inputs)


@pytest.mark.parametrize("layout", ["tensor", "pairs", "tuple_pairs"])
def test_every_spatial_shapes_layout_reaches_the_kernels_through_dispatch(layout, monkeypatch):
    """The registry hands accepts' plan to the call, which runs the kernels on it."""
    value, shapes, locations, weights = make_inputs(SMALL_CASES[0])
    given = {"tensor": shapes, "pairs": shapes.tolist(),
             "tuple_pairs": tuple(map(tuple, shapes.tolist()))}[layout]
    plans = []
    real_forward = triton_provider._forward
    monkeypatch.setattr(triton_provider, "_forward",
                        lambda plan, *args: plans.append(plan) or real_forward(plan, *args))
    out = maybe_ms_deform_attn(value, given, locations, weights)
    assert len(plans) == 1 and isinstance(plans[0], triton_provider.LaunchPlan)
    torch.testing.assert_close(out, ms_deform_attn_portable(value, shapes, locations, weights),
                               rtol=1e-5, atol=1e-6)


def test_a_spatial_shapes_tensor_is_read_once_per_version(monkeypatch):
    """Reading a device tensor is a host sync: once per tensor version, not once per call."""
    value, shapes, locations, weights = make_inputs(SMALL_CASES[0])
    reads = []
    real_read = levels_module._read_tensor
    monkeypatch.setattr(levels_module, "_read_tensor",
                        lambda t: reads.append(t) or real_read(t))
    for _ in range(3):
        maybe_ms_deform_attn(value, shapes, locations, weights)
    assert len(reads) == 1
    shapes.add_(0)  # an in-place change: a new version, read again
    maybe_ms_deform_attn(value, shapes, locations, weights)
    assert len(reads) == 2


def test_new_sizes_written_into_the_same_tensor_take_effect():
    """A plan kept for a tensor's sizes must not outlive them: the same tensor, its first level
    transposed in place (same len_in), gives the portable result for the new sizes."""
    case = next(c for c in SMALL_CASES if c.levels[0][0] != c.levels[0][1])
    value, shapes, locations, weights = make_inputs(case)
    for _ in range(3):  # kept by the second call, used by the third
        maybe_ms_deform_attn(value, shapes, locations, weights)
    shapes[0] = shapes[0].flip(0).clone()
    out = maybe_ms_deform_attn(value, shapes, locations, weights)
    torch.testing.assert_close(out, ms_deform_attn_portable(value, shapes, locations, weights),
                               rtol=1e-5, atol=1e-6)


def test_declines_while_a_graph_is_captured():
    inputs = make_inputs(SMALL_CASES[0])
    (impl,) = [i for i in registered("ms_deform_attn") if i.name == "triton"]
    reasons = []
    torch.jit.trace(lambda v: reasons.append(answer(impl, (v, *inputs[1:]))) or v, (inputs[0],))
    assert reasons and reasons[0].startswith("declared unsupported (a graph is being captured")


@pytest.mark.parametrize("site", CALL_SITES, ids=lambda s: s.name)
def test_each_family_layout_reaches_the_triton_kernels(site, monkeypatch):
    """The layouts of docs/ms_deform_attn.md's lineage table, through the public helpers."""
    plans = []
    real_forward = triton_provider._forward
    monkeypatch.setattr(triton_provider, "_forward",
                        lambda plan, *args: plans.append(plan) or real_forward(plan, *args))
    native, inputs = native_inputs(site)
    out = site.call(*native)
    assert len(plans) == 1, f"{site.families}: the Triton kernels did not run"
    torch.testing.assert_close(out, ms_deform_attn_portable(*inputs), rtol=1e-5, atol=1e-6)


def test_the_module_reaches_the_triton_kernels_with_pairs_and_with_a_tensor(monkeypatch):
    from libreyolo.nn import MSDeformAttn

    plans = []
    real_forward = triton_provider._forward
    monkeypatch.setattr(triton_provider, "_forward",
                        lambda plan, *args: plans.append(plan) or real_forward(plan, *args))
    module = MSDeformAttn(d_model=32, n_levels=2, n_heads=4, n_points=3)
    levels = [(6, 8), (3, 4)]
    query, reference = torch.randn(2, 5, 32), torch.rand(2, 5, 2, 2)
    value = torch.randn(2, 60, 32)
    outs = [module(query, reference, value, shapes)
            for shapes in (levels, torch.tensor(levels, dtype=torch.int64))]
    assert len(plans) == 2
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)


def test_a_call_through_the_helper_validates_once(monkeypatch):
    """accepts validates and plans; the call takes its plan instead of validating again."""
    calls = []
    real_validate = triton_provider.validate_inputs
    monkeypatch.setattr(triton_provider, "validate_inputs",
                        lambda *args: calls.append(1) or real_validate(*args))
    memo._plans.clear()
    inputs = make_inputs(SMALL_CASES[0])
    assert maybe_ms_deform_attn(*inputs) is not None
    assert len(calls) == 1
    ms_deform_attn_triton(*inputs)  # a direct call prepares for itself: from the kept plan
    assert len(calls) == 1, "level sizes given as a tensor: the plan is kept after one read"
    other = make_inputs(SMALL_CASES[1])
    ms_deform_attn_triton(*other)  # another description: validated, once
    assert len(calls) == 2


# The backward kernel stores every location and weight gradient once, so their buffers start
# unfilled (``triton_common.stored_by_kernel``). Two query blocks per (batch, head) (BLOCK_Q is
# 32 at 8 channels), samples outside the levels and a non-finite location: the masked paths
# must store their zeros too.
EVERY_GRADIENT_CASE = Case("every_gradient_stored", "test", "small", batch=2,
                           levels=((3, 5), (2, 2)), heads=2, channels=8, points=3, queries=37,
                           locations="outside")


@pytest.fixture
def fresh_plans():
    """Plans made under a patched planner must not outlive the test."""
    memo._plans.clear()
    yield
    memo._plans.clear()


# A value of 65,536 elements zeroed by the forward's four programs, 16,384 each.
ZEROING_CASE = Case("value_zeroed_by_four_programs", "test", "small", batch=1,
                    levels=((32, 64),), heads=1, channels=32, points=2, queries=64)


def unstored_gradients(monkeypatch, case=EVERY_GRADIENT_CASE) -> list[str]:
    """``unfilled_buffers.unstored_gradients`` on a case with every kind of sample (two query
    blocks, samples outside the levels, a NaN location), or on ``case``."""
    value, shapes, locations, weights = make_inputs(case, seed=5)
    if case is EVERY_GRADIENT_CASE:
        locations[0, 3, 1, 0, 2, 0] = float("nan")
    grad = torch.randn(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3],
                       generator=torch.Generator().manual_seed(6))
    return unfilled_buffers.unstored_gradients(
        monkeypatch, lambda v, loc, w: ms_deform_attn_triton(v, shapes, loc, w),
        (value, locations, weights), grad)


def split_levels(monkeypatch, split: bool) -> None:
    """Make every plan take the backward with one level a program (or all levels in one)."""
    monkeypatch.setattr(triton_provider, "SPLIT_LEVELS_BELOW", 2**62 if split else 0)


def gradients_in_forward(monkeypatch, yes: bool) -> None:
    """Make every plan's forward allocate the gradient buffers (or leave them to the backward)."""
    monkeypatch.setattr(triton_common, "GRADIENTS_IN_FORWARD_BELOW", 2**62 if yes else 0)


IN_FORWARD = pytest.mark.parametrize("in_forward", [True, False],
                                     ids=["buffers-from-forward", "buffers-from-backward"])


@IN_FORWARD
@pytest.mark.parametrize("split", [True, False], ids=["levels-split", "levels-joined"])
def test_the_backward_stores_every_location_and_weight_gradient(monkeypatch, fresh_plans,
                                                                split, in_forward):
    split_levels(monkeypatch, split)
    gradients_in_forward(monkeypatch, in_forward)
    assert unstored_gradients(monkeypatch) == []


def test_the_stored_gradient_check_catches_a_forward_that_does_not_zero(monkeypatch,
                                                                        fresh_plans):
    """Negative control: a forward that leaves the value gradient it allocated as it started."""
    gradients_in_forward(monkeypatch, True)
    forward = triton_provider._forward
    monkeypatch.setattr(triton_provider, "_forward",
                        lambda plan, v, loc, w, grad_value=None: forward(plan, v, loc, w))
    assert unstored_gradients(monkeypatch) == ["value"]


def test_the_forward_zeroes_a_value_gradient_shared_by_several_programs(monkeypatch,
                                                                      fresh_plans):
    gradients_in_forward(monkeypatch, True)
    assert unstored_gradients(monkeypatch, ZEROING_CASE) == []


def test_the_stored_gradient_check_catches_zeroing_runs_one_block_short(monkeypatch,
                                                                       fresh_plans):
    """Negative control: each program's run of zeros one ``ZERO_BLOCK`` short leaves a gap
    before the next program's."""
    gradients_in_forward(monkeypatch, True)
    zeroing = triton_common.forward_zeroing

    def short(*args):
        count, share = zeroing(*args)
        return count, share - triton_common.ZERO_BLOCK

    monkeypatch.setattr(triton_common, "forward_zeroing", short)
    assert unstored_gradients(monkeypatch, ZEROING_CASE) == ["value"]


def test_a_forward_with_few_programs_over_a_large_value_leaves_the_buffers_to_the_backward():
    """A query or two over a large value: zeroing in the forward would leave a few programs a
    long serial fill, so the backward allocates (and fills) as before."""
    small = {"batch": 1, "levels": ((64, 64),), "heads": 1, "channels": 32, "points": 4}
    few = Case("one_query_large_value", "test", "small", queries=1, **small)
    many = Case("decoder_like", "test", "small", queries=300, **small)
    assert accepts(*make_inputs(few, seed=1)).zeroing is None
    assert accepts(*make_inputs(many, seed=1)).zeroing is not None


def second_backward_problems() -> list[str]:
    value, shapes, locations, weights = make_inputs(EVERY_GRADIENT_CASE, seed=9)
    grad = torch.randn(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3],
                       generator=torch.Generator().manual_seed(10))
    return unfilled_buffers.second_backward_problems(
        lambda v, loc, w: ms_deform_attn_triton(v, shapes, loc, w), (value, locations, weights),
        grad)


@IN_FORWARD
def test_a_graph_differentiated_twice_gives_equal_gradients_and_keeps_the_first(
        monkeypatch, fresh_plans, in_forward):
    gradients_in_forward(monkeypatch, in_forward)
    assert second_backward_problems() == []


def test_the_second_backward_check_catches_buffers_reused(monkeypatch, fresh_plans):
    """Negative control: the forward's buffers kept for every backward (never handed over)."""
    gradients_in_forward(monkeypatch, True)
    handed_over = triton_common.gradients

    def reusing(launch_for, ctx, grad_out):
        buffers = ctx.buffers
        try:
            return handed_over(launch_for, ctx, grad_out)
        finally:
            ctx.buffers = buffers

    monkeypatch.setattr(triton_common, "gradients", reusing)
    assert second_backward_problems() == ["value: the first gradient changed",
                                          "value: the second gradient differs"]


def gradients_each_way(monkeypatch, configure, seed: int) -> list[list[torch.Tensor]]:
    """The three gradients of one input, planned afresh under ``configure(monkeypatch, True)``
    and then under ``configure(monkeypatch, False)``."""
    value, shapes, locations, weights = make_inputs(EVERY_GRADIENT_CASE, seed=seed)
    grad = torch.randn(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3],
                       generator=torch.Generator().manual_seed(seed + 1))
    runs = []
    for yes in (True, False):
        configure(monkeypatch, yes)
        memo._plans.clear()
        leaves = [t.detach().clone().requires_grad_() for t in (value, locations, weights)]
        ms_deform_attn_triton(leaves[0], shapes, leaves[1], leaves[2]).backward(grad)
        runs.append([leaf.grad for leaf in leaves])
    return runs


def test_buffers_from_the_forward_or_the_backward_give_the_same_gradients(monkeypatch,
                                                                         fresh_plans):
    runs = gradients_each_way(monkeypatch, gradients_in_forward, seed=11)
    assert all(torch.equal(a, b) for a, b in zip(*runs, strict=True))


@pytest.mark.parametrize("split", [True, False], ids=["levels-split", "levels-joined"])
def test_the_stored_gradient_check_catches_a_launch_that_skips_queries(monkeypatch,
                                                                      fresh_plans, split):
    """Negative control: a grid one query block short leaves the last block's gradients as the
    buffers started."""
    split_levels(monkeypatch, split)
    monkeypatch.setattr(triton_provider, "cdiv", lambda n, block: max(1, -(-n // block) - 1))
    assert unstored_gradients(monkeypatch) == ["sampling_locations", "attention_weights"]


def test_the_stored_gradient_check_catches_a_split_launch_that_skips_a_level(monkeypatch,
                                                                            fresh_plans):
    """Negative control: a split backward launched for one level fewer leaves the last level's
    gradients as the buffers started (and its value gradient unadded)."""
    split_levels(monkeypatch, True)
    plan_init = triton_provider.LaunchPlan.__init__

    def one_level_short(self, *args):
        plan_init(self, *args)
        *grid, levels = self.backward_grid
        self.backward_grid = (*grid, levels - 1)

    monkeypatch.setattr(triton_provider.LaunchPlan, "__init__", one_level_short)
    assert unstored_gradients(monkeypatch) == ["sampling_locations", "attention_weights"]
    value, shapes, locations, weights = make_inputs(EVERY_GRADIENT_CASE, seed=5)
    failed = {v.quantity for v in bounded_check(ms_deform_attn_triton, value, shapes, locations,
                                                weights) if not v.passed}
    assert failed == {"grad_value", "grad_sampling_locations", "grad_attention_weights"}


def test_levels_split_or_joined_give_the_same_point_gradients(monkeypatch, fresh_plans):
    """One level a program or all in one: each location and weight gradient is the same sum
    over channels (bit for bit); the value gradient's atomic adds only change order."""
    runs = gradients_each_way(monkeypatch, split_levels, seed=7)
    (value_split, *points_split), (value_joined, *points_joined) = runs
    assert all(torch.equal(a, b) for a, b in zip(points_split, points_joined, strict=True))
    torch.testing.assert_close(value_split, value_joined, rtol=1e-6, atol=1e-6)

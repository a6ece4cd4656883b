"""Checks of the deterministic MSDA backward (``deterministic.py``) that need TRITON_INTERPRET=1
(run by test_deterministic_interpreter): under ``torch.use_deterministic_algorithms(True)`` the
classic and ragged backwards take the fixed-point path (a spy), stay within the bounded contract
with the fixed-point rounding far inside it, give value gradients whose bits do not depend on
the order of the adds (queries permuted, levels split or joined: the interpreter runs the adds
in one order per launch, so the order is changed by changing the launch), zeros for zero
gradients, the stated error on an element hit by many samples, the stated NaN rule, every buffer
element stored, and one launch per mode in a plan. Bit-for-bit repeatability run to run is a GPU
property: ``test_deterministic_cuda.py`` and ``conformance/test_determinism.py``.

Not collected on its own (no ``test_`` prefix); run directly with
``TRITON_INTERPRET=1 python -m pytest tests/attention/deterministic_checks.py``.
"""

import math
import os

import pytest
import torch
import triton
import triton.language as tl

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 before triton kernels are imported",
                allow_module_level=True)

from conformance.catalogue import CATALOGUE  # noqa: E402
from conformance.catalogue.ms_deform_attn_ragged import draw_inputs  # noqa: E402
from conformance.inputs import shapesets  # noqa: E402
from conformance.inputs.ms_deform_attn_cases import Case, load_cases, make_inputs  # noqa: E402
from conformance.running.cells import CellPlan, input_seed, run_cell  # noqa: E402
from conformance.running.determinism import deterministic_algorithms, same_bits  # noqa: E402
from conformance.running.ms_deform_attn_parity import bounded_check  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn import deterministic, memo  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn import (  # noqa: E402
    ragged_triton_provider as ragged,
)
from libreyolo.kernels.attention.ms_deform_attn import triton_common as common  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn import (  # noqa: E402
    triton_provider as classic,
)
from libreyolo.kernels.attention.ms_deform_attn.deterministic_kernels import (  # noqa: E402
    _to_fixed_point,
)

from . import unfilled_buffers  # noqa: E402

CLASSIC = classic.ms_deform_attn_triton
RAGGED = ragged.ms_deform_attn_ragged_triton
RAGGED_SLOT = "ms_deform_attn_ragged"
SMALL = load_cases(sizes=("small",))
RAGGED_SMALL = [c for c in shapesets.load(CATALOGUE[RAGGED_SLOT].shapes) if c.size == "small"]
LOW_PRECISION = {"float16": torch.float16, "bfloat16": torch.bfloat16}
#: The fixed-point term must stay this far inside the bounded contract's limit.
FAR_INSIDE = 1e-3
#: Small layouts for the checks beyond the contract (the interpreter's time is per program and
#: per point): one (batch, head), two levels, 21 queries, so each pixel takes many samples.
TINY = Case("tiny", "test", "small", batch=1, levels=((3, 4), (2, 2)), heads=1, channels=8,
            points=2, queries=21)
TINY_RAGGED = {"batch": 1, "levels": [[3, 4], [2, 2]], "heads": 1, "channels": 8,
               "points": [3, 1], "queries": 21, "method": "bilinear", "spatial_shapes": "pairs"}


@pytest.fixture(autouse=True)
def fresh_plans():
    """Plans (and their launches) made under a patched planner must not outlive the test."""
    memo._plans.clear()
    yield
    memo._plans.clear()


@pytest.fixture
def deterministic_mode():
    with deterministic_algorithms():
        yield


def classic_grad(value, locations) -> torch.Tensor:
    """The upstream gradient ``bounded_check`` draws for these inputs (its seed 0)."""
    batch, _, heads, channels = value.shape
    return torch.randn(batch, locations.shape[1], heads * channels,
                       generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def gradients(fn, args, grad, differentiable=(0, 2, 3)) -> list:
    """The gradients of ``fn(*args)`` for ``grad``, for the arguments at ``differentiable``."""
    args = list(args)
    for i in differentiable:
        args[i] = args[i].detach().clone().requires_grad_()
    out = fn(*args)
    out.backward(grad.to(out.dtype))
    return [args[i].grad for i in differentiable]


# -- the bounded contract, with the fixed-point term far inside it -----------------------------

def every_case_in_float32_and_two_in_low_precision(cases, two):
    """(case, dtype) parameters: each case in float32, the cases named ``two`` in float16 and
    bfloat16 too."""
    return [pytest.param(c, d, id=f"{c.name}-{name}") for c in cases
            for name, d in (("float32", torch.float32), *LOW_PRECISION.items())
            if d is torch.float32 or c.name in two]


@pytest.mark.parametrize(("case", "dtype"), every_case_in_float32_and_two_in_low_precision(
    SMALL, ("detr_4level_mini", "dfine_mini")))
def test_classic_gradients_are_within_the_bounded_contract(case, dtype, deterministic_mode):
    inputs = make_inputs(case, dtype=dtype, seed=3)
    verdicts = {v.quantity: v for v in bounded_check(CLASSIC, *inputs)}
    assert all(v.passed for v in verdicts.values()), f"{case.name} {dtype}: {verdicts}"
    term = deterministic.fixed_point_error_bound(
        classic_grad(inputs[0], inputs[2]).to(dtype).float(), inputs[3].float())
    assert term <= FAR_INSIDE * verdicts["grad_value"].bound or verdicts["grad_value"].bound == 0


def ragged_cell(case, dtype):
    seed = input_seed(0, RAGGED_SLOT, case.name, dtype, "contiguous")
    return run_cell(CATALOGUE[RAGGED_SLOT], CellPlan(RAGGED_SLOT, "triton", "interpreter", dtype,
                                                     case, "contiguous", seed))


@pytest.mark.parametrize(("case", "dtype"), every_case_in_float32_and_two_in_low_precision(
    RAGGED_SMALL, ("d_fine_mini", "rt_detrv2_dsp_mini")))
def test_ragged_gradients_are_within_the_bounded_contract(case, dtype, deterministic_mode):
    cell = ragged_cell(case, dtype)
    assert cell.state == "pass", f"{case.name} {dtype}: {cell.state}: {cell.reason}"


# -- the path that runs ------------------------------------------------------------------------

@pytest.fixture
def fixed_point_runs(monkeypatch):
    """The value-gradient dtypes the deterministic path handed to the backward launch."""
    runs = []
    original = deterministic.gradients

    def spy(launch_for, plan, *args):
        def launch(plan, tensors):
            runs.append(tensors[5].dtype)
            return launch_for(plan, tensors)

        return original(launch, plan, *args)

    monkeypatch.setattr(deterministic, "gradients", spy)
    return runs


def classic_args(seed=1):
    return make_inputs(TINY, seed=seed)


def ragged_args(**change):
    return draw_inputs({**TINY_RAGGED, **change}, seed=2)


def _grad_for(args):
    value, locations = args[0], args[2]
    return torch.randn(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3],
                       generator=torch.Generator().manual_seed(4))


@pytest.mark.parametrize("slot", ["classic", "ragged"])
def test_deterministic_mode_runs_the_fixed_point_backward_and_only_then(slot, fixed_point_runs):
    fn, args = (CLASSIC, classic_args()) if slot == "classic" else (RAGGED, ragged_args())
    grad = _grad_for(args)
    gradients(fn, args, grad)
    assert fixed_point_runs == [], "outside deterministic mode the atomic backward runs"
    with deterministic_algorithms():
        gradients(fn, args, grad)
    assert fixed_point_runs == [torch.int64]


def test_a_plan_keeps_one_backward_launch_per_mode():
    """A Launcher relaunches the dtypes it was made with: the atomic backward's launch must never
    take the int64 accumulator (nor the other way round), so each mode has its own. The fixed
    point's two streaming launches are the plan's too (no process-wide cache of launches)."""
    args = classic_args()
    grad = _grad_for(args)
    plan = classic.accepts(*args)
    gradients(CLASSIC, args, grad)
    assert "backward" in plan.launches and "fixed-point backward" not in plan.launches
    with deterministic_algorithms():
        gradients(CLASSIC, args, grad)
    assert plan.launches["fixed-point backward"] is not plan.launches["backward"]
    streaming = {("fixed-point bound", grad.dtype), "fixed-point to float"}
    assert streaming <= set(plan.launches)
    rargs = ragged_args()  # level sizes as pairs: the plan is kept
    rplan = ragged.accepts(*rargs)
    with deterministic_algorithms():
        gradients(RAGGED, rargs, _grad_for(rargs))
    assert {"fixed-point backward", *streaming} <= set(rplan.launches)
    assert "backward" not in rplan.launches


# -- order independence ------------------------------------------------------------------------

def permuted_queries(args, grad):
    """The same sums with the queries in reverse order: the value gradient's adds reordered."""
    args = list(args)
    flip = torch.arange(args[2].shape[1] - 1, -1, -1)
    args[2], args[3] = args[2][:, flip].contiguous(), args[3][:, flip].contiguous()
    return args, grad[:, flip].contiguous()


def value_gradients_each_order(slot, args, grad):
    fn = CLASSIC if slot == "classic" else RAGGED
    permuted, permuted_grad = permuted_queries(args, grad)
    return gradients(fn, args, grad)[0], gradients(fn, permuted, permuted_grad)[0]


ORDER_CASES = [("classic", lambda: classic_args(seed=8)),
               ("ragged", lambda: ragged_args()),
               ("ragged", lambda: ragged_args(method="discrete"))]
ORDER_IDS = ["classic", "ragged-bilinear", "ragged-discrete"]


@pytest.mark.parametrize(("slot", "args"), ORDER_CASES, ids=ORDER_IDS)
def test_the_value_gradient_bits_do_not_depend_on_the_order_of_the_adds(slot, args,
                                                                       deterministic_mode):
    args = args()
    first, reordered = value_gradients_each_order(slot, args, _grad_for(args))
    assert same_bits(first, reordered)


def test_the_order_check_sees_the_atomic_sums_change():
    """Negative control: float32 atomic adds (outside the mode) in reversed query order change
    the value gradient's bits on at least one of these cases."""
    changed = []
    for slot, args in ORDER_CASES:
        args = args()
        first, reordered = value_gradients_each_order(slot, args, _grad_for(args))
        torch.testing.assert_close(first, reordered, rtol=1e-5, atol=1e-6)
        changed.append(not same_bits(first, reordered))
    assert any(changed), dict(zip(ORDER_IDS, changed, strict=True))


def test_levels_split_or_joined_give_the_same_value_gradient_bits(monkeypatch,
                                                                 deterministic_mode):
    """One level a program or all levels in one (different add orders): the same bits."""
    args = classic_args(seed=7)
    grad = _grad_for(args)
    runs = []
    for split in (True, False):
        monkeypatch.setattr(classic, "SPLIT_LEVELS_BELOW", 2**62 if split else 0)
        memo._plans.clear()
        runs.append(gradients(CLASSIC, args, grad))
    assert all(same_bits(a, b) for a, b in zip(*runs, strict=True))


# -- zeros, many hits, NaN ---------------------------------------------------------------------

@pytest.mark.parametrize("zero", ["output_gradient", "weights"])
@pytest.mark.parametrize("slot", ["classic", "ragged"])
def test_zero_gradients_give_exact_zeros(slot, zero, deterministic_mode):
    """A zero bound still gives a finite scale (2**126): the value gradient is +0.0 bits."""
    fn, args = (CLASSIC, list(classic_args())) if slot == "classic" else \
        (RAGGED, list(ragged_args()))
    grad = _grad_for(args)
    if zero == "weights":
        args[3] = torch.zeros_like(args[3])
    else:
        grad = torch.zeros_like(grad)
    grad_value = gradients(fn, args, grad)[0]
    assert same_bits(grad_value, torch.zeros_like(grad_value))


def many_hits(method="bilinear", kind="random"):
    """300 queries x 4 points of one head, every point reading pixel (1, 2) of a 4x4 level alone
    (bilinear: on its centre, one corner of weight 1; discrete: on its cell centre): 1,200
    contributions to each of its 8 channels, and those contributions. ``kind`` "cancelling":
    queries 150-299 repeat the first 150's weights with the output gradient negated, and one
    more query's gradient is a millionth: a sum of about 1e-7 from contributions of about 1,
    where a coarse grid shows through float32's rounding of the sum. "largest": every weight 1
    and every query's gradient the same, so the last channel's sum is the bound itself, ``N``
    times the largest contribution (an ``N`` too small would overflow int64 there)."""
    generator = torch.Generator().manual_seed(11)
    queries, points, channels = 300, 4, 8
    value = torch.randn(1, 16, 1, channels, generator=generator)
    weights = torch.rand(1, queries, 1, 1, points, generator=generator)
    grad = torch.randn(1, queries, channels, generator=generator)
    if kind == "largest":
        weights = torch.ones_like(weights)
        grad = torch.linspace(-0.3, 0.7, channels).expand(1, queries, channels).contiguous()
    if kind == "cancelling":
        half = queries // 2
        weights = torch.cat([weights[:, :half], weights[:, :half], weights[:, :1]], 1)
        grad = torch.cat([grad[:, :half], -grad[:, :half], grad[:, :1] * 1e-6], 1)
        queries = weights.shape[1]
    where = [2.5 / 4, 1.5 / 4] if method == "bilinear" else [2 / 4, 1 / 4]
    locations = torch.tensor(where).expand(1, queries, 1, 1, points, 2).contiguous()
    # float32 products, as the kernel makes them (times a corner weight of exactly 1)
    contributions = (weights.reshape(queries, points, 1) * grad.reshape(queries, 1, channels))
    if method == "bilinear":
        return CLASSIC, (value, [(4, 4)], locations, weights), grad, contributions
    return RAGGED, (value, [(4, 4)], locations.flatten(3, 4), weights.flatten(3, 4), [points],
                    method), grad, contributions


def fixed_point_sum(contributions, grad, weights) -> torch.Tensor:
    """What the design says the element is, worked out exactly on the host: each float32
    contribution times ``2**(62 - e)`` rounded to nearest even (exact in float64: 24 bits times
    a power of two), summed as integers, converted to float32 once, times ``2**(e - 62)``."""
    exponent = deterministic.scale_exponent(grad, weights)
    scaled = torch.round(contributions.double() * 2.0 ** (deterministic.FIXED_BITS - exponent))
    total = scaled.long().sum((0, 1))
    return total.to(torch.float32) * 2.0 ** (exponent - deterministic.FIXED_BITS)


@pytest.mark.parametrize("kind", ["random", "cancelling", "largest"])
@pytest.mark.parametrize("method", ["bilinear", "discrete"])
def test_an_element_hit_by_many_samples_is_the_stated_fixed_point_sum(method, kind,
                                                                      deterministic_mode):
    """Bit for bit the design's sum (``fixed_point_sum``), within the stated error of the exact
    sum, as close as the atomic sum or closer, and no other element touched."""
    fn, args, grad, contributions = many_hits(method, kind)
    exact = contributions.double().sum((0, 1))
    grad_value = gradients(fn, args, grad)[0]
    assert same_bits(grad_value[0, 1 * 4 + 2, 0], fixed_point_sum(contributions, grad, args[3]))
    hit = grad_value[0, 1 * 4 + 2, 0].double()
    term = deterministic.fixed_point_error_bound(grad, args[3])
    error = (hit - exact).abs()
    assert (error <= term + 2.0**-24 * exact.abs()).all(), (error, term)
    others = torch.cat([grad_value[0, :6], grad_value[0, 7:]])
    assert same_bits(others, torch.zeros_like(others))
    if kind == "cancelling":  # the grid is fine enough for a float32 answer to a sum of 1e-7
        assert (error <= 2.0**-23 * exact.abs()).all(), (error, exact)
    with deterministic_algorithms(False):
        atomic = gradients(fn, args, grad)[0][0, 6, 0].double()
    # the exact integer sum rounds once: as close as the float32 atomic sum, or closer
    assert error.max() <= (atomic - exact).abs().max() + term


NON_FINITE = {"nan_output_gradient": ("grad", float("nan")),
              "inf_output_gradient": ("grad", float("inf")),
              "nan_weight": ("weights", float("nan")),
              "inf_weight": ("weights", float("-inf"))}


@pytest.mark.parametrize("where", NON_FINITE.values(), ids=NON_FINITE.keys())
@pytest.mark.parametrize("slot", ["classic", "ragged"])
def test_a_non_finite_bound_makes_the_whole_value_gradient_nan(slot, where):
    """The NaN rule (``deterministic.py``): NaN everywhere in the value gradient; the location
    and weight gradients are the atomic backward's, bit for bit."""
    fn, args = (CLASSIC, list(classic_args())) if slot == "classic" else \
        (RAGGED, list(ragged_args()))
    grad = _grad_for(args)
    tensor, bad = where
    if tensor == "grad":
        grad[0, 1, 3] = bad
    else:
        args[3] = args[3].clone()
        args[3].view(-1)[5] = bad
    with deterministic_algorithms():
        fixed = gradients(fn, args, grad)
    atomic = gradients(fn, args, grad)
    assert torch.isnan(fixed[0]).all()
    assert same_bits(fixed[1], atomic[1]) and same_bits(fixed[2], atomic[2])


def test_nan_in_value_leaves_the_value_gradient_as_it_was(deterministic_mode):
    """The value gradient does not depend on ``value``: NaN there changes none of its bits."""
    args = list(classic_args())
    grad = _grad_for(args)
    clean = gradients(CLASSIC, args, grad)[0]
    args[0] = args[0].clone()
    args[0][0, 3, 0, 2] = float("nan")
    assert same_bits(gradients(CLASSIC, args, grad)[0], clean)


# -- buffers, modes mixed, second backward -----------------------------------------------------

def gradients_in_forward(monkeypatch, yes: bool) -> None:
    monkeypatch.setattr(common, "GRADIENTS_IN_FORWARD_BELOW", 2**62 if yes else 0)


IN_FORWARD = pytest.mark.parametrize("in_forward", [True, False],
                                     ids=["buffers-from-forward", "buffers-from-backward"])
#: Two query blocks (BLOCK_Q is 32 at 8 channels), samples outside the levels.
EVERY_GRADIENT_CASE = Case("every_gradient_stored", "test", "small", batch=1,
                           levels=((3, 5), (2, 2)), heads=1, channels=8, points=2, queries=37,
                           locations="outside")


def unstored(monkeypatch, slot):
    if slot == "classic":
        value, shapes, locations, weights = make_inputs(EVERY_GRADIENT_CASE, seed=5)
        call = lambda v, loc, w: CLASSIC(v, shapes, loc, w)  # noqa: E731
    else:
        value, shapes, locations, weights, points, method = ragged_args(queries=37,
                                                                        locations="outside")
        call = lambda v, loc, w: RAGGED(v, shapes, loc, w, points, method)  # noqa: E731
    grad = _grad_for((value, None, locations))
    return unfilled_buffers.unstored_gradients(monkeypatch, call, (value, locations, weights),
                                               grad)


@IN_FORWARD
@pytest.mark.parametrize("slot", ["classic", "ragged"])
def test_every_gradient_element_is_stored(monkeypatch, slot, in_forward, deterministic_mode):
    """Buffers that start as NaN end as buffers that start as zeros: the conversion writes every
    value-gradient element, the kernels every location and weight gradient."""
    gradients_in_forward(monkeypatch, in_forward)
    assert unstored(monkeypatch, slot) == []


def test_the_stored_check_catches_a_conversion_one_block_short(monkeypatch, deterministic_mode):
    """Negative control: the int64 -> float32 pass launched one program short."""
    monkeypatch.setattr(deterministic, "CONVERT_BLOCK", 64)
    cdiv = deterministic.cdiv
    monkeypatch.setattr(deterministic, "cdiv",
                        lambda n, block: cdiv(n, block) - (block == 64))
    assert unstored(monkeypatch, "classic") == ["value"]


@pytest.mark.parametrize(("forward_mode", "backward_mode"), [(False, True), (True, False)],
                         ids=["atomic-forward-fixed-point-backward",
                              "fixed-point-forward-atomic-backward"])
@IN_FORWARD
def test_a_forward_in_one_mode_and_a_backward_in_the_other(monkeypatch, forward_mode,
                                                           backward_mode, in_forward):
    """The backward's mode decides, whatever buffers the forward allocated: its gradients are
    those of a forward and backward both in the backward's mode (bit for bit: in the
    interpreter the atomic adds run in one order too)."""
    gradients_in_forward(monkeypatch, in_forward)
    value, shapes, locations, weights = make_inputs(EVERY_GRADIENT_CASE, seed=5)
    grad = _grad_for((value, None, locations))

    def run(forward, backward):
        leaves = [t.detach().clone().requires_grad_() for t in (value, locations, weights)]
        with deterministic_algorithms(forward):
            out = CLASSIC(leaves[0], shapes, leaves[1], leaves[2])
        with deterministic_algorithms(backward):
            out.backward(grad)
        return [leaf.grad for leaf in leaves]

    mixed, pure = run(forward_mode, backward_mode), run(backward_mode, backward_mode)
    assert all(same_bits(a, b) for a, b in zip(mixed, pure, strict=True))


@IN_FORWARD
def test_a_graph_differentiated_twice_gives_equal_gradients_and_keeps_the_first(
        monkeypatch, in_forward, deterministic_mode):
    gradients_in_forward(monkeypatch, in_forward)
    value, shapes, locations, weights = make_inputs(EVERY_GRADIENT_CASE, seed=9)
    grad = _grad_for((value, None, locations))
    assert unfilled_buffers.second_backward_problems(
        lambda v, loc, w: CLASSIC(v, shapes, loc, w), (value, locations, weights), grad) == []


# -- the kernels' own numbers ------------------------------------------------------------------

def float_bits(x: float) -> int:
    return int(torch.tensor(x, dtype=torch.float32).view(torch.int32))


def test_the_header_holds_the_maxima_bit_patterns():
    grad = torch.tensor([[0.5, -3.0, 2.0]])
    weights = torch.tensor([[[[0.25, -0.75]]]])  # (1, 1, 1, 2): N = 1 query x 2 points
    fixed = deterministic.accumulator(torch.zeros(4))
    deterministic.write_bound({}, fixed, grad, weights)
    assert fixed[:2].tolist() == [float_bits(3.0 * 2), float_bits(0.75)]
    grad[0, 1] = float("nan")
    fixed.zero_()
    deterministic.write_bound({}, fixed, grad, weights)
    assert fixed[0] > float_bits(float("inf"))  # NaN's pattern is above infinity's


@pytest.mark.parametrize(("bound", "exponent"), [(6.0 * 0.75, 3), (4.0, 2), (0.0, -64),
                                                 (2.0**-80, -64), (3e38, 128)])
def test_the_conversion_scales_by_the_power_of_two_the_bound_gives(bound, exponent):
    """``out = fixed * 2**(e - 62)`` with ``e = ceil(log2 B)``, clamped at -64; exact."""
    fixed = deterministic.accumulator(torch.zeros(3))
    fixed[0], fixed[1] = float_bits(bound), float_bits(1.0)
    fixed[deterministic.HEADER:] = torch.tensor([1, -3, 2**40])
    out = torch.full((3,), float("nan"))
    deterministic.to_float({}, fixed, out)
    unit = 2.0 ** (exponent - 62)
    assert out.tolist() == [unit, -3 * unit, 2**40 * unit]
    assert math.isfinite(unit) and unit > 0


@triton.jit
def _fixed_point_of(x_ptr, out_ptr, scale, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, _to_fixed_point(tl.load(x_ptr + offsets), scale))


def fixed_point_of(x: torch.Tensor, scale: float) -> torch.Tensor:
    block = 1 << (x.numel() - 1).bit_length()
    padded = torch.cat([x, x.new_zeros(block - x.numel())])
    out = torch.empty(block, dtype=torch.int64)
    _fixed_point_of[(1,)](padded, out, scale, BLOCK=block)
    return out[:x.numel()]


def test_contributions_round_to_nearest_ties_to_even():
    """``round(c * s)``: ties to even, halves and near-halves both signs, at 2**23 (where the
    trick's range ends) and beyond (already integers), up to 2**62."""
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.50000006, 1e-30, -7.25,
                      8388607.5, -8388606.5, 8388608.0, 2.0**40 + 2.0**17, -(2.0**62), 3.0,
                      0.0, -0.0], dtype=torch.float32)
    assert fixed_point_of(x, 1.0).tolist() == torch.round(x.double()).long().tolist()
    assert fixed_point_of(x[:8], 4.0).tolist() == torch.round(x[:8].double() * 4).long().tolist()


def test_a_zero_scale_gives_zeros_even_for_non_finite_contributions():
    x = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0], dtype=torch.float32)
    assert fixed_point_of(x, 0.0).tolist() == [0, 0, 0, 0]

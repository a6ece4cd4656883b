"""A bound slot (``libreyolo.kernels.bound``) selects once per description and otherwise behaves
as ``ops.<slot>``: a changed input, setting or registration selects again, bad input gets the
slot's error, a failing implementation degrades with one warning, a captured graph goes through
``dispatch``.

Run on CPU: a stand-in implementation of ``fake_quant_fp8`` (the reference's numbers, counted)
sits on top of the reference; the deformable-attention slot has none here, so its helper
answers None, bound or not.
"""

from __future__ import annotations

import gc
import warnings
import weakref

import pytest
import torch

from libreyolo.kernels import (
    Capabilities,
    KernelDisabledWarning,
    Prepared,
    ops,
    register,
    registry,
    settings,
    unregister,
)
from libreyolo.kernels import bound as bound_module
from libreyolo.kernels.attention.ms_deform_attn import maybe_ms_deform_attn
from libreyolo.kernels.bound import BoundSlot
from libreyolo.quant.fake_quant import fake_quant_fp8

SLOT = "fake_quant_fp8"
NAME = "bound_test"


class Plan(Prepared):
    __slots__ = ()


class HoldingPlan(Prepared):
    """A plan that holds the call's input, as the fake-quant plans do."""

    __slots__ = ("input", "__weakref__")

    def __init__(self, x):
        self.input = x


class StandIn:
    """Registered as the newest ``fake_quant_fp8``: the reference's numbers, with counts of its
    calls and its ``accepts``. ``plan``: ``"kept"`` (one plan for every call), ``"fresh"`` (a
    plan per call), ``"holding"`` (a plan per call that holds the input: each one's weak
    reference in ``holding_plans``) or ``None`` (takes the input without one); ``broken``:
    ``"raises"`` or ``"shape"`` (a wrong-shaped result)."""

    def __init__(self):
        self.calls, self.asked = 0, 0
        self.plan, self.broken, self.decline = "kept", None, None
        self.kept_plan = Plan()
        self.holding_plans = []

    def __call__(self, x, scale=None, *, fmt="e4m3", axis=None, prepared=None):
        self.calls += 1
        if self.broken == "raises":
            raise RuntimeError("stand-in failure")
        out = fake_quant_fp8(x, scale, fmt=fmt, axis=axis)
        return out[:1] if self.broken == "shape" else out

    def accepts(self, x, scale=None, *, fmt="e4m3", axis=None):
        self.asked += 1
        if self.decline is not None:
            return self.decline
        if self.plan == "holding":
            plan = HoldingPlan(x)
            self.holding_plans.append(weakref.ref(plan))
            return plan
        return {"kept": self.kept_plan, "fresh": Plan(), None: None}[self.plan]


@pytest.fixture
def stand_in(monkeypatch):
    for variable in (settings.KERNELS, settings.LEGACY_KERNELS, settings.HUB_KERNELS):
        monkeypatch.delenv(variable, raising=False)
    impl = StandIn()
    register(SLOT, impl, name=NAME, accepts=impl.accepts)
    yield impl
    unregister(SLOT, NAME)


@pytest.fixture
def selections(monkeypatch):
    """Counts the full selections (``dispatch``) and choices (``choose``) a bound slot makes."""
    counts = {"dispatch": 0, "choose": 0}
    for name in counts:
        real = getattr(registry, name)

        def counted(*args, _name=name, _real=real, **kwargs):
            counts[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(registry, name, counted)
    return counts


def x_like(shape=(8, 16), dtype=torch.float32, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def test_the_same_description_again_runs_the_bound_implementation_without_selecting(
        stand_in, selections):
    bound = BoundSlot(SLOT)
    bound(x_like(seed=0))
    assert selections == {"dispatch": 1, "choose": 1}
    for seed in (1, 2, 3):
        bound(x_like(seed=seed))
    assert selections == {"dispatch": 1, "choose": 1}
    assert stand_in.calls == 4


def _changed(kind, monkeypatch):
    """A call described differently from ``x_like()``'s, or after a changed setting."""
    x = x_like()
    if kind == "dtype":
        return (x.half(),)
    if kind == "shape":
        return (x_like((4, 16)),)
    if kind == "strides":
        return (x_like((16, 8)).t(),)  # the shape of x, transposed strides
    if kind == "requires_grad":
        return (x.requires_grad_(),)
    if kind == "keyword":
        return (x,), {"fmt": "e5m2"}
    monkeypatch.setenv(kind, "anything")  # a setting
    return (x,)


SETTINGS = tuple(settings.in_effect())


@pytest.mark.parametrize("kind", ["dtype", "shape", "strides", "requires_grad", "keyword",
                                  *SETTINGS])
def test_a_changed_input_or_setting_selects_again(kind, stand_in, selections, monkeypatch):
    bound = BoundSlot(SLOT)
    bound(x_like(), **({"fmt": "e4m3"} if kind == "keyword" else {}))
    changed = _changed(kind, monkeypatch)
    args, kwargs = changed if isinstance(changed[-1], dict) else (changed, {})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a setting's value may warn ("anything" names nothing)
        bound(*args, **kwargs)
    assert selections == {"dispatch": 2, "choose": 2}
    assert stand_in.calls <= 2  # the changed call ran under dispatch, not bound first


def test_a_setting_that_selects_the_reference_takes_effect_on_the_next_call(
        stand_in, monkeypatch):
    bound = BoundSlot(SLOT)
    bound(x_like())
    monkeypatch.setenv(settings.KERNELS, "reference")
    bound(x_like())
    assert stand_in.calls == 1


def test_a_registration_selects_again(stand_in):
    bound = BoundSlot(SLOT)
    bound(x_like())
    newer = StandIn()
    register(SLOT, newer, name="bound_test_newer", accepts=newer.accepts)
    try:
        bound(x_like())
    finally:
        unregister(SLOT, "bound_test_newer")
    assert (stand_in.calls, newer.calls) == (1, 1)
    bound(x_like())  # unregistered: the first one again
    assert stand_in.calls == 2


@pytest.mark.parametrize(("plan", "asked"), [("kept", 0), ("fresh", 3), (None, 3)])
def test_a_plan_is_kept_only_when_accepts_gives_it_for_other_tensors(plan, asked, stand_in):
    """A plan made per call may hold the call's tensors: it is asked for on every call."""
    stand_in.plan = plan
    bound = BoundSlot(SLOT)
    bound(x_like())
    before = stand_in.asked
    for seed in (1, 2, 3):
        bound(x_like(seed=seed))
    assert stand_in.asked - before == asked


def test_a_binding_keeps_no_plan_that_may_hold_the_calls_tensors(stand_in):
    """A plan made per call may hold its input, as a fake-quant plan does: the binding keeps
    neither it nor, through it, the call's tensor and autograd graph alive."""
    stand_in.plan = "holding"
    bound = BoundSlot(SLOT)
    x = x_like().requires_grad_()
    bound(x * 2)
    assert stand_in.holding_plans
    gc.collect()
    assert all(plan() is None for plan in stand_in.holding_plans)


def test_a_tensor_that_is_not_the_slots_data_keeps_accepts_asked(stand_in):
    """A scale's values may be read by the checks: its calls ask accepts every time."""
    bound = BoundSlot(SLOT)
    scale = torch.tensor(0.5)
    bound(x_like(), scale)
    before = stand_in.asked
    bound(x_like(seed=1), scale)
    assert stand_in.asked - before == 1


def test_a_decline_after_binding_goes_through_dispatch(stand_in, selections):
    stand_in.plan = None
    bound = BoundSlot(SLOT)
    bound(x_like())
    stand_in.decline = "not now"
    out = bound(x_like(seed=1))
    assert stand_in.calls == 1 and selections["dispatch"] == 2
    assert torch.equal(out, fake_quant_fp8(x_like(seed=1)))


@pytest.mark.parametrize("call", [
    lambda f: f(x_like(), torch.tensor(float("nan"))),  # same description as a good call
    lambda f: f(x_like(), torch.tensor(-1.0)),
    lambda f: f(x_like(), fmt="e9m9"),
    lambda f: f(x_like(), axis=5),
], ids=["nan-scale", "negative-scale", "unknown-fmt", "axis-out-of-range"])
@pytest.mark.parametrize("bound_to", ["reference", "stand-in"])
def test_bad_input_raises_the_slots_own_error(call, bound_to, request):
    if bound_to == "stand-in":
        request.getfixturevalue("stand_in")  # its accepts checks nothing: dispatch's judge does
    bound = BoundSlot(SLOT)
    bound(x_like(), torch.tensor(0.5))  # bound first: the bad call has the same description
    bound(x_like(), fmt="e5m2")
    with pytest.raises((ValueError, TypeError)) as expected:
        call(ops.fake_quant_fp8)
    with pytest.raises(type(expected.value)) as got:
        call(bound)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("broken", ["raises", "shape"])
def test_a_failing_implementation_degrades_with_one_warning_and_loses_its_binding(
        broken, stand_in, selections):
    bound = BoundSlot(SLOT)
    bound(x_like())
    stand_in.broken = broken
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = bound(x_like(seed=1))
        again = bound(x_like(seed=2))
    disabled = [w for w in caught if w.category is KernelDisabledWarning]
    assert len(disabled) == 1 and NAME in str(disabled[0].message)
    assert torch.equal(out, fake_quant_fp8(x_like(seed=1)))
    assert torch.equal(again, fake_quant_fp8(x_like(seed=2)))
    assert stand_in.calls == 3  # bound, then once more under dispatch's judge; never again
    assert selections["dispatch"] == 2  # the bind, the failure; then the reference, bound


def test_an_implementation_that_writes_its_inputs_is_never_bound(stand_in, selections):
    writer = StandIn()
    writer.plan = None
    register(SLOT, writer, name="bound_test_writer", accepts=writer.accepts,
             writes_inputs=True)
    try:
        bound = BoundSlot(SLOT)
        for seed in range(3):
            bound(x_like(seed=seed))
    finally:
        unregister(SLOT, "bound_test_writer")
    assert writer.calls == 3 and selections["dispatch"] == 3


def test_while_a_graph_is_captured_every_call_goes_through_dispatch(stand_in, selections,
                                                                   monkeypatch):
    bound = BoundSlot(SLOT)
    bound(x_like())
    monkeypatch.setattr(bound_module, "graph_capture", lambda: "compile")
    bound(x_like(seed=1))  # described as the bound call
    assert selections["dispatch"] == 2


def test_an_export_gets_the_references_math(stand_in, selections):
    bound = BoundSlot(SLOT)
    bound(x_like())
    traced = torch.jit.trace(lambda x: bound(x), (x_like(seed=1),), check_trace=False)
    assert selections["dispatch"] == 2  # the traced call
    assert stand_in.calls == 1
    assert torch.equal(traced(x_like(seed=2)), fake_quant_fp8(x_like(seed=2)))


CALLS = {
    "fake_quant_fp8-dynamic": (SLOT, lambda seed: (x_like(seed=seed),), {}),
    "fake_quant_fp8-static": (SLOT, lambda seed: (x_like(seed=seed), torch.tensor(0.25)), {}),
    "fake_quant_fp8-e5m2-axis": (SLOT, lambda seed: (x_like(seed=seed), torch.rand(8) + 0.1),
                                 {"fmt": "e5m2", "axis": 0}),
    "fake_quant_int_grouped": ("fake_quant_int_grouped", lambda seed: (x_like(seed=seed), 4, 8),
                               {}),
    "fake_quant_nvfp4_dynamic": ("fake_quant_nvfp4_dynamic", lambda seed: (x_like(seed=seed),),
                                 {}),
    "fake_quant_mxfp8_weight": ("fake_quant_mxfp8_weight",
                                lambda seed: (x_like((4, 64), seed=seed),), {}),
}


@pytest.mark.parametrize("case", CALLS.values(), ids=CALLS.keys())
def test_the_bits_equal_ops(case):
    slot, make, kwargs = case
    bound = BoundSlot(slot)
    for seed in range(3):  # selected, then bound
        args = make(seed)
        assert torch.equal(bound(*args, **kwargs), getattr(ops, slot)(*args, **kwargs))


def _msda_inputs(seed):
    from conformance.inputs.ms_deform_attn_cases import load_cases, make_inputs

    return make_inputs(load_cases(sizes=("small",))[0], seed=seed)


def test_the_deformable_attention_helper_answers_none_where_nothing_takes_the_input():
    assert ops.ms_deform_attn(*_msda_inputs(0)) is None
    assert [maybe_ms_deform_attn(*_msda_inputs(seed)) for seed in (0, 1)] == [None, None]


@pytest.fixture
def msda_stand_in(monkeypatch):
    """A deformable-attention implementation taking every input with one plan; its runs (the
    plan each got) and how often its accepts was asked."""
    for variable in (settings.KERNELS, settings.LEGACY_KERNELS):
        monkeypatch.delenv(variable, raising=False)
    plan, record = Plan(), {"ran": [], "asked": 0}

    def fake(value, spatial_shapes, sampling_locations, attention_weights, *, prepared=None):
        record["ran"].append(prepared)
        batch, _, heads, channels = value.shape
        return value.new_zeros(batch, sampling_locations.shape[1], heads * channels)

    def accepts(*args):
        record["asked"] += 1
        return plan

    register("ms_deform_attn", fake, name=NAME, accepts=accepts)
    yield plan, record
    unregister("ms_deform_attn", NAME)


def test_the_deformable_attention_helper_selects_once_per_description(msda_stand_in,
                                                                       selections):
    plan, record = msda_stand_in
    outs = [maybe_ms_deform_attn(*_msda_inputs(seed)) for seed in range(3)]
    assert all(out is not None for out in outs) and record["ran"] == [plan] * 3
    assert selections["choose"] == 1


def test_msdeformattn_with_level_pairs_keeps_its_plan(msda_stand_in, selections):
    """A decoder layer's steady state: no selection, no accepts, the kept plan."""
    from libreyolo.nn import MSDeformAttn

    plan, record = msda_stand_in
    module = MSDeformAttn(d_model=32, n_levels=2, n_heads=4, n_points=3)
    levels = [(6, 8), (3, 4)]
    module(torch.randn(2, 5, 32), torch.rand(2, 5, 2, 2), torch.randn(2, 60, 32), levels)
    asked = record["asked"]
    for _ in range(3):
        module(torch.randn(2, 5, 32), torch.rand(2, 5, 2, 2), torch.randn(2, 60, 32), levels)
    assert record["asked"] == asked and record["ran"] == [plan] * 4
    assert selections == {"dispatch": 1, "choose": 1}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_declaration_without_cuda_graphs_is_asked_again_while_one_is_captured(
        stand_in, monkeypatch):
    """The guard does not read the capture state; a declaration that tells eager CUDA from a
    CUDA graph capture apart is asked on every call (a capture in progress is pretended: what
    the capabilities read of it is ``torch.cuda.is_current_stream_capturing``)."""
    eager_only = StandIn()
    register(SLOT, eager_only, name="bound_test_eager_only", accepts=eager_only.accepts,
             capabilities=Capabilities(devices={"cuda"}, modes={"cuda"}))
    try:
        bound = BoundSlot(SLOT)
        bound(x_like().cuda())
        with monkeypatch.context() as pretend:
            pretend.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
            out = bound(x_like(seed=1).cuda())
        assert eager_only.calls == 1 and stand_in.calls == 1  # the next one took it
        bound(x_like(seed=2).cuda())  # eager again: still bound
        assert eager_only.calls == 2
    finally:
        unregister(SLOT, "bound_test_eager_only")
    assert torch.equal(out, fake_quant_fp8(x_like(seed=1).cuda()))


def test_an_unknown_slot_is_refused_naming_it():
    with pytest.raises(ValueError, match="unknown slot 'fake_quant_fp9'"):
        BoundSlot("fake_quant_fp9")

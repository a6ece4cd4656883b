"""The QAT and finalized layers call their slots through call sites of their own
(``libreyolo.nn.slot_sites``): after a layer's first step its steps select nothing, a changed
input or setting selects again, the bits are those of the same layer calling ``ops``, bad input
gets the slot's error, a failing implementation degrades with one warning, a step keeps no input
alive, and a copied, pickled, exported or compiled layer behaves as a fresh one.

CPU: the stand-in ``fake_quant_fp8`` of ``tests/kernels/test_bound_calls.py`` (the reference's
numbers, its calls and ``accepts`` counted) sits on top of the reference where a test counts
what ran; ``selections`` counts the full selections (``registry.dispatch``).
"""

from __future__ import annotations

import copy
import gc
import io
import pickle
import warnings
import weakref

import pytest
import torch

from libreyolo.kernels import KernelDisabledWarning, ops, settings
from libreyolo.kernels import bound as bound_module
from libreyolo.nn.quantized import convert, prepare
from libreyolo.nn.slot_sites import SlotSite, calling_ops_per_call
from tests.kernels import test_bound_calls as bound_calls

from .finalized_cases import FORMATS, LAYERS, finalize
from .quantized_cases import RECIPES_32, assert_same_bits, copy_model, inputs, prepared
from .slot_calls import slot_calls
from .test_quantized_export import _aten_only

stand_in, selections = bound_calls.stand_in, bound_calls.selections  # the fixtures

STAGES = ("quantized", "finalized")


def _model(recipe: str, stage: str):
    """The ``Mixed`` model of every layer geometry, prepared (and calibrated) with ``recipe``;
    converted when ``stage`` is 'finalized'."""
    model = prepared(recipe)
    if stage == "finalized":
        convert(model)
    return model


def _step(model, x: torch.Tensor) -> torch.Tensor:
    """A training step's forward and backward for a quantized model, a forward for a finalized
    one (inference only)."""
    if any(p.requires_grad for p in model.parameters()):
        out = model(x)
        out.square().mean().backward()
        return out.detach()
    with torch.no_grad():
        return model(x)


def _sites(model):
    """Every call site of the model's layers."""
    return [site for layer in model.modules() for name, site in vars(layer).items()
            if name.endswith("_slots")]


def _unbound(model):
    """A copy of ``model`` whose layers call ``ops`` (the whole selection on every call)."""
    return calling_ops_per_call(copy_model(model))


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("recipe", RECIPES_32)
def test_after_the_first_step_a_model_selects_nothing(recipe, stage, selections):
    model = _model(recipe, stage)
    xs = inputs(3, seed=3)
    with slot_calls() as first:
        _step(model, xs[0])
    assert selections["dispatch"] == len(first) > 0  # every slot call selected once
    with slot_calls() as later:
        for x in xs[1:]:
            _step(model, x)
    assert len(later) == 2 * len(first) and selections["dispatch"] == len(first)


class Heads(torch.nn.Module):
    """Linear heads of the given widths on one input: as many weight shapes."""

    def __init__(self, widths):
        super().__init__()
        self.heads = torch.nn.ModuleList(torch.nn.Linear(32, n) for n in widths)

    def forward(self, x):
        return torch.cat([head(x) for head in self.heads], -1)


def test_a_model_of_more_weight_shapes_than_a_bound_slot_keeps_selects_once(selections):
    """Sites per layer, not per slot: a model of more weight shapes than ``MAX_BINDINGS``
    selects nothing after its first step (one site shared by every layer would start over)."""
    heads = Heads(range(1, bound_module.MAX_BINDINGS + 3))
    prepare(heads, RECIPES_32["w4a16"])  # weight only: one slot call per layer
    x = torch.randn(2, 32)
    _step(heads, x)
    selected = selections["dispatch"]
    _step(heads, x)
    assert selected == len(heads.heads) and selections["dispatch"] == selected


def test_a_site_names_an_unknown_slot_as_an_attribute_error():
    with pytest.raises(AttributeError, match="unknown slot 'fake_quant_fp9'"):
        SlotSite().fake_quant_fp9  # noqa: B018 - the lookup is the call under test


def test_the_bound_implementation_runs_the_later_steps(stand_in, selections):
    """fp8_dynamic's weight and input sites both call ``fake_quant_fp8``: the stand-in."""
    model = _model("fp8_dynamic", "quantized")
    with slot_calls() as calls:
        for x in inputs(3, seed=3):
            _step(model, x)
    assert stand_in.calls == len(calls)
    assert selections["dispatch"] == len(calls) // 3


@pytest.mark.parametrize("stage", STAGES)
def test_a_changed_input_shape_selects_again_at_the_input_sites_only(stage, selections):
    """nvfp4: the weight's slot (fake-quant or unpack) and the input's differ; a batch of
    another size changes every input's description, no weight's."""
    model = _model("nvfp4", stage)
    with slot_calls() as first:
        _step(model, inputs(1, seed=3)[0])
    with slot_calls() as calls:
        _step(model, inputs(1, seed=4, shape=(3, 32, 6, 5))[0])
    quantized_inputs = sum(1 for slot, _ in calls if slot == "fake_quant_nvfp4_dynamic")
    assert 0 < quantized_inputs < len(calls)
    assert selections["dispatch"] == len(first) + quantized_inputs


def test_a_changed_setting_selects_again(stand_in, monkeypatch):
    model = _model("fp8_dynamic", "quantized")
    _step(model, inputs(1, seed=3)[0])
    ran = stand_in.calls
    monkeypatch.setenv(settings.KERNELS, "reference")
    _step(model, inputs(1, seed=4)[0])
    assert stand_in.calls == ran


def _bits_through_sites_and_ops(model, steps: int = 2):
    """(outputs, gradients) of ``steps`` steps of ``model`` and of its copy calling ``ops``."""
    unbound = _unbound(model)
    for x in inputs(steps, seed=3):  # the first step selects, the next runs the binding
        assert_same_bits(_step(model, x), _step(unbound, x))
    for p, q in zip(model.parameters(), unbound.parameters(), strict=True):
        if p.grad is not None or q.grad is not None:
            assert_same_bits(p.grad, q.grad)


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("recipe", RECIPES_32)
def test_the_bits_are_the_unbound_layers_for_every_recipe(recipe, stage):
    _bits_through_sites_and_ops(_model(recipe, stage))


@pytest.mark.parametrize("layer", ["linear", "conv3x3-stride2-nobias"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_the_bits_are_the_unbound_layers_for_every_finalized_format(fmt, layer):
    _, finalized = finalize(FORMATS[fmt], LAYERS[layer])
    unbound = _unbound(finalized)
    with torch.no_grad():
        for seed in (1, 2):
            x = LAYERS[layer].x(seed=seed)
            assert_same_bits(finalized(x), unbound(x))


def test_a_bad_input_scale_gets_the_slots_error_once_bound():
    """A scale written into a bound layer (the description unchanged) fails as ``ops`` fails."""
    model = _model("fp8_static", "quantized").eval()
    x = inputs(1, seed=3)[0]
    _step(model, x)
    with torch.no_grad():
        model.conv.input_scale.fill_(-1.0)
    with pytest.raises(ValueError) as expected:
        ops.fake_quant_fp8(x, model.conv.input_scale)
    with pytest.raises(ValueError) as got:
        model.conv(x)
    assert str(got.value) == str(expected.value)


def test_a_failing_implementation_degrades_with_one_warning(stand_in):
    model = _model("fp8_dynamic", "quantized")
    _step(model, inputs(1, seed=3)[0])
    stand_in.broken = "raises"
    x = inputs(1, seed=4)[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = _step(model, x)
        _step(model, x)
    disabled = [w for w in caught if w.category is KernelDisabledWarning]
    assert len(disabled) == 1 and bound_calls.NAME in str(disabled[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_same_bits(out, _step(_unbound(model), x))


def test_a_step_keeps_no_input_alive(stand_in):
    """The stand-in's plans hold their input, as the fake-quant plans do: after a training
    step neither the plans nor the input (and its autograd graph) outlive it."""
    stand_in.plan = "holding"
    model = _model("fp8_dynamic", "quantized")
    for seed in (3, 4):  # selected, then bound
        x = inputs(1, seed=seed)[0].requires_grad_()
        _step(model, x)
        dead = weakref.ref(x)
        del x
        gc.collect()
        assert dead() is None
    assert stand_in.holding_plans and all(plan() is None for plan in stand_in.holding_plans)


def _torch_saved(model):
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


COPIES = {"deepcopy": copy.deepcopy, "torch.save": _torch_saved,
          "pickle": lambda model: pickle.loads(pickle.dumps(model))}


@pytest.mark.parametrize("how", COPIES)
@pytest.mark.parametrize("stage", STAGES)
def test_a_copied_or_pickled_model_selects_afresh(stage, how, selections):
    """int8 buffers (plain ``pickle`` cannot load float8 ones); the copy's sites are empty, its
    first step selects every call again, with the original's bits."""
    model = _model("w8a8_int8", stage)
    x = inputs(1, seed=3)[0]
    _step(model, x)
    selected = selections["dispatch"]
    copied = COPIES[how](model)
    assert any(vars(site) for site in _sites(model))
    assert _sites(copied) and not any(vars(site) for site in _sites(copied))
    assert_same_bits(_step(copied, x), _step(model, x))
    assert selections["dispatch"] == 2 * selected


@pytest.mark.parametrize("stage", STAGES)
def test_an_export_of_a_bound_model_holds_aten_ops_only(stage, stand_in):
    """Bound eagerly to the stand-in, then exported: the graph is the reference's math."""
    model = _model("fp8_dynamic", stage).eval()
    x = inputs(2, seed=3)
    model(x[0])  # grad mode as the export's: its calls have the bound descriptions
    ran = stand_in.calls
    program = torch.export.export(model, (x[1],))
    ok, targets = _aten_only(program)
    assert ok, targets
    assert stand_in.calls == ran
    with torch.no_grad():
        assert_same_bits(program.module()(x[1]), model(x[1]))


@pytest.mark.parametrize("eager_first", [True, False], ids=["bound-first", "compiled-first"])
@pytest.mark.parametrize("stage", STAGES)
def test_a_layer_compiles_whole_with_the_eager_bits(stage, eager_first):
    """``fullgraph``: the sites trace (into ``dispatch``, the slots' operators) without a
    graph break, bound by an eager call first or made while Dynamo traces; ``aot_eager`` keeps
    the check off a C++ compiler. One layer: compiled, the whole model's head Linear differs
    from its eager bits whether it calls ``ops`` or its sites."""
    layer = _model("nvfp4", stage).conv
    x = inputs(2, seed=3)
    with torch.no_grad():
        if eager_first:
            layer(x[0])
        assert all(vars(site) for site in _sites(layer)) == eager_first
        torch._dynamo.reset()
        compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
        assert_same_bits(compiled(x[1]), layer(x[1]))


def test_calling_ops_per_call_replaces_every_call_site_of_every_layer():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Conv2d(3, 4, 1))
    prepare(model, "fp8_dynamic")
    sites = {name for layer in model for name in vars(layer) if name.endswith("_slots")}
    assert sites  # the layers' weight and input sites
    calling_ops_per_call(model)
    assert all(getattr(layer, name) is ops for layer in model for name in sites)

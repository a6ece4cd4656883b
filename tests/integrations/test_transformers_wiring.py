"""``wire_deformable_attention``: one call routes a transformers detector's deformable-attention
sites to the slots, and ``unwire_deformable_attention`` takes them back.

On CPU no in-tree implementation takes a CPU input, so the slots get a stand-in: our portable
cores registered as an implementation (``portable_cores`` below). The same checks run the Triton
kernels under the interpreter (``interpreted_wiring_checks.py``) and on the GPU.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

pytest.importorskip("transformers", reason="the transformers extra is not installed")

import libreyolo.integrations.transformers as wiring  # noqa: E402
from libreyolo.integrations import (  # noqa: E402
    unwire_deformable_attention,
    wire_deformable_attention,
)
from libreyolo.kernels import register, settings, unregister  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn import (  # noqa: E402
    ms_deform_attn_portable,
    ms_deform_attn_ragged_portable,
)

from .detectors import (  # noqa: E402
    FAMILIES,
    Recorder,
    Run,
    build,
    call_errors,
    check_family,
    largest_difference,
    under_stock_selection,
)

STAND_IN = "portable_for_tests"


@pytest.fixture
def portable_cores(monkeypatch):
    """Our portable cores as the newest implementation of both slots, so a CPU call is taken."""
    for variable in (settings.KERNELS, settings.LEGACY_KERNELS):
        monkeypatch.delenv(variable, raising=False)
    register("ms_deform_attn", ms_deform_attn_portable, name=STAND_IN)
    register("ms_deform_attn_ragged", ms_deform_attn_ragged_portable, name=STAND_IN)
    yield
    unregister("ms_deform_attn", STAND_IN)
    unregister("ms_deform_attn_ragged", STAND_IN)


@pytest.mark.parametrize("family", FAMILIES.values(), ids=lambda f: f.name)
def test_a_wired_detector_asks_its_slot_at_every_site_within_the_bound(
        family, portable_cores, monkeypatch):
    check_family(family, monkeypatch)


@pytest.mark.parametrize("family", [FAMILIES["rt_detr"], FAMILIES["d_fine"]],
                         ids=lambda f: f.name)
def test_a_wired_train_step_gives_the_stock_gradients(family, portable_cores):
    stock, arguments = build(family)
    wired, _ = build(family)
    wire_deformable_attention(wired)
    for model in (stock, wired):
        model.train()
        outputs = model(**arguments)
        (outputs.logits.square().mean() + outputs.pred_boxes.sum()).backward()
    for (name, theirs), (_, ours) in zip(stock.named_parameters(), wired.named_parameters(),
                                         strict=True):
        if theirs.grad is None:
            assert ours.grad is None, name
            continue
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-3, atol=1e-5,
                                   msg=lambda m, n=name: f"{family.name} {n}: {m}")


def test_unwiring_restores_the_stock_model_exactly(portable_cores):
    family = FAMILIES["rt_detr_v2"]
    model, arguments = build(family)
    before = {name: module.__dict__.copy() for name, module in model.named_modules()}
    report = wire_deformable_attention(model)
    again = wire_deformable_attention(model)  # idempotent: the same sites, nothing new
    assert again.wired == report.wired
    assert unwire_deformable_attention(model) == family.sites
    assert unwire_deformable_attention(model) == 0
    after = {name: module.__dict__.copy() for name, module in model.named_modules()}
    assert after.keys() == before.keys()
    for name in before:
        assert after[name].keys() == before[name].keys(), name


def test_wiring_changes_no_other_model_of_the_same_class(portable_cores, monkeypatch):
    family = FAMILIES["rt_detr_v2"]
    wired, arguments = build(family)
    stock, _ = build(family)
    wire_deformable_attention(wired)
    recorder = Recorder(monkeypatch)
    with torch.no_grad():
        stock(**arguments)
    assert recorder.calls == []


def test_a_declined_call_runs_transformers_own_code(monkeypatch):
    """No implementation takes the input (none registered for CPU): the stock core answers, so
    the wired model's numbers are the stock model's, bit for bit."""
    for variable in (settings.KERNELS, settings.LEGACY_KERNELS):
        monkeypatch.delenv(variable, raising=False)
    for name in ("rt_detr", "d_fine"):
        stock, arguments = build(FAMILIES[name])
        wired, _ = build(FAMILIES[name])
        wire_deformable_attention(wired)
        recorder = Recorder(monkeypatch)
        with torch.no_grad():
            expected, got = stock(**arguments), wired(**arguments)
        assert recorder.declined == len(recorder.calls) == FAMILIES[name].sites
        assert torch.equal(got.logits, expected.logits)


def test_the_report_names_each_site_and_the_slot_it_asks():
    model, _ = build(FAMILIES["d_fine"])
    report = wire_deformable_attention(model)
    assert [site.module for site in report.wired] == [
        f"model.decoder.layers.{i}.encoder_attn" for i in range(2)]
    assert {site.core for site in report.wired} == {wiring.RAGGED_ATTRIBUTE}
    assert str(report).startswith("wired 2 deformable-attention site(s) "
                                  "(ms_deform_attn_ragged: 2), left 0")


def test_a_site_it_cannot_wire_is_left_with_the_reason():
    model, _ = build(FAMILIES["d_fine"])
    layer = model.model.decoder.layers[0].encoder_attn
    layer.ms_deformable_attn_core = lambda *args: None  # someone else's core
    report = wire_deformable_attention(model)
    assert len(report.wired) == 1
    assert report.left == (("model.decoder.layers.0.encoder_attn",
                            "ms_deformable_attn_core is "
                            "test_a_site_it_cannot_wire_is_left_with_the_reason.<locals>.<lambda>,"
                            " not transformers' multi_scale_deformable_attention_v2"),)


def test_a_model_of_no_deformable_family_wires_nothing():
    assert wire_deformable_attention(torch.nn.Sequential(torch.nn.Linear(2, 2))).wired == ()


@pytest.mark.parametrize("call", [wire_deformable_attention, unwire_deformable_attention])
def test_a_model_that_is_not_a_module_is_refused_by_name(call):
    with pytest.raises(TypeError, match=r"^model: expected a torch.nn.Module \(a transformers "
                                        r"model\), got dict$"):
        call({})


def test_importing_the_integration_imports_no_transformers():
    code = ("import sys, libreyolo.integrations; "
            "sys.exit('transformers' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# Negative controls: wirings broken on purpose, which the checks above must reject ----------------

def _hand_over_altered(monkeypatch, alter):
    """Both wired routes hand their slot ``alter(locations, weights)`` in place of the call's."""
    def through(ask):
        def altered(value, shapes, locations, weights, *rest):
            return ask(value, shapes, *alter(locations, weights), *rest)
        return altered

    for route in ("_ask_classic", "_ask_ragged"):
        monkeypatch.setattr(wiring, route, through(getattr(wiring, route)))


def test_the_bound_rejects_a_wiring_that_swaps_the_locations_axes(portable_cores, monkeypatch):
    for name in ("rt_detr", "d_fine"):
        family = FAMILIES[name]
        _hand_over_altered(monkeypatch, lambda locations, weights: (locations.flip(-1), weights))
        with pytest.raises(AssertionError, match="over the bound"):
            check_family(family, monkeypatch)
        monkeypatch.undo()


@pytest.mark.parametrize("family", FAMILIES.values(), ids=lambda f: f.name)
def test_the_bound_rejects_a_wiring_that_pairs_weights_with_other_points(
        family, portable_cores, monkeypatch):
    """At the first call, by its output: with a fresh model's own initialisation (uniform
    weights) only the weights' gradient would tell, so ``build`` redraws the projections."""
    _hand_over_altered(monkeypatch, lambda locations, weights: (locations, weights.flip(-1)))
    with pytest.raises(AssertionError, match="call 0: output error .* over the bound"):
        check_family(family, monkeypatch)


#: A box moved: by more than 8 float32 ulps of 1, above the rounding that a fresh model's box
#: heads of (next to) nothing leave (at most one ulp here)
MOVED = 8 * torch.finfo(torch.float32).eps


@pytest.mark.parametrize("family", FAMILIES.values(), ids=lambda f: f.name)
def test_sites_that_double_their_output_move_the_boxes(family, portable_cores, monkeypatch):
    """The boxes the outputs' comparison reads move with what the sites compute, as a trained
    model's do, not the scores only: a fresh model's box heads give (next to) nothing whatever the
    sites compute, so ``build`` redraws them. Doubled weights double a site's output; the
    Grounding DINOs' detections are read with the stock's selection (another selection alone
    would move them), and their encoder's proposal boxes (before it) must move too."""
    model, arguments = build(family)
    with torch.no_grad():
        expected = model(**arguments)
    wire_deformable_attention(model)
    _hand_over_altered(monkeypatch, lambda locations, weights: (locations, weights * 2))
    with torch.no_grad():
        got = Run(model(**arguments), under_stock_selection(family, model, arguments, expected))
    boxes = ["pred_boxes"] + ["enc_outputs_coord_logits"] * family.selects_after_sites
    for key in boxes:
        moved = largest_difference(getattr(got.holding(key), key), getattr(expected, key))
        assert moved > MOVED, f"{family.name} {key}: moved by {moved:.3g}, not over {MOVED:.3g}"


def test_the_checks_reject_a_wiring_that_drops_a_site(portable_cores, monkeypatch):
    original = wiring._wire_one
    dropped = []

    def drop_first(module):
        site = original(module)
        if isinstance(site, wiring.Site) and not dropped:
            unwire_deformable_attention(module)
            dropped.append(module)
            return None
        return site

    monkeypatch.setattr(wiring, "_wire_one", drop_first)
    with pytest.raises(AssertionError, match="wired 1 deformable-attention site"):
        check_family(FAMILIES["rt_detr"], monkeypatch)


def test_a_stand_in_that_errs_is_caught_at_the_call(portable_cores, monkeypatch):
    """The per-call bound is what catches a subtly wrong kernel, not only the model's outputs."""
    family = FAMILIES["deimv2"]
    model, arguments = build(family)
    wire_deformable_attention(model)
    recorder = Recorder(monkeypatch)
    with torch.no_grad():
        model(**arguments)

    def scaled(*args):
        return wiring._ask_ragged(*args) * (1 + 1e-3)

    errors = call_errors(family, recorder.calls[0], ours=scaled)
    assert errors[0][1] > errors[0][2]  # the output's error exceeds its bound


def _graph_breaks(model, arguments) -> int:
    torch._dynamo.reset()
    with torch.no_grad():
        return torch._dynamo.explain(model)(**arguments).graph_break_count


@pytest.mark.parametrize("name", ["rt_detr", "rt_detr_v2_discrete"])
def test_wiring_adds_no_graph_break(name, portable_cores):
    """RT-DETR compiles whole, wired or not; RT-DETRv2's own code breaks the graph at transformers'
    ``.item()`` checks, and wired it breaks at exactly those. Its sites are rebound forwards: every
    instance shares one rebound function, which torch.compile needs (it keeps compiled code per
    code object, its compiled functions in the frame's globals)."""
    stock, arguments = build(FAMILIES[name])
    expected = _graph_breaks(stock, arguments)
    wire_deformable_attention(stock)
    assert _graph_breaks(stock, arguments) == expected
    assert name != "rt_detr" or expected == 0

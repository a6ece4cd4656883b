"""prepare's report (swapped, skipped with the reason, adjusted), skip rules, attention
projections, shared modules, and atomicity: an error leaves the model as it was."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from libreyolo.nn.attention import ProjectedAttention, QKVAttention
from libreyolo.nn.quantized import (
    RECIPES,
    LayerError,
    QuantConv2d,
    QuantLinear,
    calibrate,
    convert,
    prepare,
)

from .quantized_cases import assert_same_bits, mixed


def _types(model):
    return {name: type(m).__name__ for name, m in model.named_modules() if name}


def test_the_report_lists_every_swapped_layer_by_qualified_name():
    model = mixed()
    report = prepare(model, "fp8_dynamic")
    assert [(e.name, e.type) for e in report.swapped] == [
        ("conv", "Conv2d"), ("down", "Conv2d"), ("point", "Conv2d"), ("grouped", "Conv2d"),
        ("attn.qkv", "Linear"), ("attn.proj", "Linear"), ("head", "Linear")]
    assert report.skipped == [] and report.adjusted == []
    assert isinstance(model.attn.qkv, QuantLinear) and isinstance(model.conv, QuantConv2d)
    assert model.attn.qkv.qualified_name == "attn.qkv"
    text = str(report)
    assert "recipe 'fp8_dynamic'" in text and "attn.qkv" in text and "swapped (7)" in text


def test_skip_takes_names_and_patterns_and_skips_everything_under_a_match():
    model = mixed()
    report = prepare(model, "mxfp8", skip=["attn", "h*d"])
    assert {e.name: e.detail for e in report.skipped} == {
        "attn.qkv": "skip: 'attn' matches 'attn'", "attn.proj": "skip: 'attn' matches 'attn'",
        "head": "skip: 'head' matches 'h*d'"}
    assert type(model.attn.qkv) is nn.Linear and type(model.head) is nn.Linear
    assert isinstance(model.point, QuantConv2d)


def test_skip_takes_a_callable_whose_string_is_the_reason():
    model = mixed()
    report = prepare(model, "mxfp8", skip=lambda name, m: isinstance(m, nn.Linear) and
                     "linears stay float")
    assert [e.detail for e in report.skipped] == ["linears stay float"] * 3


def test_a_skip_pattern_that_matches_nothing_is_an_error():
    model = mixed()
    with pytest.raises(ValueError, match=r"^skip: 'haed' matches no module of the model "
                                         r"\(did you mean 'head'\?\)$"):
        prepare(model, "mxfp8", skip=["haed"])
    assert all(type(m) in (nn.Linear, nn.Conv2d) for m in model.modules()
               if isinstance(m, (nn.Linear, nn.Conv2d)))


def test_subclasses_hooks_and_multihead_attention_are_skipped_with_the_reason():
    class MyLinear(nn.Linear):
        pass

    model = nn.Sequential(nn.Linear(32, 32), MyLinear(32, 32), nn.MultiheadAttention(32, 4),
                          nn.Linear(32, 32))
    model[3].register_forward_hook(lambda *a: None)
    report = prepare(model, "fp8_dynamic")
    assert [e.name for e in report.swapped] == ["0"]
    reasons = {e.name: e.detail for e in report.skipped}
    assert reasons["1"].startswith("a subclass of nn.Linear (MyLinear)")
    assert reasons["2.out_proj"].startswith("nn.MultiheadAttention reads out_proj's weight")
    assert reasons["3"].startswith("has hooks")


def test_an_already_prepared_layer_is_skipped():
    model = mixed()
    prepare(model, "fp8_dynamic", skip=["head"])
    report = prepare(model, "mxfp8")
    assert [e.name for e in report.swapped] == ["head"]
    assert all("already quantized (recipe 'fp8_dynamic')" == e.detail for e in report.skipped)
    assert model.head.recipe.name == "mxfp8" and model.conv.recipe.name == "fp8_dynamic"


def test_a_module_shared_by_two_parents_is_swapped_under_both_names():
    shared = nn.Linear(32, 32)
    model = nn.Sequential(shared, nn.ReLU(), shared)
    report = prepare(model, "mxfp8")
    assert model[0] is model[2] and isinstance(model[0], QuantLinear)
    assert [(e.name, e.detail) for e in report.swapped] == [("0", "-> QuantLinear (also as 2)")]


def test_attention_projections_are_swapped_and_a_fused_path_reading_their_weights_is_turned_off():
    """ProjectedAttention's fused path reads q_proj/k_proj/v_proj's weights itself (one matmul
    on their concatenation), which would bypass the quantizers: prepare turns it off, says so,
    and the output is then the projections' quantized math."""
    torch.manual_seed(0)
    attn = ProjectedAttention(64, 4, "divide", fused_attn=True)
    model = nn.Sequential(attn).eval()
    report = prepare(model, "fp8_dynamic")
    assert [e.name for e in report.swapped] == ["0.q_proj", "0.k_proj", "0.v_proj",
                                                "0.out_proj"]
    assert [(e.name, e.type) for e in report.adjusted] == [("0", "ProjectedAttention")]
    assert "fused_attn=False" in report.adjusted[0].detail
    assert attn.fused_attn is False
    x = torch.randn(2, 7, 64)
    with torch.no_grad():
        out = model(x)
        convert(model)
        assert_same_bits(model(x), out)  # the finalized projections run: no .weight read


def test_qkv_attention_needs_no_adjustment():
    model = nn.Sequential(QKVAttention(64, 4, fused_attn=True))
    report = prepare(model, "mxfp8")
    assert len(report.swapped) == 2 and report.adjusted == []
    assert model[0].fused_attn is True


def test_a_layer_the_recipe_cannot_take_is_an_error_and_nothing_is_swapped():
    model = nn.Sequential(nn.Conv2d(3, 32, 3), nn.Conv2d(32, 40, 1), nn.Flatten(),
                          nn.Linear(40, 10))
    before = _types(model)
    with pytest.raises(LayerError) as caught:
        prepare(model, "mxfp4")
    assert caught.value.layers == {
        "0": "Conv2d: in_channels / groups = 3 is not a multiple of 32, the block of recipe "
             "'mxfp4' (its scales span 32 inputs)",
        "3": "Linear: in_features = 40 is not a multiple of 32, the block of recipe 'mxfp4' "
             "(its scales span 32 inputs)"}
    assert str(caught.value).startswith(
        "prepare: 2 layers cannot be prepared; nothing was changed:\n  '0': Conv2d: in_channels")
    assert _types(model) == before  # nothing half-swapped
    report = prepare(model, "mxfp4", skip=["0", "3"])  # skipping them is the way out
    assert [e.name for e in report.swapped] == ["1"]


def test_w4a16_groups_must_divide_the_input_dim():
    model = nn.Sequential(nn.Linear(64, 8))
    with pytest.raises(LayerError, match="in_features = 64 is not a multiple of 128, the "
                                         "group_size of recipe 'w4a16' "):
        prepare(model, "w4a16")
    report = prepare(model, RECIPES["w4a16"].replace(group_size=32))
    assert report.recipe.name == "w4a16[group_size=32]" and len(report.swapped) == 1


def test_prepare_calibrate_convert_in_three_calls():
    model = mixed()
    x = torch.randn(2, 32, 6, 5)
    prepare(model, "w8a8_int8")
    calibrate(model, [x, x * 0.5], progress=False)
    with torch.no_grad():
        fake = model(x)
    convert(model)
    with torch.no_grad():
        assert_same_bits(model(x), fake)

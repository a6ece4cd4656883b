"""QuantLinear and QuantConv2d: straight-through gradients, one slot call per tensor, the weight
layouts and scales of the recipes, the state dict and its dtypes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from libreyolo.nn.quantized import RECIPES, QuantConv2d, QuantLinear, prepare
from libreyolo.quant import fake_quant as fq
from libreyolo.quant.fake_quant import ste_mask
from libreyolo.quant.numerics import finite_amax, scale_from_amax

from .quantized_cases import RECIPES_32, assert_same_bits
from .slot_calls import slot_calls

_WEIGHT_OPS = {"fp8": "fake_quant_fp8", "int8": "fake_quant_int_grouped",
               "int_grouped": "fake_quant_int_grouped", "nvfp4": "fake_quant_nvfp4_weight",
               "mxfp4": "fake_quant_mxfp4_weight", "mxfp8": "fake_quant_mxfp8_weight"}


def _layer(kind: str, recipe, seed=0):
    torch.manual_seed(seed)
    if kind == "linear":
        float_layer = nn.Linear(64, 24)
    else:
        float_layer = nn.Conv2d(64, 24, 3, stride=2, padding=1)
    with torch.no_grad():
        float_layer.weight.mul_(torch.exp2(torch.randint(-3, 3, float_layer.weight.shape).float()))
    cls = QuantLinear if kind == "linear" else QuantConv2d
    layer = cls.from_float(float_layer, recipe)
    if layer.recipe.static:  # a small scale, so the input saturates and the mask clips
        layer.set_calibration(torch.tensor(0.004), -3 if "input_zero_point" in
                              layer.recipe.calibrated else None)
    return float_layer, layer


def _x(kind: str, seed=1):
    generator = torch.Generator().manual_seed(seed)
    shape = (2, 5, 64) if kind == "linear" else (2, 64, 5, 6)
    return torch.randn(shape, generator=generator) * 2


def _weight_matrix(kind, w):
    """The view the weight op quantizes (an oracle of its own: not the module's helpers)."""
    if kind == "linear":
        return w
    return w.permute(0, 2, 3, 1).reshape(-1, w.shape[1])


def _weight_args(recipe, matrix):
    if recipe.weight == "int8":
        return (8, matrix.shape[1])
    if recipe.weight == "int_grouped":
        return (recipe.bits, recipe.group_size)
    return ()


def _input_args(layer):
    if layer.recipe.activation == "fp8_static":
        return (layer.input_scale,)
    if layer.recipe.activation == "int8_affine":
        return (layer.input_scale, layer._zero_point)
    return ()


@pytest.mark.parametrize("kind", ["linear", "conv"])
@pytest.mark.parametrize("name", RECIPES_32)
def test_gradients_are_the_straight_through_estimator(name, kind):
    """weight.grad and x.grad are the layer op's gradients at the quantized operands, masked by
    the weight and input ops' ste_mask (checked against an explicit mask, as the parity
    contract's 'ste' says), through the layouts the recipes state."""
    recipe = RECIPES_32[name]
    _, layer = _layer(kind, recipe)
    x = _x(kind).requires_grad_()
    out = layer(x)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    out.backward(g)

    w = layer.weight.detach()
    if recipe.weight in ("fp8", "int8"):
        rows = w.reshape(w.shape[0], -1)
        w_mask = ste_mask(_WEIGHT_OPS[recipe.weight], rows, *_weight_args(recipe, rows))
        w_mask = w_mask.reshape(w.shape)
    else:
        matrix = _weight_matrix(kind, w)
        w_mask = ste_mask(_WEIGHT_OPS[recipe.weight], matrix, *_weight_args(recipe, matrix))
        if kind == "conv":
            out_c, in_c, kh, kw = w.shape
            w_mask = w_mask.reshape(out_c, kh, kw, in_c).permute(0, 3, 1, 2)
    with torch.no_grad():
        wq = layer.fake_quant_weight()
        xq = layer._quantize_input(x.detach())
    wq.requires_grad_()
    xq.requires_grad_()
    op = F.linear if kind == "linear" else (
        lambda a, b, c: F.conv2d(a, b, c, layer.stride, layer.padding))
    op(xq, wq, layer.bias.detach()).backward(g)
    expected_w = torch.where(w_mask, wq.grad, 0.0)
    if recipe.activation is None:
        expected_x = xq.grad
    else:
        moved = kind == "conv" and recipe.activation not in ("fp8_static", "int8_affine")
        view = x.detach().movedim(1, -1) if moved else x.detach()
        x_mask = ste_mask(recipe.activation_slot, view, *_input_args(layer))
        if moved:
            x_mask = x_mask.movedim(-1, 1)
        expected_x = torch.where(x_mask, xq.grad, 0.0)
        if recipe.static:
            assert not x_mask.all(), "the small scale should saturate some inputs"
    torch.testing.assert_close(layer.weight.grad, expected_w, atol=1e-6, rtol=0)
    torch.testing.assert_close(x.grad, expected_x, atol=1e-6, rtol=0)
    assert layer.weight.grad.abs().sum() > 0 and x.grad.abs().sum() > 0


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_int8_weights_are_fake_quant_int8_per_channel_with_scale_amax_over_127(kind):
    """The w8a8 weight takes fake_quant_int_grouped (one group per row: the scale on the
    device), which must be the per-channel op with the finalized layer's default scale."""
    _, layer = _layer(kind, "w8a8_int8")
    w = layer.weight.detach()
    scale = scale_from_amax(finite_amax(w, tuple(range(1, w.dim()))).reshape(-1), 127.0)
    with torch.no_grad():
        assert_same_bits(layer.fake_quant_weight(), fq.fake_quant_int8_per_channel(w, scale, 0))


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_fp8_weights_are_per_channel_with_scale_amax_over_448(kind):
    _, layer = _layer(kind, "fp8_dynamic")
    w = layer.weight.detach()
    scale = scale_from_amax(finite_amax(w, tuple(range(1, w.dim()))).reshape(-1), 448.0)
    with torch.no_grad():
        assert_same_bits(layer.fake_quant_weight(), fq.fake_quant_fp8(w, scale, axis=0))


@pytest.mark.parametrize("name", RECIPES_32)
def test_each_forward_calls_one_slot_per_quantized_tensor(name):
    """A slot call is one function call per tensor (the weight, and the input if the recipe
    quantizes it), through the layer's call sites: what the slots' operators replace when
    compiled."""
    recipe = RECIPES_32[name]
    _, layer = _layer("conv", recipe)
    with slot_calls() as calls:
        layer(_x("conv"))
    expected = [recipe.weight_slot] + ([recipe.activation_slot] if recipe.activation else [])
    assert sorted(slot for slot, _ in calls) == sorted(expected)


def test_the_layer_shares_the_float_layers_parameters_so_an_optimizer_keeps_training_them():
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    params = list(model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    prepare(model, "fp8_dynamic")
    assert [p is q for p, q in zip(params, model.parameters(), strict=True)] == [True] * 4
    before = model[0].weight.detach().clone()
    model(torch.randn(8, 32)).square().mean().backward()
    optimizer.step()
    assert not torch.equal(model[0].weight, before)


@pytest.mark.parametrize("name, extra", [
    ("w8a8_int8", {"input_scale": torch.float32, "input_zero_point": torch.int8}),
    ("fp8_static", {"input_scale": torch.float32}),
    ("fp8_dynamic", {}), ("w4a16", {}), ("nvfp4", {}), ("mxfp4", {}), ("mxfp8", {})])
def test_the_state_dict_is_the_float_layers_plus_the_calibrated_values(name, extra):
    _, layer = _layer("linear", RECIPES_32[name])
    state = layer.state_dict()
    assert {k: v.dtype for k, v in state.items()} == {
        "weight": torch.float32, "bias": torch.float32, **extra}
    assert all(state[k].shape == () for k in extra)


def test_an_uncalibrated_scale_is_nan_and_loading_a_calibrated_one_is_read_once():
    layer = QuantLinear.from_float(nn.Linear(32, 8), "w8a8_int8")
    assert math.isnan(layer.input_scale.item()) and not layer.calibrated
    state = layer.state_dict()
    state["input_scale"] = torch.tensor(0.05)
    state["input_zero_point"] = torch.tensor(-9, dtype=torch.int8)
    layer.load_state_dict(state)
    assert layer.calibrated and layer._zero_point == -9
    x = torch.randn(3, 32)
    with torch.no_grad():
        expected = F.linear(fq.fake_quant_int8_affine(x, torch.tensor(0.05), -9),
                            layer.fake_quant_weight(), layer.bias)
        assert_same_bits(layer(x), expected)


def test_a_checkpoint_with_a_float64_scale_is_refused_not_converted():
    layer = QuantLinear.from_float(nn.Linear(32, 8), "fp8_static")
    state = layer.state_dict()
    state["input_scale"] = torch.tensor(0.05, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="input_scale must be float32, got float64"):
        layer.load_state_dict(state)


def test_module_casts_keep_the_calibrated_dtypes():
    _, layer = _layer("conv", "w8a8_int8")
    layer.half()
    assert layer.weight.dtype == torch.float16 and layer.bias.dtype == torch.float16
    assert layer.input_scale.dtype == torch.float32
    assert layer.input_zero_point.dtype == torch.int8
    with torch.no_grad():
        assert layer(_x("conv").half()).dtype == torch.float16


def test_the_weight_is_fake_quantized_from_its_float32_value_in_mixed_precision():
    """A bf16 input with a float32 master weight: the weight is quantized in float32 and rounded
    once to bf16 (the finalized layer's dequantization in the input's dtype)."""
    _, layer = _layer("linear", "mxfp8")
    x = _x("linear").bfloat16()
    with torch.no_grad():
        expected = F.linear(fq.fake_quant_mxfp8_dynamic(x),
                            fq.fake_quant_mxfp8_weight(layer.weight).bfloat16(),
                            layer.bias.bfloat16())
        assert_same_bits(layer(x), expected)


def test_a_recipe_given_by_name_or_as_data_makes_the_same_layer():
    a = QuantLinear(32, 8, recipe="mxfp4")
    b = QuantLinear(32, 8, recipe=RECIPES["mxfp4"])
    assert a.recipe == b.recipe and "recipe='mxfp4'" in repr(a)

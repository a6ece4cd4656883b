"""Bad input to prepare, calibrate, convert and the recipes: the exact exception type and a message
naming the layer by its qualified name and the reason; nothing changed."""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch import nn

from libreyolo.nn.quantized import (
    RECIPES,
    LayerError,
    QuantConv2d,
    QuantLinear,
    Recipe,
    calibrate,
    convert,
    get_recipe,
    prepare,
)

from .quantized_cases import mixed


def _net():
    return nn.Sequential(nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
                         nn.Sequential(nn.Conv2d(32, 32, 1)), nn.Flatten(), nn.Linear(32 * 4, 8))


def _x():
    return torch.randn(2, 32, 2, 2)


def test_an_unknown_recipe_is_a_value_error_listing_the_recipes():
    message = ("unknown recipe 'int3'; the recipes are w8a8_int8, fp8_static, fp8_dynamic, "
               "w4a16, nvfp4, mxfp4, mxfp8")
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        prepare(_net(), "int3")
    with pytest.raises(ValueError, match=re.escape(message)):
        get_recipe("int3")
    with pytest.raises(TypeError, match="^recipe must be a recipe name or a Recipe, got int$"):
        prepare(_net(), 8)


@pytest.mark.parametrize("kwargs, message", [
    ({"weight": "int3", "activation": None},
     "recipe 'r': weight must be one of ('fp8', 'int8', 'int_grouped', 'nvfp4', 'mxfp4', "
     "'mxfp8'), got 'int3'"),
    ({"weight": "mxfp4", "activation": "fp8_dynamic"},
     "recipe 'r': activation must be one of (None, 'mxfp4_dynamic') for weight='mxfp4', got "
     "'fp8_dynamic'"),
    ({"weight": "int_grouped", "activation": None, "bits": 3, "group_size": 32},
     "recipe 'r': bits must be one of (2, 4, 8), got 3"),
    ({"weight": "int_grouped", "activation": None, "bits": 4, "group_size": 0},
     "recipe 'r': group_size must be a positive int, got 0"),
    ({"weight": "fp8", "activation": "fp8_dynamic", "bits": 4},
     "recipe 'r': bits and group_size are for weight='int_grouped' only, got bits=4, "
     "group_size=None"),
])
def test_a_recipe_that_no_finalized_layer_could_hold_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        Recipe("r", **kwargs)


def test_a_model_that_is_not_a_module_or_is_a_bare_layer_is_a_type_error():
    with pytest.raises(TypeError, match="^model must be a torch.nn.Module, got list$"):
        prepare([nn.Linear(32, 32)], "mxfp8")
    with pytest.raises(TypeError, match=r"^model is a bare Linear: prepare swaps a model's layers "
                                        r"in place, .*nn.Sequential\(layer\)$"):
        prepare(nn.Linear(32, 32), "mxfp8")


def test_a_padding_mode_the_recipe_cannot_take_names_the_layer():
    model = _net()
    model[2][0] = nn.Conv2d(32, 32, 1, padding_mode="reflect")
    with pytest.raises(LayerError) as caught:
        prepare(model, "fp8_dynamic")
    assert caught.value.layers == {
        "2.0": "Conv2d: padding_mode='reflect': the finalized layers pad with zeros, so recipe "
               "'fp8_dynamic' cannot take it"}
    assert type(model[0]) is nn.Conv2d  # nothing swapped


def test_a_float64_layer_names_itself():
    model = _net().double()
    with pytest.raises(LayerError) as caught:
        prepare(model, "fp8_dynamic")
    assert caught.value.layers["4"] == ("Linear: weight is float64: the fake-quant slots take "
                                        "float32, float16 or bfloat16")
    assert len(caught.value.layers) == 3


def test_a_dim_not_divisible_by_the_nvfp4_block_names_the_layer_and_the_block():
    model = nn.Sequential(nn.Linear(32, 24), nn.ReLU(), nn.Linear(24, 8))
    with pytest.raises(LayerError, match=re.escape(
            "'2': Linear: in_features = 24 is not a multiple of 16, the block of recipe 'nvfp4' "
            "(its scales span 16 inputs)")):
        prepare(model, "nvfp4")
    assert type(model[0]) is nn.Linear


def test_calibrating_with_no_batches_is_a_value_error_and_changes_nothing():
    model = _net()
    prepare(model, "w8a8_int8")
    with pytest.raises(ValueError, match="^batches is empty: calibration needs at least one "
                                         "batch$"):
        calibrate(model, [])
    with pytest.raises(ValueError, match="^batches is empty"):
        calibrate(model, iter([]))
    with pytest.raises(TypeError, match="^batches must be an iterable of batches .*got a single "
                                        "tensor$"):
        calibrate(model, _x())
    assert all(math.isnan(m.input_scale.item()) for m in model.modules()
               if isinstance(m, QuantLinear))


def test_calibrating_an_unprepared_model_is_a_value_error():
    with pytest.raises(ValueError, match=r"^model has no quantized layers: run prepare\(model, "
                                         r"recipe\) first$"):
        calibrate(_net(), [_x()])


def test_an_unknown_observer_is_a_value_error():
    model = _net()
    prepare(model, "fp8_static")
    with pytest.raises(ValueError, match="^unknown observer 'median'; the observers are minmax, "
                                         "moving_average, percentile$"):
        calibrate(model, [_x()], observer="median")


def test_a_layer_calibration_never_reaches_names_itself_and_nothing_is_calibrated():
    class Partly(nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.unused = nn.Linear(32, 32), nn.Linear(32, 32)

        def forward(self, x):
            return self.used(x)

    model = Partly()
    prepare(model, "fp8_static")
    with pytest.raises(LayerError) as caught:
        calibrate(model, [torch.randn(4, 32)] * 2, progress=False)
    assert caught.value.layers == {"unused": "saw no finite input in 2 batches (does the model's "
                                             "forward reach it?)"}
    assert not model.used.calibrated  # all or nothing


def test_converting_before_calibrating_names_every_uncalibrated_layer():
    model = _net()
    prepare(model, "w8a8_int8", skip=["4"])
    with pytest.raises(LayerError) as caught:
        convert(model)
    reason = ("recipe 'w8a8_int8' quantizes the input with a calibrated scale, and this layer "
              "has none: run calibrate(model, batches) before convert")
    assert caught.value.layers == {"0": reason, "2.0": reason}
    assert str(caught.value) == (f"convert: 2 layers cannot be converted; nothing was changed:\n"
                                 f"  '0': {reason}\n  '2.0': {reason}")
    assert isinstance(model[0], QuantConv2d)


def test_converting_a_dynamic_recipe_needs_no_calibration():
    model = _net()
    prepare(model, "mxfp8")
    assert len(convert(model).converted) == 3


def test_a_forward_before_calibrating_names_the_layer():
    model = _net()
    prepare(model, "fp8_static")
    with pytest.raises(RuntimeError, match=r"^0: recipe 'fp8_static' quantizes the input with a "
                                           r"calibrated scale, and this layer has none: run "
                                           r"calibrate\(model, batches\) first"):
        model(_x())


def test_converting_a_non_finite_weight_names_the_layer():
    model = _net()
    prepare(model, "mxfp8")
    with torch.no_grad():
        model[2][0].weight[1, 2, 0, 0] = float("inf")
    with pytest.raises(LayerError) as caught:
        convert(model)
    assert caught.value.layers == {"2.0": "ValueError: module.weight must be finite to be packed, "
                                          "got inf at index (1, 2, 0, 0)"}
    assert isinstance(model[0], QuantConv2d)  # nothing converted


def test_converting_an_unprepared_model_is_a_value_error():
    with pytest.raises(ValueError, match=r"^model has no quantized layers"):
        convert(mixed())


def test_recipes_cannot_be_changed_in_place():
    with pytest.raises(AttributeError):
        RECIPES["mxfp4"].weight = "fp8"

"""prepare -> calibrate -> convert: the fake-quantized model and the finalized model it converts to
give the same bits on the CPU, for every recipe, every layer geometry and the input dtypes, and
under autocast the dtype policy of ``libreyolo/nn/quantized/modules.py`` holds."""

from __future__ import annotations

import pytest
import torch

from libreyolo.nn.finalized import FinalizedConv2d, FinalizedLinear
from libreyolo.nn.quantized import QuantConv2d, QuantLinear, convert

from .quantized_cases import RECIPES_32, assert_same_bits, copy_model, inputs, prepared


def _run(model, xs):
    """Without gradients, as a finalized model runs: torch's CPU ``F.linear`` takes another
    path (other bits) for a non-contiguous input when the weight requires a gradient."""
    with torch.no_grad():
        return [model(x) for x in xs]


@pytest.mark.parametrize("recipe", RECIPES_32)
def test_the_finalized_model_gives_the_fake_quantized_models_bits(recipe):
    model = prepared(recipe)
    xs = inputs(3, seed=11)
    fake = _run(model, xs)
    report = convert(model)
    assert len(report.converted) == 7
    assert not any(isinstance(m, (QuantLinear, QuantConv2d)) for m in model.modules())
    assert sum(isinstance(m, (FinalizedLinear, FinalizedConv2d)) for m in model.modules()) == 7
    finalized = _run(model, xs)
    for a, b in zip(fake, finalized, strict=True):
        assert_same_bits(b, a)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("recipe", ["w8a8_int8", "fp8_dynamic", "w4a16", "nvfp4", "mxfp4"])
def test_half_precision_inputs_round_trip_bit_for_bit(recipe, dtype):
    model = prepared(recipe)
    xs = inputs(2, seed=12, dtype=dtype)
    fake = _run(model, xs)
    convert(model)
    for a, b in zip(fake, _run(model, xs), strict=True):
        assert a.dtype == dtype
        assert_same_bits(b, a)


@pytest.mark.parametrize("recipe", ["fp8_static", "mxfp8", "w4a16"])
def test_under_autocast_a_layer_computes_what_its_finalized_layer_does_on_the_cast_input(recipe):
    """The dtype policy: under autocast the island computes in autocast's dtype, so the
    fake-quantized model under CPU autocast gives the finalized model's bits for bf16 inputs
    outside autocast (the first layer gets float32 and casts it itself)."""
    model = prepared(recipe)
    finalized = copy_model(model)
    convert(finalized)
    xs = inputs(2, seed=13)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        fake = [model(x) for x in xs]
    for a, x in zip(fake, xs, strict=True):
        assert a.dtype == torch.bfloat16
        with torch.no_grad():
            assert_same_bits(a, finalized(x.bfloat16()))


def test_without_the_cast_first_autocast_would_round_twice():
    """Negative control of the policy above: quantizing the float32 input and letting autocast
    cast the layer op's operands afterwards is not the finalized layer's bits."""
    model = prepared("fp8_dynamic")
    layer = model.head
    x = torch.randn(2, 9, 64) * 3
    with torch.no_grad():
        expected = layer(x.bfloat16())
        with torch.autocast("cpu", dtype=torch.bfloat16):
            twice = torch.nn.functional.linear(layer._quantize_input(x),
                                               layer.fake_quant_weight(), layer.bias)
    assert not torch.equal(twice, expected)

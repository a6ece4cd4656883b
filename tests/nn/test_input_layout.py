"""A layer's input reaches its fake-quant slot without a layout copy
(``libreyolo/nn/input_layout.py``): a per-tensor format quantizes a channels-last input in
memory order, a per-pixel one quantizes each pixel's channels; the quantized and finalized layers
do the same thing, op for op, so channels-last models round-trip bit for bit too."""

from __future__ import annotations

import pytest
import torch

from libreyolo.nn.quantized import QuantConv2d, convert

from .quantized_cases import assert_same_bits, inputs, prepared
from .slot_calls import slot_calls

#: recipe -> its input slot; w8a8 and fp8_static are per tensor, the others per pixel
INPUT_SLOTS = {"w8a8_int8": "fake_quant_int8_affine", "fp8_static": "fake_quant_fp8",
               "fp8_dynamic": "fake_quant_fp8", "mxfp4": "fake_quant_mxfp4_dynamic"}


def _channels_last(model_or_tensor):
    return model_or_tensor.to(memory_format=torch.channels_last)


@pytest.mark.parametrize("recipe", INPUT_SLOTS)
@pytest.mark.parametrize("finalized", [False, True], ids=["quantized", "finalized"])
def test_a_channels_last_input_reaches_the_slot_contiguous(recipe, finalized):
    model = _channels_last(prepared(recipe))
    if finalized:
        convert(model)
    layer = model.conv
    x = _channels_last(inputs(1, seed=3)[0])
    with torch.no_grad(), slot_calls() as calls:
        quantized = layer._quantize_input(x)
    (received,) = [args[0] for slot, args in calls
                   if slot == INPUT_SLOTS[recipe] and args[0].dim() == 4]
    assert received.is_contiguous()
    # no copy back either: the result lies in the input's memory format
    assert quantized.is_contiguous(memory_format=torch.channels_last)
    assert not quantized.is_contiguous()


@pytest.mark.parametrize("recipe", INPUT_SLOTS)
def test_the_layout_does_not_change_the_quantized_input(recipe):
    """Per-tensor formats are elementwise and per-pixel ones quantize channels: the same values
    from a channels-last input as from a contiguous one (values, not layouts, compared)."""
    layer = prepared(recipe).conv
    assert isinstance(layer, QuantConv2d)
    x = inputs(1, seed=4)[0]
    with torch.no_grad():
        contiguous = layer._quantize_input(x)
        channels_last = layer._quantize_input(_channels_last(x))
    assert_same_bits(channels_last, contiguous)


@pytest.mark.parametrize("recipe", INPUT_SLOTS)
def test_a_channels_last_model_round_trips_bit_for_bit(recipe):
    model = _channels_last(prepared(recipe))
    xs = [_channels_last(x) for x in inputs(2, seed=5)]
    with torch.no_grad():
        fake = [model(x) for x in xs]
        convert(model)
        finalized = [model(x) for x in xs]
    for a, b in zip(fake, finalized, strict=True):
        assert_same_bits(b, a)

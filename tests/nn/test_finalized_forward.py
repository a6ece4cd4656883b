"""A finalized layer computes the fake-quant oracle's bits, and its state dict is the packing
contract: every format of finalized_cases.toml on every layer geometry there, on the CPU."""

from __future__ import annotations

import io

import pytest
import safetensors.torch
import torch

from libreyolo.nn.finalized import WEIGHT_FORMATS, FinalizedConv2d
from libreyolo.quant import packing

from .finalized_cases import FORMATS, LAYERS, finalize, oracle

CASES = [pytest.param(f, layer, id=f"{f}-{layer}") for f in FORMATS for layer in LAYERS]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)


def assert_same_bits(actual, expected):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    differ = _bits(actual) != _bits(expected)
    assert not differ.any(), f"{int(differ.sum())} of {differ.numel()} elements differ"


@pytest.mark.parametrize("fmt, layer", CASES)
def test_forward_is_the_fake_quant_oracle_bit_for_bit(fmt, layer):
    float_layer, finalized = finalize(FORMATS[fmt], LAYERS[layer])
    x = LAYERS[layer].x()
    with torch.no_grad():
        assert_same_bits(finalized(x), oracle(FORMATS[fmt], LAYERS[layer], float_layer, x))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fmt", ["fp8-dynamic", "int4-g16", "nvfp4-global-dynamic", "mxfp8"])
def test_the_weight_is_dequantized_in_the_input_dtype(fmt, dtype):
    """One rounding from the float32 dequantized weight to the activation dtype, as the oracle's
    float32 fake-quantized weight cast to it."""
    layer = LAYERS["conv3x3-stride2-nobias"]
    float_layer, finalized = finalize(FORMATS[fmt], layer)
    x = layer.x(dtype=dtype)
    with torch.no_grad():
        assert_same_bits(finalized(x), oracle(FORMATS[fmt], layer, float_layer, x))


@pytest.mark.parametrize("fmt", FORMATS)
def test_state_dict_holds_the_packers_tensors_under_their_field_names(fmt):
    """The state dict is the packing contract: the packer's own output, byte for byte."""
    spec, layer = FORMATS[fmt], LAYERS["conv3x3-stride2-nobias"]
    float_layer, finalized = finalize(spec, layer)
    kwargs = spec.from_float_kwargs(float_layer)
    w = float_layer.weight.detach()
    matrix = w.permute(0, 2, 3, 1).reshape(-1, w.shape[1])
    packed = {
        "fp8": lambda: packing.pack_fp8(w, kwargs["weight_scale"], axis=0),
        "int8": lambda: packing.pack_int8(w, kwargs["weight_scale"], axis=0),
        "int_grouped": lambda: packing.pack_int_grouped(matrix, spec.bits, spec.group_size),
        "nvfp4": lambda: packing.pack_nvfp4(matrix, kwargs.get("global_amax")),
        "mxfp4": lambda: packing.pack_mxfp4(matrix),
        "mxfp8": lambda: packing.pack_mxfp8(matrix),
    }[spec.weight]()
    state = finalized.state_dict()
    fields = WEIGHT_FORMATS[spec.weight].fields
    activation = {"fp8_static": ["input_scale"],
                  "int8_affine": ["input_scale", "input_zero_point"]}.get(spec.activation, [])
    assert sorted(state) == sorted([*fields, *activation])  # this layer has no bias
    for name in fields:
        expected = getattr(packed, name)
        assert state[name].dtype == expected.dtype and state[name].shape == expected.shape
        assert torch.equal(_bytes(state[name]), _bytes(expected)), name
    if spec.input_scale is not None:
        assert state["input_scale"].dtype == torch.float32
        assert state["input_scale"].item() == torch.tensor(spec.input_scale).item()
    if spec.input_zero_point is not None:
        assert state["input_zero_point"].dtype == torch.int8
        assert state["input_zero_point"].item() == spec.input_zero_point


def _save_load_safetensors(state):
    return safetensors.torch.load(safetensors.torch.save(state))


def _save_load_torch(state):
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("round_trip", [_save_load_safetensors, _save_load_torch],
                         ids=["safetensors", "torch.save"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_a_saved_state_dict_loads_into_a_fresh_layer_that_computes_the_same_bits(fmt, round_trip):
    spec, layer = FORMATS[fmt], LAYERS["conv2x3-dilated-groups"]
    _, finalized = finalize(spec, layer)
    fresh = layer.finalized_class(
        layer.in_, layer.out, layer.kernel, layer.stride, layer.padding, layer.dilation,
        layer.groups, layer.bias, weight=spec.weight, activation=spec.activation, bits=spec.bits,
        group_size=spec.group_size)
    x = layer.x()
    with torch.no_grad():
        before = fresh(x)
        fresh.load_state_dict(round_trip(finalized.state_dict()))
        assert_same_bits(fresh(x), finalized(x))
    assert not torch.equal(before, fresh(x))  # the load changed what it computes


def test_module_dtype_casts_keep_the_contract_dtypes_and_cast_only_the_bias():
    spec, layer = FORMATS["int8-affine"], LAYERS["linear"]
    _, finalized = finalize(spec, layer)
    dtypes = {name: t.dtype for name, t in finalized.state_dict().items()}
    finalized.half()
    cast = {name: t.dtype for name, t in finalized.state_dict().items()}
    assert cast == {**dtypes, "bias": torch.float16}
    finalized.to(torch.bfloat16)
    assert {n: t.dtype for n, t in finalized.state_dict().items()} == {
        **dtypes, "bias": torch.bfloat16}
    x = layer.x(dtype=torch.bfloat16)
    with torch.no_grad():
        assert finalized(x).dtype == torch.bfloat16


def test_a_loaded_zero_point_is_the_one_the_forward_uses():
    """The zero point reaches the forward as a host int read once at load: loading another
    checkpoint's must change the output exactly as the oracle's does."""
    spec, layer = FORMATS["int8-affine"], LAYERS["linear"]
    float_layer, finalized = finalize(spec, layer)
    state = finalized.state_dict()
    state["input_zero_point"] = torch.tensor(40, dtype=torch.int8)
    finalized.load_state_dict(state)
    moved = type(spec)(**{**spec.__dict__, "input_zero_point": 40})
    x = layer.x()
    with torch.no_grad():
        assert_same_bits(finalized(x), oracle(moved, layer, float_layer, x))


def test_the_kept_weight_is_refreshed_by_every_change_of_the_buffers(monkeypatch):
    """The dequantize-once mechanism (what the eager CUDA forward uses; driven directly here, and
    through the forward in test_finalized_cuda.py): one dequantization per dtype and buffer
    state, the bias's included, another after an in-place write, a load, a move, or a replaced
    buffer."""
    spec, layer = FORMATS["nvfp4"], LAYERS["linear"]
    _, finalized = finalize(spec, layer)
    _, other = finalize(spec, layer, seed=5)
    calls = []
    dequantize = finalized._dequantize
    monkeypatch.setattr(finalized, "_dequantize",
                        lambda dtype: calls.append(dtype) or dequantize(dtype))
    kept = finalized._dequantized(torch.float32)
    assert finalized._dequantized(torch.float32) is kept and len(calls) == 1
    weight, bias = finalized._dequantized(torch.bfloat16)
    assert weight.dtype == bias.dtype == torch.bfloat16 and len(calls) == 2
    finalized.load_state_dict(other.state_dict())
    weight, bias = finalized._dequantized(torch.float32)
    assert_same_bits(weight, other._dequantize(torch.float32))
    assert_same_bits(bias, other.bias) and len(calls) == 3
    finalized.tensor_scale.mul_(2)
    finalized._dequantized(torch.float32)
    assert len(calls) == 4
    finalized.bias.add_(1)
    assert_same_bits(finalized._dequantized(torch.float32)[1], finalized.bias)
    assert len(calls) == 5
    finalized.to("cpu", torch.float16)  # a module cast: the contract's buffers keep their dtypes
    finalized._dequantized(torch.float32)
    assert len(calls) == 6
    finalized.codes = other.codes.clone()
    finalized._dequantized(torch.float32)
    assert len(calls) == 7
    finalized._dequantized(torch.float32)
    assert len(calls) == 7


def test_a_layer_built_under_inference_mode_is_dequantized_on_every_call(monkeypatch):
    """Inference tensors have no version counter, so nothing could tell a kept weight is stale."""
    spec, layer = FORMATS["nvfp4"], LAYERS["linear"]
    with torch.inference_mode():
        _, finalized = finalize(spec, layer)
    calls = []
    dequantize = finalized._dequantize
    monkeypatch.setattr(finalized, "_dequantize",
                        lambda dtype: calls.append(dtype) or dequantize(dtype))
    with torch.inference_mode():
        first, again = (finalized._dequantized(torch.float32) for _ in range(2))
    assert len(calls) == 2 and finalized._cache is None
    assert_same_bits(first[0], again[0])


@pytest.mark.parametrize("weight, activation, qmax, calibration", [
    ("fp8", "fp8_dynamic", 448.0, {}),
    ("int8", "int8_affine", 127.0, {"input_scale": torch.tensor(0.1), "input_zero_point": 0}),
])
def test_without_a_weight_scale_each_channel_scales_its_amax_to_the_format_max(
        weight, activation, qmax, calibration):
    layer = LAYERS["conv3x3-stride2-nobias"].float_layer()
    with torch.no_grad():
        layer.weight[1].zero_()  # an all-zero channel: scale 1 (docs/quantization.md, rule 6)
    amax = layer.weight.detach().abs().amax(dim=(1, 2, 3))
    scale = torch.where(amax == 0, 1.0, amax / torch.tensor(qmax))
    default = FinalizedConv2d.from_float(layer, weight, activation, **calibration)
    given = FinalizedConv2d.from_float(layer, weight, activation, weight_scale=scale,
                                       **calibration)
    for name, tensor in given.state_dict().items():
        assert torch.equal(_bytes(default.state_dict()[name]), _bytes(tensor)), name

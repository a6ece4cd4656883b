"""Bad input to a finalized layer is an error that names the argument and what was expected."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from libreyolo.nn.finalized import FinalizedConv2d, FinalizedLinear
from libreyolo.quant import packing


def _linear(**kwargs):
    return FinalizedLinear(40, 6, **{"weight": "mxfp4", **kwargs})


def _float_linear():
    torch.manual_seed(0)
    return nn.Linear(40, 6)


def _from_float(weight="fp8", activation="fp8_dynamic", module=None, **kwargs):
    return FinalizedLinear.from_float(module or _float_linear(), weight, activation, **kwargs)


def _nan_weight():
    layer = _float_linear()
    with torch.no_grad():
        layer.weight[2, 3] = float("nan")
    return layer


def _load_packed(packed, **kwargs):
    return _linear().load_packed(packed, torch.zeros(6), **kwargs)


def _mxfp4(w=None):
    return packing.pack_mxfp4(torch.randn(6, 40) if w is None else w)


def _forward(x):
    with torch.no_grad():
        return _linear()(x)


def _state_dict_with(name, value):
    layer = _linear()
    state = layer.state_dict()
    state[name] = value
    return layer.load_state_dict(state)


ERRORS = {
    "unknown weight format": (
        lambda: _linear(weight="int3"), ValueError, r"^weight must be one of \("),
    "activation the weight format does not pair with": (
        lambda: _linear(activation="fp8_dynamic"), ValueError,
        r"^activation must be one of \(None, 'mxfp4_dynamic'\) for weight='mxfp4', "
        r"got 'fp8_dynamic'"),
    "fp8 without activation quantization": (
        lambda: FinalizedLinear(40, 6, weight="fp8"), ValueError, r"^activation must be one of"),
    "bits for a format without them": (
        lambda: _linear(bits=4), ValueError, r"^bits: only weight='int_grouped' takes it"),
    "grouped int without bits": (
        lambda: _linear(weight="int_grouped", group_size=16), TypeError, r"^bits must be an int"),
    "grouped int with 3 bits": (
        lambda: _linear(weight="int_grouped", bits=3, group_size=16), ValueError,
        r"^bits must be one of \(2, 4, 8\)"),
    "group size zero": (
        lambda: _linear(weight="int_grouped", bits=4, group_size=0), ValueError,
        r"^group_size must be a positive int"),
    "zero in_features": (
        lambda: FinalizedLinear(0, 6, weight="mxfp4"), ValueError, r"^in_features must be"),
    "bias not a bool": (
        lambda: FinalizedLinear(40, 6, bias=None, weight="mxfp4"), TypeError,
        r"^bias must be a bool"),
    "channels not divisible by groups": (
        lambda: FinalizedConv2d(10, 6, 3, groups=4, weight="mxfp4"), ValueError,
        r"^in_channels \(10\) and out_channels \(6\) must be divisible by groups \(4\)"),
    "an unknown padding mode": (
        lambda: FinalizedConv2d(8, 6, 3, padding="full", weight="mxfp4"), ValueError,
        r"^padding must be 'same', 'valid' or ints, got 'full'"),
    "same padding with a stride": (
        lambda: FinalizedConv2d(8, 6, 3, stride=2, padding="same", weight="mxfp4"), ValueError,
        r"^padding='same' needs stride 1 \(as nn.Conv2d\), got \(2, 2\)"),
    "zero kernel size": (
        lambda: FinalizedConv2d(8, 6, (3, 0), weight="mxfp4"), ValueError,
        r"^kernel_size must be a positive int"),
    "from_float of a conv into a linear": (
        lambda: _from_float(module=nn.Conv2d(40, 6, 1)), TypeError,
        r"^module must be a torch.nn.Linear, got Conv2d"),
    "from_float of a non-finite weight": (
        lambda: _from_float(module=_nan_weight()), ValueError,
        r"^module.weight must be finite to be packed, got nan at index \(2, 3\)"),
    "from_float of a reflect-padded conv": (
        lambda: FinalizedConv2d.from_float(nn.Conv2d(8, 6, 3, padding=1, padding_mode="reflect"),
                                           "mxfp4"), ValueError,
        r"^module.padding_mode must be 'zeros', got 'reflect'"),
    "weight scale of the wrong length": (
        lambda: _from_float(weight_scale=torch.ones(5)), ValueError,
        r"^weight_scale must have shape \(6,\), got \(5,\)"),
    "negative weight scale": (
        lambda: _from_float(weight_scale=-torch.ones(6)), ValueError,
        r"^weight_scale must be finite and non-negative"),
    "weight scale for a rows format": (
        lambda: _from_float("mxfp4", None, weight_scale=torch.ones(6)), ValueError,
        r"^weight_scale: only weight='fp8' or 'int8' takes a per-channel scale"),
    "global amax for a format without one": (
        lambda: _from_float("mxfp8", None, global_amax=torch.tensor(1.0)), ValueError,
        r"^global_amax: only weight='nvfp4' takes it"),
    "static fp8 without its input scale": (
        lambda: _from_float("fp8", "fp8_static"), ValueError,
        r"^input_scale is required for activation='fp8_static'"),
    "an input scale for dynamic activations": (
        lambda: _from_float(input_scale=torch.tensor(1.0)), ValueError,
        r"^input_scale: activation='fp8_dynamic' takes none"),
    "input scale of the wrong dtype": (
        lambda: _from_float("fp8", "fp8_static", input_scale=torch.tensor(1.0).double()),
        TypeError, r"^input_scale must be float32, got float64"),
    "input scale not a tensor": (
        lambda: _from_float("fp8", "fp8_static", input_scale=0.5), TypeError,
        r"^input_scale must be a torch.Tensor, got float"),
    "zero point out of int8's range": (
        lambda: _from_float("int8", "int8_affine", input_scale=torch.tensor(0.1),
                            input_zero_point=200), ValueError,
        r"^input_zero_point must be in \[-128, 127\], got 200"),
    "int8 weights without a zero point": (
        lambda: _from_float("int8", "int8_affine", input_scale=torch.tensor(0.1)), ValueError,
        r"^input_zero_point is required for activation='int8_affine'"),
    "packed weights of another format": (
        lambda: _load_packed(packing.pack_mxfp8(torch.randn(6, 40))), TypeError,
        r"^packed must be a PackedMXFP4 for weight='mxfp4', got PackedMXFP8"),
    "packed weights of another width": (
        lambda: _load_packed(_mxfp4(torch.randn(6, 38))), ValueError,
        r"^packed.in_features must be 40 for this layer, got 38"),
    "packed codes of the wrong dtype": (
        lambda: _load_packed(_mxfp4()._replace(codes=_mxfp4().codes.to(torch.int8))),
        ValueError, r"^packed.codes must be uint8 of shape \(6, 20\), got int8 of shape \(6, 20\)"),
    "packed scales of the wrong shape": (
        lambda: _load_packed(_mxfp4()._replace(scale=_mxfp4().scale[:5])), ValueError,
        r"^packed.scale must be uint8 of shape \(6, 2\), got uint8 of shape \(5, 2\)"),
    "a bias for a layer built without one": (
        lambda: FinalizedLinear(40, 6, False, weight="mxfp4").load_packed(_mxfp4(),
                                                                          torch.zeros(6)),
        ValueError, r"^bias: this layer was built with bias=False, got a tensor"),
    "bias of the wrong length": (
        lambda: _linear().load_packed(_mxfp4(), torch.zeros(7)), ValueError,
        r"^bias must have shape \(6,\), got \(7,\)"),
    "a checkpoint's codes in another dtype": (
        lambda: _state_dict_with("codes", torch.zeros(6, 20, dtype=torch.int32)), RuntimeError,
        r"codes must be uint8, got int32"),
    "an integer input": (
        lambda: _forward(torch.zeros(2, 40, dtype=torch.int32)), TypeError,
        r"^x must be float32, float16 or bfloat16, got int32"),
    "an input of the wrong width": (
        lambda: _forward(torch.zeros(2, 39)), ValueError,
        r"^x must have shape \(\.\.\., in_features=40\), got \(2, 39\)"),
    "a 2-D input to a convolution": (
        lambda: FinalizedConv2d(8, 6, 3, weight="mxfp4")(torch.zeros(8, 5)), ValueError,
        r"^x must have shape \(N, in_channels=8, H, W\) or \(in_channels, H, W\), got \(8, 5\)"),
}


@pytest.mark.parametrize("case", ERRORS)
def test_bad_input_raises_an_error_naming_the_argument(case):
    call, error, message = ERRORS[case]
    with pytest.raises(error, match=message):
        call()

"""Which finalized layers hand their forward to the fused FP8 linear, and with what: a spy stands
in for ``fp8_linear`` (on CUDA it engages only where its measured policy says it wins, and its
numbers are checked in ``tests/kernels/quant/fp8_linear_checks.py`` and the conformance cells)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from libreyolo.nn.finalized import FinalizedConv2d, FinalizedLinear, modules


@pytest.fixture
def spy(monkeypatch):
    calls = []

    def fp8_linear(rows, weight, weight_scale, bias=None, *, input_scale=None):
        calls.append((rows, weight, weight_scale, bias, input_scale))
        return torch.full((*rows.shape[:-1], weight.shape[0]), 7.0)

    monkeypatch.setattr(modules, "_fp8_linear", lambda: fp8_linear)
    return calls


def _scale():
    return torch.tensor(0.05)


def test_a_linear_passes_its_rows_codes_and_scales(spy):
    layer = FinalizedLinear.from_float(nn.Linear(32, 16), "fp8", "fp8_static",
                                       input_scale=_scale())
    x = torch.randn(2, 3, 32)
    out = layer._fused(x)
    (rows, weight, weight_scale, bias, input_scale), = spy
    assert rows is x and weight is layer.codes and weight_scale is layer.scale
    assert bias is layer.bias and input_scale is layer.input_scale
    assert out.shape == (2, 3, 16) and bool((out == 7).all())


def test_dynamic_activations_pass_no_input_scale(spy):
    layer = FinalizedLinear.from_float(nn.Linear(32, 16), "fp8", "fp8_dynamic")
    layer._fused(torch.randn(4, 32))
    assert spy[0][4] is None


def test_a_1x1_convolution_runs_on_each_pixels_channels(spy):
    layer = FinalizedConv2d.from_float(nn.Conv2d(8, 4, 1), "fp8", "fp8_dynamic")
    x = torch.randn(2, 8, 5, 6)
    out = layer._fused(x)
    rows, weight = spy[0][:2]
    assert torch.equal(rows, x.permute(0, 2, 3, 1)) and weight.shape == (4, 8)
    assert weight.data_ptr() == layer.codes.data_ptr()
    assert out.shape == (2, 4, 5, 6)
    layer._fused(x)
    assert spy[1][1] is weight, "fp8_linear keeps its padded weight per weight object"


@pytest.mark.parametrize("geometry", [dict(kernel_size=3, padding=1), dict(kernel_size=1, stride=2),
                                      dict(kernel_size=1, groups=2)],
                         ids=["3x3", "stride 2", "grouped"])
def test_other_convolutions_dequantize_once_instead(spy, geometry):
    layer = FinalizedConv2d.from_float(nn.Conv2d(8, 4, **geometry), "fp8", "fp8_dynamic")
    assert layer._fused(torch.randn(1, 8, 6, 6)) is None and spy == []


def test_other_weight_formats_never_ask(spy):
    layer = FinalizedLinear.from_float(nn.Linear(64, 16), "mxfp8")
    assert layer._fused(torch.randn(2, 64)) is None and spy == []

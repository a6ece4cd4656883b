"""A prepared (fake-quantized, calibrated) model exports with the reference math.

``torch.export`` holds ATen ops only and replays the eager bits. Both ONNX exporters write
standard ONNX ops (no Q/DQ: the graph is the references' arithmetic, docs/quantization.md,
"Quantizing a model") and onnxruntime's output is within the bound of a reordered float32
accumulation of one quantized layer: the quantized input and weight are exact, and two float32
sums of the same ``n`` products (``n`` counting the bias) differ by at most
``2 * gamma_n * sum |x_i w_i|``, ``gamma_n = n u / (1 - n u)``, ``u = 2^-24`` (Higham, eq. 3.5;
tests/nn/test_finalized_export.py derives the same bound for the finalized layers). The bound is
per layer: in a deeper model a reordered sum can move a downstream input across a rounding
boundary of the next quantizer, so the ONNX checks are on single layers, the torch.export ones
also on the whole ``Mixed`` model.
"""

from __future__ import annotations

import onnx
import onnxruntime
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from libreyolo.nn.quantized import calibrate, prepare

from .quantized_cases import RECIPES_32, assert_same_bits, inputs, prepared

pytestmark = pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning",
                                        "ignore::DeprecationWarning", "ignore::UserWarning")

KINDS = ("linear", "conv")
ALL = [pytest.param(r, k, id=f"{r}-{k}") for r in RECIPES_32 for k in KINDS]
# the dynamo exporter is the slow one: each recipe once, on alternating layer kinds
ONCE = [pytest.param(r, KINDS[i % 2], id=f"{r}-{KINDS[i % 2]}")
        for i, r in enumerate(RECIPES_32)]


def _single(recipe: str, kind: str):
    """A one-layer model, prepared and calibrated, and an input for it."""
    torch.manual_seed(0)
    if kind == "linear":
        layer, shape = nn.Linear(64, 24), (2, 5, 64)
    else:
        layer, shape = nn.Conv2d(64, 24, 3, stride=2, padding=1), (2, 64, 7, 6)
    with torch.no_grad():
        layer.weight.mul_(torch.exp2(torch.randint(-3, 3, layer.weight.shape).float()))
    model = nn.Sequential(layer).eval()
    prepare(model, RECIPES_32[recipe])
    calibrate(model, inputs(2, seed=4, shape=shape), progress=False)
    return model, lambda seed: inputs(1, seed=seed, shape=shape)[0]


def _eager(model, x):
    with torch.no_grad():
        return model(x)


def _aten_only(program):
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    return all(t.startswith("aten.") for t in targets - {"<built-in function getitem>"}), targets


@pytest.mark.parametrize("recipe", RECIPES_32)
def test_torch_export_of_a_prepared_model_replays_the_eager_bits(recipe):
    model = prepared(recipe)
    program = torch.export.export(model, (inputs(1, seed=2)[0],))
    ok, targets = _aten_only(program)
    assert ok, targets
    fresh = inputs(1, seed=3)[0]
    with torch.no_grad():
        assert_same_bits(program.module()(fresh), _eager(model, fresh))


def _bound(model, x):
    """2 gamma_n sum |x_i w_i| (+ n subnormal steps) per output of the model's one layer."""
    layer = model[0]
    with torch.no_grad():
        xq, wq = layer._quantize_input(x).abs(), layer.fake_quant_weight().abs()
        if isinstance(layer, nn.Linear):
            magnitude, n = F.linear(xq, wq, layer.bias.abs()), layer.in_features + 1
        else:
            magnitude = F.conv2d(xq, wq, layer.bias.abs(), layer.stride, layer.padding)
            n = layer.in_channels * layer.kernel_size[0] * layer.kernel_size[1] + 1
    u = 2.0**-24
    gamma = n * u / (1 - n * u)
    return 2 * gamma * magnitude + n * 2.0**-149


def _onnx_within_bound(recipe, kind, tmp_path, dynamo):
    model, x = _single(recipe, kind)
    path = tmp_path / "prepared.onnx"
    with torch.no_grad():
        torch.onnx.export(model, (x(2),), str(path), dynamo=dynamo, input_names=["x"],
                          output_names=["y"])
    graph = onnx.load(str(path)).graph
    assert {node.domain for node in graph.node} <= {"", "ai.onnx"}
    ops = {node.op_type for node in graph.node}
    assert not ops & {"QuantizeLinear", "DequantizeLinear"}, ops  # the references' arithmetic
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    fresh = x(3)
    (out,) = session.run(None, {"x": fresh.numpy()})
    error = (torch.from_numpy(out) - _eager(model, fresh)).abs()
    bound = _bound(model, fresh)
    assert (error <= bound).all(), f"worst excess {(error - bound).max().item()}"


@pytest.mark.parametrize("recipe, kind", ALL)
def test_torchscript_onnx_runs_in_onnxruntime_within_the_accumulation_bound(recipe, kind,
                                                                            tmp_path):
    _onnx_within_bound(recipe, kind, tmp_path, dynamo=False)


@pytest.mark.parametrize("recipe, kind", ONCE)
def test_dynamo_onnx_runs_in_onnxruntime_within_the_accumulation_bound(recipe, kind, tmp_path):
    _onnx_within_bound(recipe, kind, tmp_path, dynamo=True)


def test_the_bound_catches_one_wrong_weight_code(tmp_path):
    """Negative control: the bound is tight enough to see one weight code off by one step."""
    model, x = _single("w8a8_int8", "linear")
    fresh = x(3)
    expected = _eager(model, fresh)
    with torch.no_grad():
        wq = model[0].fake_quant_weight()
        step = wq[0].abs().max() / 127
        wrong = wq.clone()
        wrong[0, 0] += step
        out = F.linear(model[0]._quantize_input(fresh), wrong, model[0].bias)
    assert ((out - expected).abs() > _bound(model, fresh)).any()

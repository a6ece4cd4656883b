"""Captured graphs of a finalized layer hold only the portable math, and run.

``torch.jit.trace`` and ``torch.export`` replay the eager portable forward bit for bit (the same
ops; the exponent read by ``floor_log2`` is an exact reformulation). ONNX graphs (both exporters)
run in onnxruntime within the bound of a reordered float32 accumulation: the quantized input and
the dequantized weight are exact, and two float32 sums of the same ``n`` products, in any order,
differ by at most ``2 * gamma_n * sum |x_i w_i|`` with ``gamma_n = n u / (1 - n u)``, ``u = 2^-24``
(Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., eq. 3.5), ``n`` counting the
bias. A wrong code anywhere (a quantization step of an input or a weight) is far outside it.

Every format is captured by every capture once at least: ``torch.jit.trace`` and the TorchScript
ONNX exporter on both layer kinds, ``torch.export`` on one, the dynamo ONNX exporter (the slow
one: 4-15 s a graph here) each weight format once, on alternating layer kinds.
"""

from __future__ import annotations

import onnx
import onnxruntime
import pytest
import torch

from libreyolo.nn.finalized import WEIGHT_FORMATS

from .finalized_cases import FORMATS, LAYERS, finalize, magnitude, reduction_length
from .test_finalized_forward import assert_same_bits

pytestmark = pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning",
                                        "ignore::DeprecationWarning", "ignore::UserWarning")

EXPORTED_LAYERS = ["linear", "conv3x3-stride2-nobias"]
ALL = [pytest.param(f, layer, id=f"{f}-{layer}") for f in FORMATS for layer in EXPORTED_LAYERS]
# each format once, on alternating layer kinds, for the slower captures
ONCE = [pytest.param(f, EXPORTED_LAYERS[i % 2], id=f"{f}-{EXPORTED_LAYERS[i % 2]}")
        for i, f in enumerate(FORMATS)]
DYNAMO = [pytest.param(f, layer, id=f"{f}-{layer}") for f, layer in (
    ("fp8-dynamic", "linear"), ("int8-affine", "conv3x3-stride2-nobias"),
    ("int4-g16", "linear"), ("nvfp4-global-dynamic", "conv3x3-stride2-nobias"),
    ("mxfp4-dynamic", "linear"), ("mxfp8-dynamic", "conv3x3-stride2-nobias"))]


def _eager(finalized, x):
    with torch.no_grad():
        return finalized(x)


@pytest.mark.parametrize("fmt, layer", ALL)
def test_jit_trace_holds_aten_ops_only_and_replays_the_eager_bits(fmt, layer):
    _, finalized = finalize(FORMATS[fmt], LAYERS[layer])
    with torch.no_grad():
        traced = torch.jit.trace(finalized, (LAYERS[layer].x(),), check_trace=False)
    kinds = {node.kind() for node in traced.inlined_graph.nodes()}
    assert all(k.startswith(("aten::", "prim::")) for k in kinds), kinds
    assert "prim::PythonOp" not in kinds
    fresh = LAYERS[layer].x(seed=2)
    with torch.no_grad():
        assert_same_bits(traced(fresh), _eager(finalized, fresh))


@pytest.mark.parametrize("fmt, layer", ONCE)
def test_torch_export_holds_aten_ops_only_and_replays_the_eager_bits(fmt, layer):
    _, finalized = finalize(FORMATS[fmt], LAYERS[layer])
    program = torch.export.export(finalized, (LAYERS[layer].x(),))
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert all(t.startswith("aten.") for t in targets - {"<built-in function getitem>"}), targets
    fresh = LAYERS[layer].x(seed=2)
    with torch.no_grad():
        assert_same_bits(program.module()(fresh), _eager(finalized, fresh))


ONNX_DTYPES = {torch.float8_e4m3fn: onnx.TensorProto.FLOAT8E4M3FN,
               torch.float32: onnx.TensorProto.FLOAT, torch.uint8: onnx.TensorProto.UINT8,
               torch.int8: onnx.TensorProto.INT8}


def _onnx_matches_eager_within_the_accumulation_bound(fmt, layer, tmp_path, dynamo, packed):
    """``packed``: export with the exporter's constant folding off, so the file keeps the packed
    buffers and onnxruntime runs the unpack math; on (the default), the exporter folds the
    dequantized weight into a dense float initializer."""
    spec, geometry = FORMATS[fmt], LAYERS[layer]
    float_layer, finalized = finalize(spec, geometry)
    path = tmp_path / "finalized.onnx"
    folding = {"optimize": not packed} if dynamo else {"do_constant_folding": not packed}
    with torch.no_grad():
        torch.onnx.export(finalized, (geometry.x(),), str(path), dynamo=dynamo,
                          input_names=["x"], output_names=["y"], **folding)
    model = onnx.load(str(path))
    assert {node.domain for node in model.graph.node} <= {"", "ai.onnx"}
    if packed:
        initializers = {t.name: t.data_type for t in model.graph.initializer}
        for name in WEIGHT_FORMATS[spec.weight].fields:
            assert initializers.get(name) == ONNX_DTYPES[getattr(finalized, name).dtype], name
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    fresh = geometry.x(seed=2)
    (out,) = session.run(None, {"x": fresh.numpy()})
    expected = _eager(finalized, fresh)
    n, u = reduction_length(geometry), 2.0**-24
    gamma = n * u / (1 - n * u)
    bound = 2 * gamma * magnitude(spec, geometry, float_layer, fresh) + n * 2.0**-149
    error = (torch.from_numpy(out) - expected).abs()
    assert (error <= bound).all(), f"worst excess {(error - bound).max().item()}"


@pytest.mark.parametrize("packed", [True, False], ids=["packed", "folded"])
@pytest.mark.parametrize("fmt, layer", ALL)
def test_torchscript_onnx_runs_in_onnxruntime_within_the_accumulation_bound(fmt, layer, packed,
                                                                            tmp_path):
    _onnx_matches_eager_within_the_accumulation_bound(fmt, layer, tmp_path, False, packed)


@pytest.mark.parametrize("fmt, layer", DYNAMO)
def test_dynamo_onnx_runs_in_onnxruntime_within_the_accumulation_bound(fmt, layer, tmp_path):
    _onnx_matches_eager_within_the_accumulation_bound(fmt, layer, tmp_path, True, packed=True)

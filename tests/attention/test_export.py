"""Exported and traced graphs of MSDeformAttn hold only portable ops and match eager.

A recording implementation is registered as eligible throughout: if a capture consulted the slot,
the graph would bake in its marker output (or call it), so matching the portable eager output
shows the capture took the portable path. A missing exporter fails these tests; it never skips.
"""

import onnx
import onnxruntime
import pytest
import torch

from .static_shapes import WithStaticShapes, example_inputs

# Ops an ONNX graph of the portable core may contain: projections, softmax, the bilinear
# sampling and the reshapes around them, and the test that moves non-finite locations outside
# (isfinite: IsInf, IsNaN and logic). Anything else (a custom domain, a PythonOp) fails.
PORTABLE_ONNX_OPS = {
    "Add", "Cast", "Concat", "Constant", "ConstantOfShape", "Div", "Expand", "Flatten", "Gather",
    "Gemm", "GridSample", "MatMul", "Mul", "Reshape", "ReduceSum", "Shape", "Slice", "Softmax",
    "Split", "Squeeze", "Sub", "Transpose", "Unsqueeze", "Identity", "Where", "Equal",
    "IsInf", "IsNaN", "Not", "Or", "And",
}


@pytest.fixture
def model(fake_impl):
    torch.manual_seed(0)
    return WithStaticShapes().eval()


@pytest.fixture
def portable_eager(fake_impl):
    """The model's eager output on the portable path (the recording implementation declines)."""

    def run(model, inputs):
        fake_impl.decline = "computing the portable eager output"
        try:
            with torch.no_grad():
                return model(*inputs)
        finally:
            fake_impl.decline = None

    return run


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_onnx_export_is_portable_and_matches_eager(model, fake_impl, portable_eager, tmp_path,
                                                  dynamo):
    path = tmp_path / "msda.onnx"
    torch.onnx.export(model, example_inputs(), str(path), dynamo=dynamo,
                      input_names=["query", "reference_points", "value"], output_names=["out"])
    graph = onnx.load(str(path)).graph
    ops = {node.op_type for node in graph.node}
    domains = {node.domain for node in graph.node} - {"", "ai.onnx"}
    assert "GridSample" in ops
    assert ops <= PORTABLE_ONNX_OPS, ops - PORTABLE_ONNX_OPS
    assert not domains
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    fresh = example_inputs(seed=1)
    (out,) = session.run(None, {name: t.numpy() for name, t in
                                zip(["query", "reference_points", "value"], fresh, strict=True)})
    torch.testing.assert_close(torch.from_numpy(out), portable_eager(model, fresh),
                               rtol=1e-4, atol=1e-5)
    assert fake_impl.calls == []


def test_jit_trace_is_portable_and_matches_eager(model, fake_impl, portable_eager):
    traced = torch.jit.trace(model, example_inputs(), check_trace=False)
    kinds = {node.kind() for node in traced.inlined_graph.nodes()}
    assert "aten::grid_sampler" in kinds
    assert not {k for k in kinds if not k.startswith(("aten::", "prim::"))}
    assert "prim::PythonOp" not in kinds
    fresh = example_inputs(seed=1)
    torch.testing.assert_close(traced(*fresh), portable_eager(model, fresh))
    assert fake_impl.calls == []


def test_torch_export_is_portable_and_matches_eager(model, fake_impl, portable_eager):
    program = torch.export.export(model, example_inputs())
    targets = {str(node.target) for node in program.graph.nodes if node.op == "call_function"}
    assert any("grid_sampler" in t for t in targets), targets
    # getitem unpacks split's outputs; everything else is an ATen op
    assert all(t.startswith("aten.") for t in targets - {"<built-in function getitem>"}), targets
    fresh = example_inputs(seed=1)
    torch.testing.assert_close(program.module()(*fresh), portable_eager(model, fresh))
    assert fake_impl.calls == []

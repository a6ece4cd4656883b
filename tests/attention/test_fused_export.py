"""The export gate: ONNX export (both exporters) and ``torch.jit.trace`` capture the manual
equation whatever the flag says; ``torch.compile`` and ``torch.export`` keep the fused path.

Every module here has ``fused_attn`` on. A missing exporter fails these tests; it never skips.
"""

from __future__ import annotations

import onnx
import onnxruntime
import pytest
import torch
from torch import nn

from conformance.reporting.attention_evidence import limited, prepared
from libreyolo.kernels.attention import families, manual_attention_required
from libreyolo.nn import attention as nn_attention

TRACE_SITES = [site for site in families.sites() if site.module != "spatial_reduction"]
# one site per kind of additive term: bias + shifted-window mask, two added masks, a -inf band
ONNX_SITES = [families.family("swin").sites[1], families.family("owlv2").sites[1],
              families.family("ppocr").sites[0]]
SDPA_KINDS = ("aten::scaled_dot_product_attention",)


class Positional(nn.Module):
    """Calls ``module(*args, **kwargs)`` from positional tensors, as exporters want them."""

    def __init__(self, module: nn.Module, args, kwargs):
        super().__init__()
        self.module = module
        self.n_args = len(args)
        self.names = list(kwargs)

    def forward(self, *tensors):
        args, values = tensors[: self.n_args], tensors[self.n_args:]
        return self.module(*args, **dict(zip(self.names, values, strict=True)))


def fused_model(site):
    """(wrapped module with the flag on, its inputs, its eager manual output)."""
    module, args, kwargs = prepared(limited(site), dtype=torch.float32, device="cpu")
    inputs = tuple(args) + tuple(kwargs.values())
    model = Positional(module, args, kwargs).eval()
    with torch.no_grad():
        manual = model(*inputs)
    module.fused_attn = True
    return model, inputs, manual


def traced_kinds(model, inputs) -> set[str]:
    traced = torch.jit.trace(model, inputs, check_trace=False)
    return traced, {node.kind() for node in traced.inlined_graph.nodes()}


def onnx_ops(model, inputs, path, dynamo: bool) -> list[str]:
    torch.onnx.export(model, inputs, str(path), dynamo=dynamo)
    return [node.op_type for node in onnx.load(str(path)).graph.node]


GATE_SEEN: list[bool] = []


class GateSpy(nn.Module):
    """Records what the gate says each time its forward runs. (A module-level list: exporters
    may run the forward on a copy of the module, whose attributes the test never sees.)"""

    def forward(self, x):
        GATE_SEEN.append(manual_attention_required())
        return x + 1


def export_onnx(dynamo):
    return lambda model, x, tmp: torch.onnx.export(model, (x,), str(tmp / "spy.onnx"),
                                                   dynamo=dynamo)


CAPTURES = {
    "eager": (lambda model, x, tmp: model(x), False),
    "jit_trace": (lambda model, x, tmp: torch.jit.trace(model, (x,), check_trace=False), True),
    "onnx_torchscript": (export_onnx(False), True),
    "onnx_dynamo": (export_onnx(True), True),
    "torch_export": (lambda model, x, tmp: torch.export.export(model, (x,)), False),
    "torch_compile": (lambda model, x, tmp: torch.compile(model, backend="eager")(x), False),
}


@pytest.mark.parametrize("capture", CAPTURES)
def test_manual_attention_is_required_exactly_under_onnx_export_and_jit_trace(capture, tmp_path):
    run, required = CAPTURES[capture]
    GATE_SEEN.clear()
    run(GateSpy(), torch.zeros(2), tmp_path)
    assert GATE_SEEN and set(GATE_SEEN) == {required}


@pytest.mark.parametrize("site", TRACE_SITES, ids=lambda s: s.id)
def test_jit_trace_holds_no_sdpa_and_equals_the_manual_math_exactly(site):
    model, inputs, manual = fused_model(site)
    traced, kinds = traced_kinds(model, inputs)
    assert not kinds & set(SDPA_KINDS), kinds
    assert not {k for k in kinds if not k.startswith(("aten::", "prim::"))}
    with torch.no_grad():
        assert torch.equal(traced(*inputs), manual)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("site", ONNX_SITES, ids=lambda s: s.id)
def test_onnx_export_holds_the_manual_graph_and_runs_in_onnxruntime(site, dynamo, tmp_path):
    model, inputs, manual = fused_model(site)
    fused_ops = onnx_ops(model, inputs, tmp_path / "fused.onnx", dynamo)
    model.module.fused_attn = False
    manual_ops = onnx_ops(model, inputs, tmp_path / "manual.onnx", dynamo)
    assert fused_ops == manual_ops
    assert "Attention" not in fused_ops
    graph = onnx.load(str(tmp_path / "fused.onnx")).graph
    assert {node.domain for node in graph.node} <= {"", "ai.onnx"}
    session = onnxruntime.InferenceSession(str(tmp_path / "fused.onnx"),
                                           providers=["CPUExecutionProvider"])
    feeds = {arg.name: t.numpy() for arg, t in zip(session.get_inputs(), inputs, strict=True)}
    (out,) = session.run(None, feeds)
    torch.testing.assert_close(torch.from_numpy(out), manual, rtol=1e-4, atol=1e-5)


def test_a_gate_that_ignores_captures_is_caught(monkeypatch, tmp_path):
    """Negative control: with the gate broken open, the traced graph holds SDPA and the ONNX
    graph's operations differ from the manual export's, so the two tests above would fail.

    (The TorchScript exporter here: with the gate open, torch 2.13's dynamo exporter does not
    export this window attention at all; its SDPA decomposition ends in a ``view`` of a
    transposed tensor, "Cannot view a tensor with shape [4, 49, 12, 32] ...".)"""
    site = ONNX_SITES[0]
    model, inputs, _ = fused_model(site)
    model.module.fused_attn = False
    manual_ops = onnx_ops(model, inputs, tmp_path / "manual.onnx", False)
    model.module.fused_attn = True
    monkeypatch.setattr(nn_attention, "manual_attention_required", lambda: False)
    _, kinds = traced_kinds(model, inputs)
    assert kinds & set(SDPA_KINDS)
    assert onnx_ops(model, inputs, tmp_path / "fused.onnx", False) != manual_ops


def _compiled_targets(model, inputs) -> list:
    targets = []

    def backend(gm, example_inputs):
        targets.extend(node.target for node in gm.graph.nodes if node.op == "call_function")
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(model, backend=backend)(*inputs)
    return targets, out


def test_torch_compile_runs_the_fused_path():
    model, inputs, manual = fused_model(ONNX_SITES[0])
    targets, out = _compiled_targets(model, inputs)
    assert torch.nn.functional.scaled_dot_product_attention in targets
    torch.testing.assert_close(out, manual, rtol=1e-4, atol=1e-5)


def test_torch_export_keeps_the_fused_path():
    model, inputs, _ = fused_model(ONNX_SITES[0])
    program = torch.export.export(model, inputs)
    targets = {str(node.target) for node in program.graph.nodes if node.op == "call_function"}
    assert any("scaled_dot_product" in target for target in targets), targets

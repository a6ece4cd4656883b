"""Modules that call slots compile whole (``fullgraph=True``, no graph break) and give their eager
bits: ``MSDeformAttn`` forward and backward, a finalized FP8 linear and MLP stack, and a
fake-quantized linear (weight and activation fake quantization around ``F.linear``) forward and
backward; ``mode="reduce-overhead"`` replays them on CUDA with the same bits. Exports of the same
modules hold the portable math (tests/attention/test_export.py, tests/nn/test_finalized_export.py
and the export test here)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_operators import repeatable
from torch._dynamo.utils import counters

from libreyolo.kernels import ops
from libreyolo.nn.finalized import FinalizedLinear, FinalizedMLP
from libreyolo.nn.ms_deform_attn import MSDeformAttn

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
MODES = ["default"] + (["reduce-overhead"] if torch.cuda.is_available() else [])
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class FakeQuantLinear(torch.nn.Module):
    """The QAT layer's shape: fake-quantized weight (int8 per channel) and activation (FP8
    dynamic per row) around ``F.linear``."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n_out, n_in) * 0.05)
        self.bias = torch.nn.Parameter(torch.randn(n_out) * 0.1)
        self.register_buffer("scale", self.weight.detach().abs().amax(1) / 127)

    def forward(self, x):
        w = ops.fake_quant_int8_per_channel(self.weight, self.scale, 0)
        return F.linear(ops.fake_quant_fp8(x), w, self.bias)


def _msda(device):
    torch.manual_seed(0)
    module = MSDeformAttn(d_model=64, n_levels=2, n_heads=4, n_points=3).to(device)
    shapes = torch.tensor([[6, 8], [3, 4]], device=device)
    inputs = (torch.randn(2, 10, 64, device=device), torch.rand(2, 10, 2, 2, device=device),
              torch.randn(2, 60, 64, device=device), shapes)
    return module, inputs


def _fake_quant_linear(device):
    torch.manual_seed(0)
    return FakeQuantLinear(96, 48).to(device), (torch.randn(2, 7, 96, device=device),)


def _finalized_stack(device):
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    layers = [torch.nn.Linear(128, 256), torch.nn.Linear(256, 128), torch.nn.Linear(128, 64)]
    fc1, fc2, head = (FinalizedLinear.from_float(layer, "fp8", "fp8_dynamic").to(device)
                      for layer in layers)
    stack = torch.nn.Sequential(FinalizedMLP(fc1, fc2), head)
    return stack, (torch.randn(4, 33, 128, device=device, dtype=dtype),)


class _WithPairs(torch.nn.Module):
    """``MSDeformAttn`` with its level sizes bound as pairs (traced graphs take tensors only)."""

    def __init__(self, module, pairs):
        super().__init__()
        self.module, self.pairs = module, pairs

    def forward(self, query, reference_points, value):
        return self.module(query, reference_points, value, self.pairs)


MODULES = {"msda": _msda, "fake-quant-linear": _fake_quant_linear,
           "finalized-stack": _finalized_stack}


def _bits(t):
    view = {2: torch.int16, 4: torch.int32}[t.element_size()]
    return t.detach().contiguous().view(view).cpu()


def _step(module, inputs, fn, backward: bool):
    """Output bits and, with ``backward``, every parameter's and floating input's gradient."""
    module.zero_grad(set_to_none=True)
    inputs = tuple(t.detach().clone().requires_grad_(backward and t.is_floating_point())
                   for t in inputs)
    out = fn(*inputs)
    results = [_bits(out)]
    if backward:
        out.float().square().sum().backward()
        results += [_bits(p.grad) for p in module.parameters() if p.grad is not None]
        results += [_bits(t.grad) for t in inputs if t.grad is not None]
    return results


BACKWARD = {"msda": True, "fake-quant-linear": True, "finalized-stack": False}  # inference


def _compare(name, device, mode, backend, same):
    module, inputs = MODULES[name](device)
    backward = BACKWARD[name] and mode != "reduce-overhead"  # a replay: the inference forward
    with torch.enable_grad() if backward else torch.no_grad():
        eager = _step(module, inputs, module, backward)
        torch._dynamo.reset()
        counters.clear()
        compiled_module = torch.compile(module, fullgraph=True, mode=mode, backend=backend)
        for _ in range(3 if mode == "reduce-overhead" else 1):  # record, then replay
            compiled = _step(module, inputs, compiled_module, backward)
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert len(compiled) == len(eager)
    for got, want in zip(compiled, eager, strict=True):
        same(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", MODULES)
def test_a_module_compiles_whole_and_its_slots_give_the_eager_bits(name, device):
    """With ``aot_eager`` the graph's other operations run as ATen runs them eagerly, so any
    difference would be the slots' operators: there is none, forward or backward."""
    with repeatable("ms_deform_attn" if name == "msda" else name, device):
        _compare(name, device, None, "aot_eager", lambda got, want: torch.equal(got, want) or
                 pytest.fail(f"{name}: compiled bits differ from eager"))


def _close(got, want):
    """Inductor generates the graph's other operations (linears, softmax), which may round
    differently from eager ATen: within float32/bfloat16 rounding of the eager result."""
    dtype = {4: torch.float32, 2: torch.bfloat16}[got.element_size()]
    got, want = got.view(dtype).float(), want.view(dtype).float()
    tolerance = 2e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got, want, rtol=tolerance, atol=tolerance * want.abs().max())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", MODULES)
def test_a_module_compiles_whole_with_inductor(name, device, mode):
    """In default mode forward and backward; ``reduce-overhead`` records a CUDA graph of the
    inference forward and replays it (its recording hands the graph fresh copies of the inputs,
    so ``MSDeformAttn``'s level sizes arrive as a tensor never read on the host)."""
    _compare(name, device, mode, "inductor", _close)


@pytest.mark.parametrize("name", MODULES)
def test_an_export_of_the_module_holds_no_libreyolo_operator(name):
    module, inputs = MODULES[name]("cpu")
    if name == "msda":  # level sizes as pairs: static in an exported graph (docs/ms_deform_attn.md)
        module, inputs = _WithPairs(module, inputs[3].tolist()), inputs[:3]
    program = torch.export.export(module, inputs)
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert targets and not any(t.startswith("libreyolo.") for t in targets), targets
    with torch.no_grad():
        traced = torch.jit.trace(module, inputs, check_trace=False)
    kinds = {node.kind() for node in traced.inlined_graph.nodes()}
    assert not any(k.startswith("libreyolo::") for k in kinds), kinds

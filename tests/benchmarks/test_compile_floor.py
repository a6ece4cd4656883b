"""bench_compile's per-slot floor (``benchmarks/bench/compile_floor.py``) is the slot's own
implementation in a bare ``triton_op``: on CPU, a torch-ops stand-in implementation shows the op
is well formed, plans inside the traced body with the kernels traced, and differentiates through
the implementation's own backward; the interpreter (``compile_floor_checks.py``) shows it runs
the in-tree kernels with their plan; and bench_compile without CUDA says so instead of failing."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks.bench import bench_compile
from benchmarks.bench.compile_floor import floor_op
from libreyolo.capture import kernels_traced
from libreyolo.kernels import registry
from libreyolo.kernels.prepared import Prepared

SLOT = "fake_quant_int8_per_channel"  # (Tensor x, Tensor scale, int axis=0), differentiable x


class StandInPlan(Prepared):
    __slots__ = ("shape",)

    def __init__(self, shape):
        self.shape = shape


#: What the stand-in's ``accepts`` saw: (the input's type, whether kernels were being traced).
SEEN: list[tuple[type, bool]] = []


def _accepts(x, scale, axis=0):
    SEEN.append((type(x), kernels_traced()))
    return StandInPlan([-1 if d == axis else 1 for d in range(x.dim())])


def _scaled(x, scale, axis=0, *, prepared):
    if not kernels_traced():  # a kernel's launch would not become a wrap_triton node
        raise AssertionError("the floor ran its implementation outside tracing_kernels()")
    return x * scale.view(prepared.shape)


def _scaled_backward(grad, x, scale, axis=0, *, prepared):
    return (grad * scale.view(prepared.shape),)


#: One for the process: an op name is defined once, and ``floor_op`` keeps it per implementation.
STAND_IN = registry.Implementation(SLOT, "stand_in", _scaled, accepts=_accepts,
                                   backward=_scaled_backward, traceable=True)


def inputs():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(6, 5, generator=gen, requires_grad=True), torch.rand(6, generator=gen) + 1


def test_the_floor_op_is_a_well_formed_operator():
    x, scale = inputs()
    torch.library.opcheck(floor_op(SLOT, STAND_IN), (x, scale, 0))


def test_compiled_the_floor_plans_in_the_trace_and_takes_the_implementations_backward():
    """Through AOTAutograd without inductor (inductor's on-disk caches could hand back a graph
    of an earlier version of the op)."""
    x, scale = inputs()
    SEEN.clear()
    out = torch.compile(floor_op(SLOT, STAND_IN), fullgraph=True, backend="aot_eager")(x, scale)
    out.backward(torch.ones_like(out))
    want = scale.view(-1, 1).expand_as(x)
    assert torch.equal(out, x.detach() * want) and torch.equal(x.grad, want)
    traced = [kind for kind, tracing in SEEN if tracing and kind is not torch.Tensor]
    assert traced, f"no plan was made on traced tensors with the kernels traced: {SEEN}"


def test_the_floor_refuses_an_implementation_a_graph_cannot_trace():
    opaque = registry.Implementation(SLOT, "opaque", _scaled, accepts=_accepts)
    with pytest.raises(ValueError, match="'opaque' of fake_quant_int8_per_channel is not "
                                         "traceable"):
        floor_op(SLOT, opaque)


@pytest.mark.interpreter
def test_the_floor_runs_the_in_tree_kernels_the_slot_runs(run_under_interpreter):
    """The Triton interpreter, in a child process (``compile_floor_checks.py``)."""
    run_under_interpreter("tests/benchmarks/compile_floor_checks.py")


def test_bench_compile_without_cuda_writes_why_it_measured_nothing(tmp_path, monkeypatch,
                                                                   capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "compile.json"
    bench_compile.main([str(out)])
    written = json.loads(out.read_text())
    assert written["skipped"].startswith("no CUDA device")
    assert "skipped, no CUDA device" in capsys.readouterr().err

"""bench_compile's floor rows measure an op that is what a slot's operator is (opaque to inductor,
with a fake kernel and a registered autograd) and does almost nothing: it must be that op, or the
floor would not be the floor of a slot call."""

import torch

from benchmarks.bench.bench_compile import floor_op


def test_the_floor_op_is_a_well_formed_custom_op():
    torch.library.opcheck(floor_op, (torch.randn(16, requires_grad=True),))


def test_the_floor_op_compiles_whole_and_negates_forward_and_backward():
    """Through AOTAutograd without inductor: inductor's on-disk caches could hand back a graph
    compiled from an earlier version of the op's autograd."""
    x = torch.randn(16, requires_grad=True)
    out = torch.compile(floor_op, fullgraph=True, backend="aot_eager")(x)
    out.backward(torch.ones_like(out))
    assert torch.equal(out, -x) and torch.equal(x.grad, -torch.ones_like(x))

"""The per-slot floor (``benchmarks/bench/compile_floor.py``) runs the in-tree kernels a slot call
runs, with their plan: under the Triton interpreter on CPU, the floor of the implementation the
registry chooses gives the slot call's bits, forward and (deformable attention) backward.

``test_compile_floor.py`` runs this file in a child pytest with ``TRITON_INTERPRET=1`` (it must
be set before any kernel module is imported). By hand:

    TRITON_INTERPRET=1 .venv/bin/python -m pytest tests/benchmarks/compile_floor_checks.py
"""

from __future__ import annotations

import pytest
import torch

from tests.interpreter_marks import INTERPRETER_ONLY

pytest.importorskip("triton")
pytestmark = INTERPRETER_ONLY

from benchmarks.bench.compile_floor import floor_op  # noqa: E402
from libreyolo.kernels import ops, registry  # noqa: E402

GEN = torch.Generator().manual_seed(1)
X = (torch.randn(64, 96, generator=GEN) * 3).bfloat16()
#: deformable attention, two levels (4x4, 2x2), 2 heads of 8 channels, 5 queries, 2 points
VALUE = torch.randn(1, 20, 2, 8, generator=GEN)
SHAPES = torch.tensor([[4, 4], [2, 2]])
LOCATIONS = torch.rand(1, 5, 2, 2, 2, 2, generator=GEN)
WEIGHTS = torch.rand(1, 5, 2, 2, 2, generator=GEN).softmax(-1)


def floor_of(slot: str, args: tuple):
    choice = registry.choose(slot, args, {})
    assert choice is not None and choice.impl.name == "triton", choice
    return floor_op(slot, choice.impl)


@pytest.mark.parametrize(("slot", "args"), [
    ("fake_quant_fp8", (X,)),
    ("fake_quant_int8_per_channel", (X, X.float().abs().amax(1) / 127, 0)),
])
def test_the_floor_gives_the_slot_calls_bits(slot, args):
    assert torch.equal(floor_of(slot, args)(*args), getattr(ops, slot)(*args))


def test_the_deformable_attention_floor_gives_the_slot_calls_bits_and_gradients():
    def run(fn):
        leaves = [t.clone().requires_grad_() for t in (VALUE, LOCATIONS, WEIGHTS)]
        out = fn(leaves[0], SHAPES, leaves[1], leaves[2])
        return (out.detach(), *torch.autograd.grad(out, leaves, torch.ones_like(out)))

    floor = floor_of("ms_deform_attn", (VALUE, SHAPES, LOCATIONS, WEIGHTS))
    got, want = run(floor), run(ops.ms_deform_attn)
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))

"""cuda-graph cells judge the forward alone: a bounded contract then compares the output only."""

from __future__ import annotations

import torch

from conformance.catalogue import slot
from conformance.inputs.shapesets import load
from conformance.running import cells, contracts


def test_bounded_forward_only_judgement_compares_the_output_alone():
    spec = slot("ms_deform_attn")
    case = next(c for c in load(spec.shapes) if c.size == "small")
    plan = cells.CellPlan(spec.name, "triton", "cuda-graph", torch.float32, case, "contiguous", 3)
    want = cells.expected(spec, plan)
    assert len(want.out) > 1, "the portable path gives the output and gradients"
    verdict = contracts.Verdict()
    cells._judge(verdict, spec, plan, want.out[0].clone(), [], want, "cpu")
    assert verdict.failed == []
    assert set(verdict.measurements) == {"output"}

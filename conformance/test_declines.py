"""A decline is judged by its cause: the environment (the machine cannot run it) makes a cell
not-applicable; the input, in a case the catalogue holds the implementation to, fails it."""

import pytest
import torch

from conformance.catalogue import slot
from conformance.inputs.shapesets import load
from conformance.running.cells import CellPlan, run_cell
from libreyolo.kernels import register, unregister
from libreyolo.quant.fake_quant import fake_quant_int8_affine

SLOT = "fake_quant_int8_affine"


@pytest.fixture
def plan():
    spec = slot(SLOT)
    case = next(c for c in load(spec.shapes) if c.size == "small")
    yield spec, CellPlan(SLOT, "decliner", "cpu", torch.float32, case, "contiguous", 1)
    unregister(SLOT, "decliner")


def test_an_environment_decline_is_not_applicable(plan, whole_suite):
    spec, cell_plan = plan
    register(SLOT, fake_quant_int8_affine, name="decliner", predicate=lambda: False)
    cell = run_cell(spec, cell_plan)
    assert cell.state == "not-applicable" and "environment check" in cell.reason


def test_an_input_decline_in_a_case_the_implementation_is_held_to_fails(plan, whole_suite):
    spec, cell_plan = plan
    register(SLOT, fake_quant_int8_affine, name="decliner", accepts=lambda *a: "not today")
    cell = run_cell(spec, cell_plan)
    assert cell.state == "fail" and cell.reason == "not today"

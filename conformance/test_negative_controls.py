"""The suite's strength: every negative control is rejected, by the check it names.

Controls run through the public `register` API and the same cells as any implementation
(`conformance/negative/`). The kill rate is printed at the end of the run.
"""

import json
from dataclasses import replace

import pytest
import torch

from conformance.catalogue import CATALOGUE, slot
from conformance.inputs import generators, shapesets
from conformance.inputs.layouts import bits
from conformance.negative import load_controls, parametrize_controls
from conformance.plugin import CONTROL_PROPERTY
from conformance.running.cells import CellPlan, make_inputs, run_cell
from conformance.running.plan import cell_plans

CONTROLS = load_controls()
NARROW = 0.01


def pytest_generate_tests(metafunc):
    parametrize_controls(metafunc, "registered_control", CONTROLS, indirect=True)
    parametrize_controls(metafunc, "control", [c for c in CONTROLS
                                               if CATALOGUE[c.slot].contract.kind == "exact"])


def first_rejection(control, options):
    """The first cell that rejects `control` by its named check, and every other rejection."""
    others = []
    for plan in cell_plans(replace(options, impl=control.name), slots={control.slot}):
        cell = run_cell(slot(control.slot), plan)
        if control.check in cell.failed_checks or (control.check == cell.state == "crash"):
            return cell, others
        if cell.state in ("fail", "crash"):
            others.append(cell)
    return None, others


def test_suite_rejects_control(registered_control, run_options, request, whole_suite):
    control = registered_control
    if run_options.interpreter:
        pytest.skip("negative controls are PyTorch code: the interpreter adds nothing")
    cell, others = first_rejection(control, run_options)
    request.node.user_properties.append((CONTROL_PROPERTY, json.dumps(
        {"name": control.name, "slot": control.slot, "check": control.check,
         "killed": cell is not None, "by": cell.case if cell else None})))
    assert cell is not None, (
        f"{control.name} ({control.slot}) passed the '{control.check}' check on every case: "
        f"{control.why}. Other rejections: {[(c.case, c.failed_checks) for c in others[:3]]}")


def _mismatch_fraction(control) -> float:
    spec = CATALOGUE[control.slot]
    cases = [c for c in shapesets.load(spec.shapes) if c.size in ("small", "medium")]
    wrong = total = 0
    with generators.plain_values():
        for case in cases:
            plan = CellPlan(control.slot, control.name, "cpu", torch.float32, case,
                            "contiguous", seed=1)
            inputs = make_inputs(spec, plan)
            with torch.no_grad():
                expected = _parts(spec.reference_fn()(*inputs.args, **inputs.kwargs))
                size = sum(max(e.numel(), 1) for e in expected)
                total += size
                try:
                    actual = _parts(control.fn(*inputs.args, **inputs.kwargs))
                except Exception:  # noqa: BLE001 - a raise is wrong on the whole case
                    wrong += size
                    continue
            for got, want in zip(actual, expected, strict=True):
                if got.numel() != want.numel():
                    wrong += want.numel()
                    continue
                values = got.reshape(want.shape).float()  # values, whatever the shape
                wrong += int((bits(values) != bits(want.float())).sum())
    return wrong / max(total, 1)


def _parts(out) -> tuple:
    """A slot's output as a tuple of tensors (one, or each output of a multi-output slot)."""
    return out if isinstance(out, tuple) else (out,)


def test_control_is_narrow(control, whole_suite):
    """A control wrong almost everywhere proves nothing about a check's aim: on everyday
    inputs (float32, contiguous, no injected edge values) each gives a wrong value for under 1%
    of the elements (a raise counts as wrong everywhere; shapes and dtypes are the checks' job)."""
    fraction = _mismatch_fraction(control)
    assert fraction < NARROW, f"{control.name} is wrong on {fraction:.2%} of everyday inputs"

"""Error behaviour is a contract: every implementation, given each of its slot's error inputs
(the catalogue's `error_inputs`), raises the stated exception naming the argument, or declines
so that the next implementation or the portable path raises it. Returning numbers fails."""

from dataclasses import replace

import pytest

from conformance.catalogue import CATALOGUE, slot
from conformance.negative import load_controls, parametrize_controls
from conformance.running import outcomes
from conformance.running.cells import ErrorPlan, refuses, run_cell, run_error_cell
from conformance.running.plan import cell_plans, error_plans

ERROR_CONTROLS = load_controls("ERROR_CONTROLS")


def pytest_generate_tests(metafunc):
    parametrize_controls(metafunc, "registered_control", ERROR_CONTROLS, indirect=True)


def test_error_input(error_plan, record_cell, request):
    cell = run_error_cell(slot(error_plan.slot), error_plan)
    issue = error_plan.error.failing.get(error_plan.impl)
    if issue and cell.state == "fail":  # marked a strict expected failure (conformance/plugin.py)
        cell.reason = f"known failure (issue: {issue}): {cell.reason}"
    cell.reproduce = outcomes.rerun_command(request.config, request.node.nodeid)
    record_cell(cell)
    outcomes.conclude(cell, cell.reproduce)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_slot_declares_error_inputs_its_fallback_refuses(name):
    """The catalogue's error inputs are right: the reference (or, without one, the caller's
    portable path) raises each one's exception, naming its argument."""
    spec = CATALOGUE[name]
    assert spec.error_inputs, f"{name} declares no error inputs"
    assert len({e.name for e in spec.error_inputs}) == len(spec.error_inputs), "duplicate names"
    for error in spec.error_inputs:
        inputs = error.build("cpu", "meta")
        with pytest.raises(error.error) as raised:
            spec.fallback()(*inputs.args, **inputs.kwargs)
        assert refuses(error, raised.value), f"{error.name}: {raised.value}"


def test_suite_rejects_an_implementation_silent_on_invalid_input(registered_control, run_options,
                                                                 control_verdict, whole_suite):
    """The control is right on every valid cell it is given here (the matrix passes it), and
    the error cells reject it by the check it names."""
    control = registered_control
    if run_options.interpreter:
        pytest.skip("negative controls are PyTorch code: the interpreter adds nothing")
    options = replace(run_options, impl=control.name, slots=frozenset({control.slot}))
    valid = [run_cell(slot(p.slot), p) for p in cell_plans(options) if p.case.size == "small"]
    assert valid and all(c.state == "pass" for c in valid), [c.reason for c in valid
                                                              if c.state != "pass"][:3]
    rejected = [cell for cell in (run_error_cell(slot(p.slot), p) for p in error_plans(options))
                if control.check in cell.failed_checks]
    control_verdict(control, rejected[0] if rejected else None)
    assert rejected, f"{control.name} passed every error cell: {control.why}"


def test_an_error_cell_fails_an_implementation_that_returns_numbers_and_names_the_input():
    spec = slot("fake_quant_int8_per_channel")
    error = next(e for e in spec.error_inputs if e.name == "negative-scale")
    control = next(c for c in ERROR_CONTROLS if c.name == "negative-skips_validation")
    control.register()
    try:
        cell = run_error_cell(spec, ErrorPlan(spec.name, control.name, "cpu", error))
    finally:
        control.unregister()
    assert cell.state == "fail" and cell.failed_checks == ["error-input"]
    assert "returned a float32 tensor of shape (4, 6) for input 'negative-scale'" in cell.reason
    assert "expected ValueError naming 'scale'" in cell.reason

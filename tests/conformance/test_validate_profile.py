"""Validating one implementation (`--impl`) runs the `validate` profile unless told otherwise:
every case in every dtype and layout its slot declares. A bug specific to one size x dtype or
size x layout combination fails by default (the `ci` profile runs large cases in none)."""

from dataclasses import replace

import pytest

from conformance.catalogue import slot
from conformance.inputs import strategies
from conformance.negative import load_controls
from conformance.running.cells import run_cell
from conformance.running.plan import cell_plans

VALIDATE_CONTROLS = load_controls("VALIDATE_CONTROLS")


@pytest.mark.parametrize("registered_control", VALIDATE_CONTROLS, indirect=True,
                         ids=lambda c: c.name)
def test_the_default_impl_profile_rejects_a_bug_of_one_size_and_dtype_or_layout(
        registered_control, run_options, control_verdict, whole_suite):
    control = registered_control
    if run_options.interpreter:
        pytest.skip("negative controls are PyTorch code: the interpreter adds nothing")
    options = replace(run_options, impl=control.name, slots=frozenset({control.slot}),
                      profile=strategies.profile(strategies.IMPL_DEFAULT_PROFILE))
    # only the large cases, where these controls are wrong (the others pass them: see why)
    plans = (p for p in cell_plans(options) if p.case.size == "large")
    rejecting = next((cell for cell in (run_cell(slot(p.slot), p) for p in plans)
                      if control.check in cell.failed_checks), None)
    control_verdict(control, rejecting)
    assert rejecting is not None, f"{control.name} passed every large case: {control.why}"


def test_impl_runs_default_to_the_validate_profile_and_others_to_ci():
    assert strategies.IMPL_DEFAULT_PROFILE == "validate" and strategies.DEFAULT_PROFILE == "ci"
    validate = strategies.profile("validate")
    assert validate.sizes == validate.full_grid_sizes == {"small", "medium", "large"}

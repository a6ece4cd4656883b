"""Determinism is honoured: under ``torch.use_deterministic_algorithms(True)`` every registered
implementation of the deformable-attention slots gives the same output and gradients, bit for
bit, over ``determinism.RUNS`` forward+backward runs (``conformance/running/determinism.py``;
cells of origin "determinism" in the matrix, check `repeatable`). A GPU property: CPU and
interpreter runs make the cells not applicable, with the reason.

Negative controls (``conformance/negative/determinism.py``): a backward nudging its value
gradient by one ulp at a run-dependent element, and the atomic backward forced under the mode.
With ``--gpu`` each must be rejected; on CPU the check itself is shown to reject the nudged
controls and to pass the portable path (the atomic-forced ones repeat on CPU: GPU-only).
"""

from __future__ import annotations

import pytest
import torch

from conformance.catalogue import CATALOGUE
from conformance.negative import load_controls, parametrize_controls
from conformance.plugin import options
from conformance.running import determinism, outcomes
from conformance.running.cells import make_inputs
from conformance.running.plan import registered_names

CONTROLS = load_controls("DETERMINISM_CONTROLS")
#: Implementations known not to honour the mode: an expected failure, with why (not strict: the
#: order of its atomic adds could happen to repeat on a case).
KNOWN_NONDETERMINISTIC = {
    ("ms_deform_attn", "hub"): "Deformable DETR's compiled backward (the Hub kernel) adds the "
                               "value gradient with CUDA atomicAdd and does not read torch's "
                               "deterministic flag",
}


def _mode(run) -> str:
    return "interpreter" if run.interpreter else "cuda" if run.gpu else "cpu"


def pytest_generate_tests(metafunc):
    parametrize_controls(metafunc, "registered_control", CONTROLS, indirect=True)
    parametrize_controls(metafunc, "control",
                         [c for c in CONTROLS if not getattr(c.fn, "gpu_only", False)])
    if "determinism_plan" not in metafunc.fixturenames:
        return
    run = options(metafunc.config)
    plans = [plan for slot in determinism.CASES if run.takes(slot)
             for impl in registered_names(slot) if run.impl in (None, impl)
             for plan in determinism.plans(slot, impl, _mode(run))]
    metafunc.parametrize("determinism_plan", plans,
                         ids=[f"{p.id}:repeatable" for p in plans])


def test_repeatable(determinism_plan, record_cell, request):
    cell = determinism.run_cell(determinism_plan)
    known = KNOWN_NONDETERMINISTIC.get((cell.slot, cell.impl))
    if known and cell.state == "fail":
        cell.reason = f"known failure ({known}): {cell.reason}"
    cell.reproduce = outcomes.rerun_command(request.config, request.node.nodeid)
    record_cell(cell)
    if known and cell.state == "fail":
        pytest.xfail(cell.reason)
    outcomes.conclude(cell, cell.reproduce)


def test_the_check_rejects_control(registered_control, run_options, control_verdict,
                                   whole_suite):
    control = registered_control
    if not run_options.gpu:
        pytest.skip("not applicable: a determinism control is rejected on CUDA (--gpu); "
                    "test_the_check_rejects_a_nudged_gradient_on_cpu shows the check on CPU")
    cells = [determinism.run_cell(plan) for plan in
             determinism.plans(control.slot, control.name, "cuda")]
    rejecting = next((c for c in cells if control.check in c.failed_checks), None)
    control_verdict(control, rejecting)
    assert rejecting is not None, (
        f"{control.name} ({control.slot}) passed the '{control.check}' check on every case: "
        f"{control.why}. Cells: {[(c.case, c.state, c.reason) for c in cells]}")


def _cpu_inputs(slot: str):
    """The small version of the slot's first checked case (the suite's seeded inputs)."""
    plan = determinism.plans(slot, "cpu-check", "cpu", determinism.CPU_CASES[slot])[0]
    return make_inputs(CATALOGUE[slot], plan)


def test_the_check_rejects_a_nudged_gradient_on_cpu(control, whole_suite):
    """The check's teeth without a GPU: on the portable path (which repeats on CPU), a one-ulp
    run-dependent change to the value gradient is seen in every run after the first."""
    inputs = _cpu_inputs(control.slot)
    with determinism.deterministic_algorithms():
        counts = determinism.differing(control.fn, inputs.args, inputs.grad_args, runs=4)
    assert counts["grad_arg0"] == 3, counts
    assert counts["output"] == counts["grad_arg2"] == counts["grad_arg3"] == 0, counts


@pytest.mark.parametrize("slot", sorted(determinism.CASES))
def test_the_check_passes_a_repeatable_implementation_on_cpu(slot, whole_suite):
    """No false alarm: the portable path on CPU repeats, bit for bit, under the mode."""
    inputs = _cpu_inputs(slot)
    with determinism.deterministic_algorithms():
        counts = determinism.differing(CATALOGUE[slot].portable, inputs.args, inputs.grad_args,
                                       runs=3)
    assert not any(counts.values()), counts


def test_the_mode_is_restored_after_a_check(whole_suite):
    before = torch.are_deterministic_algorithms_enabled()
    with determinism.deterministic_algorithms():
        assert torch.are_deterministic_algorithms_enabled()
    assert torch.are_deterministic_algorithms_enabled() == before

"""The plain GPU run (`pytest conformance/ --gpu -n auto`) is evidence CI checks: its result,
written by the run itself (`conformance/evidence/plain_run.py`), must be green and must have covered
today's sources, the references' included. Re-derived here: the counts from the cells, the
digests from the tree, the controls from the suite."""

import copy

import pytest

from conformance.evidence import plain_run
from conformance.evidence.rerecord import plain_run_problems, registered_pairs
from conformance.negative import load_controls

CONTROLS = {c.name for c in load_controls()}


def test_the_committed_plain_gpu_run_is_green_and_covers_todays_sources():
    problems = plain_run_problems()
    assert not problems, ("the plain GPU run's evidence does not hold for HEAD; on a GPU of the "
                          "declared stack run `python -m conformance.evidence.rerecord`:\n- "
                          + "\n- ".join(problems))


@pytest.fixture(scope="module")
def current():
    return plain_run.digests(registered_pairs())


@pytest.fixture
def green(current):
    """Evidence as a green run of today's tree would write it (its commit: HEAD)."""
    from conformance.evidence import provenance

    cells = {f"{key.replace('/', ':')}:cuda:float32:case@contiguous:suite": "pass"
             for key in current}
    machine = {"torch": "2.11.0+cu130", "triton": "3.6.0", "cuda": "13.0",
               "gpu": "NVIDIA H200", "compute_capability": "9.0"}
    return {"format": plain_run.FORMAT_VERSION, "cells": cells,
            "counts": plain_run.state_counts(cells), "outcomes": {"passed": len(cells)},
            "controls": [{"name": n, "killed": True} for n in CONTROLS], "machine": machine,
            "stack_problems": [], "git": {"commit": provenance._git("rev-parse", "HEAD"),
                                          "dirty": False},
            "sources": copy.deepcopy(current)}


def test_green_evidence_of_todays_tree_passes(green, current):
    assert plain_run.problems(green, current, CONTROLS) == []


def _problem(evidence, current, *words):
    found = plain_run.problems(evidence, current, CONTROLS)
    assert found and all(any(w in p for p in found) for w in words), found


def test_missing_evidence_fails(current):
    _problem(None, current, "no evidence", plain_run.COMMAND)


def test_a_failing_cell_fails_and_counts_are_re_derived(green, current):
    first = next(iter(green["cells"]))
    green["cells"][first] = "fail"
    _problem(green, current, "counts are not the counts of its cells")
    green["counts"] = plain_run.state_counts(green["cells"])
    _problem(green, current, "not green")


def test_a_failed_test_or_a_surviving_control_fails(green, current):
    green["outcomes"]["failed"] = 1
    green["controls"][0]["killed"] = False
    _problem(green, current, "not green", "survived")


def test_a_changed_reference_source_makes_it_stale(green, current):
    key = next(k for k in current if k.endswith("/reference"))
    name = next(iter(current[key]["files"]))
    changed = copy.deepcopy(current)
    changed[key]["files"][name] = "0" * 64
    changed[key]["digest"] = "changed"
    _problem(green, changed, f"{key}: the run covered other sources", name)


def test_an_implementation_the_run_did_not_cover_fails(green, current):
    dropped = next(iter(green["sources"]))
    del green["sources"][dropped]
    _problem(green, current, f"{dropped} is registered now but the run did not cover it")


def test_a_dirty_or_foreign_machine_fails(green, current):
    green["git"]["dirty"] = True
    green["machine"]["gpu"] = "NVIDIA A100"
    _problem(green, current, "DIRTY", "declared GPU stack")

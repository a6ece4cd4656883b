"""Every cell ends in one of its states with its own message, whatever the implementation does:
for implementations that each break one thing a cell reads after the call
(`backends/breakers.py`), each cell fails by the check that found the break, with that check's
message, and a suite run of the commonest first mistake (a forward-only body) counts every cell
it collected, its hypothesis cell a failure with the same message, not a crash."""

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
from backends.breakers import BREAKERS, register_all, unregister_all

from conformance.catalogue import slot
from conformance.running.cells import run_cell
from conformance.running.child import run_pytest
from conformance.running.plan import cell_plans

BACKENDS = Path(__file__).resolve().parent / "backends"
SUITE = ("conformance/test_matrix.py", "conformance/test_layouts.py", "conformance/test_errors.py")
#: The tests that each record one cell, as `-rA` lists them.
CELL_TESTS = re.compile(r"^(PASSED|FAILED|ERROR) conformance/test_\w+\.py::"
                        r"test_(cell|layouts|error_input)\[", re.MULTILINE)


@pytest.fixture(scope="module")
def breakers():
    register_all()
    yield
    unregister_all()


@pytest.mark.parametrize("name", sorted(BREAKERS))
def test_each_cell_fails_by_the_check_that_found_the_break(name, breakers, run_options):
    slot_name, _, check, message = BREAKERS[name]
    options = replace(run_options, impl=name, slots=frozenset({slot_name}))
    plans = [p for p in cell_plans(options) if p.case.size == "small"]
    cells = [run_cell(slot(p.slot), p) for p in plans]
    assert plans and len(cells) == len(plans)
    failed = [c for c in cells if c.state == "fail"]
    assert {c.state for c in cells} <= {"pass", "fail"}, [c.reason for c in cells]
    assert failed, f"{name}: no cell found its break"
    for cell in failed:
        assert cell.failed_checks[0] == check, (cell.case, cell.reason)
        assert message in cell.reason, (cell.case, cell.reason)
    if check in ("exact", "ste"):  # a mismatch is located in the input
        assert all("input[" in c.reason for c in failed if "differ" in c.reason)


def test_a_forward_only_backend_gets_every_cell_counted_with_its_message(request, tmp_path):
    matrix = tmp_path / "matrix.json"
    path = os.pathsep.join([str(BACKENDS), os.environ.get("PYTHONPATH", "")])
    result = run_pytest(request.config.rootpath, *SUITE, "-q", "-p", "breakers_backend",
                        "--impl", "forward-only", "--slot", "fake_quant_int8_affine",
                        "--profile", "ci", "-rA", "--matrix", str(matrix),
                        env={"PYTHONPATH": path})
    log = result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 1, log
    cells = json.loads(matrix.read_text())["cells"]
    assert len(cells) == len(CELL_TESTS.findall(result.stdout)), log  # none vanishes
    assert "crash" not in {c["state"] for c in cells}, log
    valid = [c for c in cells if c["origin"] in ("suite", "hypothesis")]
    assert valid and {c["state"] for c in valid} == {"fail"}, log
    assert all("ste: output is not connected to the input in autograd" in c["reason"]
               for c in valid), log

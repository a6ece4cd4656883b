"""A disabled implementation is a failure in every kind of run: once the registry disables it,
the cell where that happened and every later cell of it fail with check `disabled`, naming the
first failure and where it was; none is `not-applicable` (conformance/running/disabled.py)."""

import json
import os
from pathlib import Path

from conformance.negative.disabled import SLOT
from conformance.running.child import run_pytest

BACKENDS = Path(__file__).resolve().parent / "backends"
SUITE = ("conformance/test_matrix.py", "conformance/test_layouts.py", "conformance/test_errors.py")


def test_impl_run_fails_every_cell_of_a_backend_the_registry_disables(request, tmp_path):
    matrix = tmp_path / "matrix.json"
    path = os.pathsep.join([str(BACKENDS), os.environ.get("PYTHONPATH", "")])
    result = run_pytest(request.config.rootpath, *SUITE, "-q", "-p", "recursing_backend",
                        "--impl", "recursing", "--slot", SLOT, "--profile", "ci",
                        "--matrix", str(matrix), env={"PYTHONPATH": path})
    log = result.stdout[-3000:] + result.stderr[-2000:]
    assert result.returncode == 1, log
    cells = json.loads(matrix.read_text())["cells"]
    assert cells and {c["impl"] for c in cells} == {"recursing"}
    assert {c["state"] for c in cells} == {"fail"}, log
    assert {c["origin"] for c in cells} == {"suite", "hypothesis", "errors"}
    assert all(c["failed_checks"] == ["disabled"] for c in cells if c["origin"] != "hypothesis")
    assert all("disabled: " in c["reason"] and "RecursionError" in c["reason"] for c in cells), \
        "every cell names the check and the first failure"
    places = {c["reason"].split(", first in ")[1].split(";")[0] for c in cells}
    assert len(places) == 1 and places.pop().startswith(("cell ", "test ")), places

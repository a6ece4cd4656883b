"""How the root conftest schedules a parallel run: the interpreter children first, and xdist's
work stealing, so no worker sits idle at the end behind another's minutes-long child."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from conformance.running.child import run_pytest

ROOT = Path(__file__).resolve().parents[2]
#: a module whose one interpreter test is not its first
MIXED = "tests/attention/test_msda_profile.py"
INTERPRETED = f"{MIXED}::test_a_real_interpreted_call_is_grouped"


def test_the_interpreter_tests_are_collected_first():
    listed = run_pytest(ROOT, MIXED, "conformance/test_interpreter.py", "--collect-only", "-q")
    ids = [line for line in listed.stdout.splitlines() if "::" in line]
    assert ids[:2] == [INTERPRETED, "conformance/test_interpreter.py::test_interpreter_matrix"]
    assert len(ids) > 2, listed.stdout


@pytest.mark.parametrize("workers, given, used", [(2, "no", "worksteal"), (2, "load", "load"),
                                                  (0, "no", "no"), (None, "no", "no")])
def test_a_parallel_run_steals_work_unless_told_otherwise(request, workers, given, used):
    root_conftest = request.config.pluginmanager.get_plugin(str(ROOT / "conftest.py"))
    config = SimpleNamespace(option=SimpleNamespace(numprocesses=workers, dist=given))
    root_conftest.pytest_cmdline_main(config)
    assert config.option.dist == used

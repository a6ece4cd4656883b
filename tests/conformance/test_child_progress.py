"""A child pytest's results reach the parent as each finishes (``run_pytest(progress=...)``), so
the interpreter children's minutes of checks show in the parent's report as they run."""

import subprocess
import textwrap
from pathlib import Path

import pytest

from conformance.plugin import Collector
from conformance.running.child import as_subtests, run_pytest

ROOT = Path(__file__).resolve().parents[2]

#: the second test waits for the parent to have heard of the first: it passes only if results
#: are handed over while the child still runs, not after it exits
CHILD = textwrap.dedent("""
    import pathlib, time
    import pytest

    def test_passes():
        pass

    def test_waits_for_the_parent():
        go = pathlib.Path(__file__).with_name("go")
        for _ in range(600):
            if go.exists():
                return
            time.sleep(0.1)
        assert False, "the parent did not hear of test_passes while this child ran"

    def test_fails():
        assert 1 == 2

    def test_skips():
        pytest.skip("nothing to do here")

    def test_sleeps():
        if pathlib.Path(__file__).with_name("sleep").exists():
            time.sleep(60)
""")


def child(tmp_path, *args, **options):
    (tmp_path / "test_child.py").write_text(CHILD)
    return run_pytest(tmp_path, "test_child.py", "-q", *args, env={"PYTHONPATH": str(ROOT)},
                      **options)


def test_each_result_reaches_the_parent_as_it_finishes(tmp_path):
    seen = []

    def heard(result):
        seen.append(result)
        (tmp_path / "go").touch()

    result = child(tmp_path, progress=heard)
    assert [(r["nodeid"], r["outcome"]) for r in seen] == [
        ("test_child.py::test_passes", "passed"),
        ("test_child.py::test_waits_for_the_parent", "passed"),
        ("test_child.py::test_fails", "failed"),
        ("test_child.py::test_skips", "skipped"),
        ("test_child.py::test_sleeps", "passed")]
    assert "assert 1 == 2" in seen[2]["detail"] and "nothing to do here" in seen[3]["detail"]
    assert result.returncode == 1 and "1 failed, 3 passed, 1 skipped" in result.stdout


def test_a_child_past_its_timeout_is_stopped(tmp_path):
    (tmp_path / "sleep").touch()
    (tmp_path / "go").touch()
    with pytest.raises(subprocess.TimeoutExpired):
        child(tmp_path, "-k", "sleeps", timeout=10, progress=lambda result: None)


def test_a_child_result_is_a_subtest_the_suite_does_not_count(request, subtests):
    """The parent test's own report counts once in the suite's outcomes (a plain run's evidence
    compares them with the tests collected), however many child results it showed; a child's
    skip is not shown (the run's skip count stays its own tests')."""

    class Seen:
        def __init__(self):
            self.reports = []

        def pytest_runtest_logreport(self, report):
            self.reports.append(report)

    collector, seen = Collector(request.config, None), Seen()
    for plugin in (collector, seen):
        request.config.pluginmanager.register(plugin)
    try:
        report = as_subtests(subtests)
        report({"nodeid": "child.py::test_passes", "outcome": "passed", "detail": ""})
        report({"nodeid": "child.py::test_skips", "outcome": "skipped", "detail": "CUDA only"})
    finally:
        for plugin in (collector, seen):
            request.config.pluginmanager.unregister(plugin)
    assert [(type(r), r.outcome, r.context.msg) for r in seen.reports] == [
        (pytest.SubtestReport, "passed", "child.py::test_passes")]
    assert collector.outcomes == {} and collector.seconds == {}


def test_a_plain_run_prints_each_subtest():
    """At pytest's default verbosity a passed subtest prints nothing unless ``verbosity_subtests``
    says so (pyproject.toml): without it a plain ``pytest -n auto`` is silent during a child."""
    node = ("tests/conformance/test_child_progress.py::"
            "test_a_child_result_is_a_subtest_the_suite_does_not_count")
    result = run_pytest(ROOT, node)
    assert "1 passed, 1 subtests passed" in result.stdout, result.stdout[-2000:]

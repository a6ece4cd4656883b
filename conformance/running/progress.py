"""A child pytest's results, one JSON line each as it finishes, for the parent to report as its
own subtests (``child.run_pytest(progress=...)``): a child that runs for minutes then shows its
progress in the parent's report, as pytest reports anything else, instead of minutes of silence.

Loaded in the child with ``-p``; writes to the file descriptor named by ``FD_VARIABLE``, from the
process that sees every report (the only process, or an xdist controller: its workers' reports
reach it)."""

from __future__ import annotations

import json
import os

import pytest

FD_VARIABLE = "LIBREYOLO_CHILD_PROGRESS_FD"


class _Writer:
    def __init__(self, stream) -> None:
        self.stream = stream

    def write(self, nodeid: str, outcome: str, detail: str) -> None:
        self.stream.write(json.dumps({"nodeid": nodeid, "outcome": outcome, "detail": detail})
                          + "\n")

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.write(report.nodeid or "collection", "failed", str(report.longrepr))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.write(report.nodeid, "failed", f"{report.when}: {report.longrepr}")
        elif report.skipped and report.when != "teardown":
            reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else ""
            self.write(report.nodeid, "skipped", str(reason))
        elif report.when == "call":
            self.write(report.nodeid, "passed", "")

    def pytest_unconfigure(self) -> None:
        self.stream.close()


def pytest_configure(config: pytest.Config) -> None:
    descriptor = os.environ.get(FD_VARIABLE)
    if descriptor is not None and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Writer(os.fdopen(int(descriptor), "w", buffering=1)))

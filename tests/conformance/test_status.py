"""``python -m conformance.reporting.status``: the runtime's report with each implementation's
parity-record state, as the gate judges it (the runtime itself never reads records)."""

from __future__ import annotations

import pytest

from conformance.reporting import status
from libreyolo.kernels.registry import Implementation


def test_record_state_is_stale_when_the_sources_changed(tmp_path):
    other = tmp_path / "kernel.py"
    other.write_text("# not the sources the record checked\n")
    impl = Implementation("fake_quant_fp8", "triton", print, sources=(str(other),),
                          origin="in-tree")
    assert status.record_states()(impl) == "stale"


@pytest.mark.parametrize("problem, state", [(None, "green"), ("a cell failed", "not green")])
def test_record_state_of_todays_sources_is_the_gates_verdict(monkeypatch, problem, state):
    """A record whose digest is today's sources' is green exactly when the gate accepts it (the
    report once compared the digest with the whole provenance and called every record stale)."""
    from conformance.evidence import gate, records, scan

    impl = Implementation("fake_quant_fp8", "triton", print, origin="in-tree")
    today = gate.current_digest(scan.Target(impl.op, impl.name, impl.sources, None))["digest"]
    monkeypatch.setattr(records, "load", lambda op, name: {"source_digest": today})
    monkeypatch.setattr(gate, "record_problem", lambda target, record, current: problem)
    assert status.record_states()(impl) == state


def test_record_state_is_awaiting_when_listed(monkeypatch):
    monkeypatch.setattr(status, "awaiting_record", lambda: frozenset({"fake_quant_fp8/triton"}))
    impl = Implementation("fake_quant_fp8", "triton", print, origin="in-tree")
    assert status.record_states()(impl) == "awaiting"


def test_record_state_is_none_out_of_tree():
    impl = Implementation("fake_quant_fp8", "triton", print, origin="caller")
    assert status.record_states()(impl) == "none"


def test_the_status_command_reports_record_states():
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "conformance.reporting.status", "--json"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    rows = {i["name"]: i for i in json.loads(done.stdout)["slots"]["fake_quant_fp8"]
            ["implementations"]}
    assert rows["reference"]["record"] is None
    assert rows["triton"]["record"] in {"green", "stale", "not green", "awaiting", "none"}

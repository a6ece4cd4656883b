"""``python -m libreyolo.kernels``: runs, exits 0, and its JSON describes every slot."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from libreyolo.kernels import cli, slot_names
from libreyolo.kernels.registry import Implementation


def run_cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "libreyolo.kernels", *args],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )


def test_json_report_covers_every_slot_and_the_settings():
    done = run_cli("--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert set(data["slots"]) == set(slot_names())
    assert set(data["settings"]) == {
        "LIBREYOLO_KERNELS", "LIBREYOLO_QUANT_KERNELS", "LIBREYOLO_HUB_KERNELS",
        "LIBREYOLO_HUB_KERNELS_UNAUDITED", "LIBREYOLO_FP8_FAST_ACCUMULATION", "TRITON_INTERPRET"
    }
    assert data["slots"]["fake_quant_fp8"]["selected"] in {"reference", "triton"}
    assert data["slots"]["fake_quant_fp8"]["implementations"][-1]["name"] == "reference"


def test_forced_reference_is_explained():
    env = {"PATH": "/usr/bin:/bin", "LIBREYOLO_KERNELS": "off"}
    done = run_cli("--json", env=env)
    assert done.returncode == 0, done.stderr
    slot = json.loads(done.stdout)["slots"]["fake_quant_fp8"]
    assert slot["selected"] == "reference"


def test_text_report_names_the_selection_per_slot():
    done = run_cli()
    assert done.returncode == 0, done.stderr
    assert "fake_quant_fp8  ->  " in done.stdout
    assert "LIBREYOLO_KERNELS=" in done.stdout


def test_json_report_gives_versions_origins_and_record_states():
    done = run_cli("--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert set(data["versions"]) == {"python", "torch", "triton", "cuda", "gpu"}
    rows = {i["name"]: i for i in data["slots"]["fake_quant_fp8"]["implementations"]}
    assert rows["reference"]["origin"] == "in-tree" and rows["reference"]["record"] is None
    assert rows["triton"]["origin"] == "in-tree"
    assert rows["triton"]["record"] in {"green", "stale", "not green", "awaiting", "none"}


@pytest.mark.skipif(torch.cuda.is_available(), reason="the decline is that of a CPU machine")
def test_a_decline_names_the_part_of_the_condition_that_failed():
    done = run_cli("--json")
    rows = {i["name"]: i for i in json.loads(done.stdout)["slots"]["fake_quant_fp8"]
            ["implementations"]}
    assert rows["triton"]["reason"].endswith("no CUDA device")


def test_import_registers_a_package_before_the_report(tmp_path):
    (tmp_path / "my_backend.py").write_text(
        "from libreyolo.kernels import register\n"
        "register('ms_deform_attn', lambda *a: None, name='mine')\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)}
    done = run_cli("--json", "--import", "my_backend", env=env)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["slots"]["ms_deform_attn"]["implementations"]
    assert {"name": "mine", "origin": "package"}.items() <= rows[0].items()


def test_json_report_shows_each_declaration(tmp_path):
    (tmp_path / "my_backend.py").write_text(
        "import torch\n"
        "from libreyolo.kernels import Capabilities, register\n"
        "register('ms_deform_attn', lambda *a: None, name='mine',\n"
        "         capabilities=Capabilities(dtypes={torch.float32}, modes={'cuda'}))\n")
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": path}
    done = run_cli("--json", "--import", "my_backend", env=env)
    assert done.returncode == 0, done.stderr
    rows = {i["name"]: i for i in json.loads(done.stdout)["slots"]["ms_deform_attn"]
            ["implementations"]}
    assert rows["mine"]["capabilities"] == {"devices": None, "dtypes": ["float32"],
                                            "modes": ["cuda"], "layouts": None}
    assert rows["triton"]["capabilities"] is None
    text = run_cli("--import", "my_backend", env=env)
    assert "declares dtypes float32; modes cuda" in text.stdout


def test_import_of_a_missing_package_is_an_error_naming_the_argument():
    done = run_cli("--import", "no_such_backend_here")
    assert done.returncode == 2
    assert "--import no_such_backend_here: ModuleNotFoundError" in done.stderr


def test_record_state_is_stale_when_the_sources_changed(tmp_path):
    other = tmp_path / "kernel.py"
    other.write_text("# not the sources the record checked\n")
    impl = Implementation("fake_quant_fp8", "triton", print, sources=(str(other),),
                          origin="in-tree")
    assert cli.record_states()(impl) == "stale"


@pytest.mark.parametrize("problem, state", [(None, "green"), ("a cell failed", "not green")])
def test_record_state_of_todays_sources_is_the_gates_verdict(monkeypatch, problem, state):
    """A record whose digest is today's sources' is green exactly when the gate accepts it (the
    report once compared the digest with the whole provenance and called every record stale)."""
    from conformance import gate, records

    impl = Implementation("fake_quant_fp8", "triton", print, origin="in-tree")
    today = gate.current_digest(gate.Target(impl.op, impl.name, impl.sources, None))["digest"]
    monkeypatch.setattr(records, "load", lambda op, name: {"source_digest": today})
    monkeypatch.setattr(gate, "record_problem", lambda target, record, current: problem)
    assert cli.record_states()(impl) == state


def test_record_state_is_awaiting_when_listed(monkeypatch):
    monkeypatch.setattr(cli, "awaiting_record", lambda: frozenset({"fake_quant_fp8/triton"}))
    impl = Implementation("fake_quant_fp8", "triton", print, origin="in-tree")
    assert cli.record_states()(impl) == "awaiting"


def test_record_state_is_none_out_of_tree_and_unknown_without_a_checkout(monkeypatch, tmp_path):
    impl = Implementation("fake_quant_fp8", "triton", print, origin="caller")
    assert cli.record_states()(impl) == "none"
    monkeypatch.setattr(cli, "CHECKOUT", tmp_path)
    assert cli.record_states()(impl) == "unknown"

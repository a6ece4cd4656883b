"""``python -m libreyolo.kernels``: runs, exits 0, and its JSON describes every slot."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from libreyolo.kernels import cli, slot_names


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


def test_json_report_gives_versions_and_origins_and_no_record_states():
    """Parity records are the suite's: the runtime's report has none (python -m
    conformance.reporting.status adds them), so it runs the same outside a checkout."""
    done = run_cli("--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert set(data["versions"]) == {"python", "torch", "triton", "cuda", "gpu"}
    rows = {i["name"]: i for i in data["slots"]["fake_quant_fp8"]["implementations"]}
    assert rows["reference"]["origin"] == "in-tree" and rows["triton"]["origin"] == "in-tree"
    assert all("record" not in row for row in rows.values())


def test_the_runtime_never_imports_the_suite():
    """libreyolo is a library: nothing under it imports conformance (the layers hold)."""
    import ast
    from pathlib import Path

    root = Path(cli.__file__).resolve().parents[1]
    found = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.relative_to(root.parent)}: {n}" for n in names
                      if n.split(".")[0] == "conformance"]
    assert not found, found


@pytest.mark.skipif(torch.cuda.is_available(), reason="the decline is that of a CPU machine")
def test_a_decline_names_the_part_of_the_condition_that_failed():
    done = run_cli("--json")
    rows = {i["name"]: i for i in json.loads(done.stdout)["slots"]["fake_quant_fp8"]
            ["implementations"]}
    assert rows["triton"]["reason"].endswith(
        "no CUDA device, and TRITON_INTERPRET=1 (the interpreter, on CPU tensors) is not set")


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
    assert rows["triton"]["capabilities"] == {  # the Triton kit's
        "devices": ["cpu", "cuda"], "dtypes": None, "modes": ["interpreter", "cuda", "cuda-graph"],
        "layouts": None, "traced": False}
    text = run_cli("--import", "my_backend", env=env)
    assert "declares dtypes float32; modes cuda" in text.stdout


def test_import_of_a_missing_package_is_an_error_naming_the_argument():
    done = run_cli("--import", "no_such_backend_here")
    assert done.returncode == 2
    assert "--import no_such_backend_here: ModuleNotFoundError" in done.stderr

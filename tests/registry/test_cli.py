"""``python -m libreyolo.kernels``: runs, exits 0, and its JSON describes every slot."""

from __future__ import annotations

import json
import subprocess
import sys

from libreyolo.kernels import slot_names


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
        "LIBREYOLO_KERNELS", "LIBREYOLO_QUANT_KERNELS", "LIBREYOLO_HUB_KERNELS", "TRITON_INTERPRET"
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

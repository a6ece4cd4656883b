"""``python -m benchmarks.rendering.fp8_policy`` turns one card's FP8 policy measurement into
``fp8_policy.toml``'s entries for it, keyed as ``fp8_linear`` matches devices, and says what the
shipped toml needs: nothing, the card listed, or regions per device. The measurement is the H200
run the toml's regions came from; the H100 runs are that run under the H100's name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib

import pytest
import torch

from benchmarks.rendering import fp8_policy
from benchmarks.rendering.results import RESULTS, ROOT
from libreyolo.kernels.quant.execute import fp8_linear

H200_RUN = RESULTS / "fp8_v5_bias_kept_h200_2026-12-03.json"
H100 = "NVIDIA H100 80GB HBM3"  # torch.cuda.get_device_name on the lent H100s


def run_as(device: str, tmp_path, edit=lambda result: None):
    result = json.loads(H200_RUN.read_text())
    result["device"] = device
    result["policy"] = result["policy"].replace('"NVIDIA H200"', json.dumps(device))
    edit(result)
    path = tmp_path / "fp8_policy.json"
    path.write_text(json.dumps(result))
    return path


def test_the_run_behind_the_toml_needs_no_change(capsys):
    assert fp8_policy.main(["--from", str(H200_RUN)]) == 0
    out, err = capsys.readouterr()
    assert tomllib.loads(out)["devices"] == ["NVIDIA H200"]
    assert "measured the toml's regions: no change" in err


def test_an_h100_with_the_same_regions_is_listed_and_its_entries_engage_fp8_linear_there(
        tmp_path, capsys, monkeypatch):
    assert fp8_policy.main(["--from", str(run_as(H100, tmp_path))]) == 0
    out, err = capsys.readouterr()
    assert f'list it, devices = ["NVIDIA H200", "{H100}"]' in err
    assert "#   vitl_fc1 16384x1024->4096: 0.2270 / 0.2812 ms (1.24x) engage" in out
    entries = tmp_path / "entries.toml"
    entries.write_text(out)
    monkeypatch.setattr(fp8_linear, "POLICY_FILE", entries)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: H100)
    fp8_linear.reload_policy()
    fp8_linear._measured_device.cache_clear()  # reload_policy keeps it
    try:
        assert fp8_linear._answer(0, 16384, ((4096, 1024), (1024, 4096)))
        assert not fp8_linear._answer(0, 8400, ((1024, 256),))
    finally:
        monkeypatch.undo()
        fp8_linear.reload_policy()
        fp8_linear._measured_device.cache_clear()


def fc1_only(result):
    result["policy"] = result["policy"][:result["policy"].rindex("[[region]]")]


def fc2_from_8192_rows(result):
    result["policy"] = result["policy"].replace("min_m = 16384\nmin_n = 1024",
                                                "min_m = 8192\nmin_n = 1024")


@pytest.mark.parametrize(("edit", "counts"), [(fc1_only, "1 against 2"),
                                              (fc2_from_8192_rows, "2 against 2")])
def test_an_h100_with_other_regions_is_told_the_toml_cannot_hold_them(tmp_path, capsys, edit,
                                                                      counts):
    assert fp8_policy.main(["--from", str(run_as(H100, tmp_path, edit))]) == 0
    err = capsys.readouterr().err
    assert f"measured other regions than the toml's ({counts})" in err
    assert "the policy needs regions per device first" in err


@pytest.mark.parametrize(("case", "check", "value"), [
    ("torch.bfloat16", "dynamic_code_mismatches", 3),
    ("vitl_fc2_part", "graph_replay_equal", False),
])
def test_a_card_whose_checks_failed_gets_no_entries(tmp_path, capsys, case, check, value):
    def failed(result):
        result["verify"][case][check] = value

    assert fp8_policy.main(["--from", str(run_as(H100, tmp_path, failed))]) == 1
    out, err = capsys.readouterr()
    assert out == "" and f"{case}: {check} = {value}" in err


def test_a_measurement_without_cuda_says_why_and_gets_no_entries(tmp_path, capsys):
    """In a child process: importing bench_fp8 selects the FP8 implementations by name in the
    environment, and no CUDA device is visible to it even on a GPU machine."""
    path = tmp_path / "skipped.json"
    child = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench" /
                                                "measure_fp8_policy.py"), str(path)],
                           env={**os.environ, "CUDA_VISIBLE_DEVICES": ""}, capture_output=True,
                           text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    assert "skipped, no CUDA device" in child.stderr
    assert fp8_policy.main(["--from", str(path)]) == 1
    assert "nothing was measured (no CUDA device" in capsys.readouterr().err

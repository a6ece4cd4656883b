"""``python -m benchmarks.rendering.fp8_policy`` turns one card's FP8 policy measurement into
its ``[[device]]`` entry of ``fp8_policy.toml``, keyed as ``fp8_linear`` matches devices, and says
what the shipped toml needs for it: nothing, the entry added, or the card's entry replaced. The
measurements are the runs the toml's entries came from (the H200's and the H100's); another card
is one of them under that card's name."""

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

H200_RUN = RESULTS / "fp8_policy_declined_h200_2026-12-07.json"
H100_RUN = RESULTS / "fp8_policy_declined_h100_2026-12-07.json"
#: The H100's first run, held to bf16 ``F.linear`` alone (before the declined path was the
#: yardstick): it engages fc1 only
H100_BF16_RUN = RESULTS / "fp8_policy_h100_2026-12-07.json"
H100 = "NVIDIA H100 80GB HBM3"  # torch.cuda.get_device_name on the lent H100s
PCIE = "NVIDIA H100 PCIe"  # another card, never measured
FC1, FC2 = ((4096, 1024),), ((1024, 4096),)  # ViT-L's layers, (N, K), at 16384 rows


def run_as(device: str, tmp_path, edit=lambda result: None, run=H100_RUN):
    result = json.loads(run.read_text())
    result["device"] = device
    edit(result)
    path = tmp_path / "fp8_policy.json"
    path.write_text(json.dumps(result))
    return path


def engages_with_entry(entry: str, tmp_path, monkeypatch) -> list[bool]:
    """Whether ``fp8_linear`` engages ViT-L's fc1 and fc2 at 16384 rows on an H100 PCIe once
    the shipped toml has ``entry`` appended."""
    policy = tmp_path / "fp8_policy.toml"
    policy.write_text(fp8_policy.POLICY.read_text() + "\n" + entry)
    return engages_under(policy, PCIE, monkeypatch)


def engages_under(policy, device: str, monkeypatch) -> list[bool]:
    """Whether ``fp8_linear`` engages ViT-L's fc1 and fc2 at 16384 rows on ``device`` under the
    policy file ``policy``; the shipped policy is read again afterwards."""
    monkeypatch.setattr(fp8_linear, "POLICY_FILE", policy)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: device)
    fp8_linear.reload_policy()
    try:
        return [fp8_linear._answer(0, 16384, shapes) for shapes in (FC1, FC2)]
    finally:
        monkeypatch.undo()
        fp8_linear.reload_policy()


@pytest.mark.parametrize(("run", "device"), [(H200_RUN, "NVIDIA H200"), (H100_RUN, H100)])
def test_the_runs_behind_the_toml_need_no_change(capsys, run, device):
    assert fp8_policy.main(["--from", str(run)]) == 0
    out, err = capsys.readouterr()
    assert [table["name"] for table in tomllib.loads(out)["device"]] == [device]
    assert f"{device} is listed (as {device!r}) with the same regions: no change" in err


def test_an_unlisted_card_is_told_to_add_its_entry_and_the_entry_engages_fp8_linear_there(
        tmp_path, capsys, monkeypatch):
    assert fp8_policy.main(["--from", str(run_as(PCIE, tmp_path))]) == 0
    out, err = capsys.readouterr()
    assert f"{PCIE} is not listed: add this device entry" in err
    assert "fused / the declined path per layer (engages where fused takes at most 0.95 of the " \
           "declined path's time)" in out
    assert "#   vitl_fc2 16384x4096->1024: 0.1935 / 0.3149 ms (1.63x) engage" in out
    assert "#   det_4800_256_256 4800x256->256: 0.0132 / 0.0137 ms (1.04x)\n" in out
    assert out.count("fused faster than the declined path") == 9
    assert engages_with_entry(out, tmp_path, monkeypatch) == [True, True]


def test_a_run_held_to_bf16_alone_says_so_and_engages_less(tmp_path, capsys, monkeypatch):
    """``H100_BF16_RUN``'s entry says which yardstick it had, and engages fc1 only."""
    assert fp8_policy.main(["--from", str(run_as(PCIE, tmp_path, run=H100_BF16_RUN))]) == 0
    out = capsys.readouterr().out
    assert "fused / bf16 per layer" in out
    assert "#   vitl_fc2 16384x4096->1024: 0.1918 / 0.1850 ms (0.96x)\n" in out
    assert engages_with_entry(out, tmp_path, monkeypatch) == [True, False]


@pytest.mark.parametrize(("run", "device", "counts"), [
    (H100_RUN, "NVIDIA H200", "8 measured against 10"),
    (H200_RUN, H100, "10 measured against 8"),
])
def test_a_card_listed_with_other_regions_is_told_to_replace_its_entry(tmp_path, capsys, run,
                                                                       device, counts):
    assert fp8_policy.main(["--from", str(run_as(device, tmp_path, run=run))]) == 0
    err = capsys.readouterr().err
    assert (f"{device} is listed (as {device!r}) with other regions ({counts} listed): "
            "replace its entry with these") in err


@pytest.mark.parametrize(("case", "check", "value"), [
    ("torch.bfloat16", "dynamic_code_mismatches", 3),
    ("vitl_fc2_part", "graph_replay_equal", False),
])
def test_a_card_whose_checks_failed_gets_no_entries(tmp_path, capsys, case, check, value):
    def failed(result):
        result["verify"][case][check] = value

    assert fp8_policy.main(["--from", str(run_as(PCIE, tmp_path, failed))]) == 1
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


def test_written_a_listed_cards_new_run_replaces_its_entry_alone_and_engages_there(
        tmp_path, capsys, monkeypatch):
    """The H100's entry rewritten from another of its runs (``H100_BF16_RUN``, which engages fc1
    alone): the H200's entry is untouched, the H100's regions are the run's, and fp8_linear
    engages there as they say."""
    policy = tmp_path / "fp8_policy.toml"
    policy.write_text(fp8_policy.POLICY.read_text())
    path = run_as(H100, tmp_path, run=H100_BF16_RUN)
    assert fp8_policy.main(["--from", str(path), "--policy", str(policy), "--write"]) == 0
    assert f"written into {policy}" in capsys.readouterr().err
    shipped, now = (tomllib.loads(text)["device"] for text in
                    (fp8_policy.POLICY.read_text(), policy.read_text()))
    assert [table["name"] for table in now] == [table["name"] for table in shipped]
    assert now[0] == shipped[0]  # the H200's entry, untouched
    assert fp8_policy.regions(now[1]) == {(16384, None, 4096, 4096, 1024, 1024)}
    assert engages_under(policy, H100, monkeypatch) == [True, False]


def test_written_an_unlisted_cards_entry_is_appended(tmp_path, capsys):
    policy = tmp_path / "fp8_policy.toml"
    policy.write_text(fp8_policy.POLICY.read_text())
    assert fp8_policy.main(["--from", str(run_as(PCIE, tmp_path)), "--policy", str(policy),
                            "--write"]) == 0
    names = [table["name"] for table in tomllib.loads(policy.read_text())["device"]]
    assert names == ["NVIDIA H200", H100, PCIE]
    assert policy.read_text().startswith(fp8_policy.POLICY.read_text().rstrip("\n"))


def test_written_a_hand_quoted_entry_is_refused_naming_the_line():
    text = fp8_policy.POLICY.read_text().replace('name = "NVIDIA H200"', "name = 'NVIDIA H200'")
    with pytest.raises(ValueError, match="no single \\[\\[device\\]\\] table holds the line "
                                         "'name = \"NVIDIA H200\"'"):
        fp8_policy.written(text, "NVIDIA H200", "[[device]]\nname = \"NVIDIA H200\"\n")

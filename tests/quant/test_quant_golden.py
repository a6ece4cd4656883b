"""The reference reproduces every golden bit (outputs, STE gradients, masks, packed bytes)."""

from __future__ import annotations

import pytest
import torch
from quant_helpers import DEVICES, assert_same_bits
from safetensors.torch import load_file

from conformance.golden import regenerate

CASES = regenerate.load_cases()
GOLDEN = load_file(str(regenerate.GOLDEN_FILE))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_reference_reproduces_the_golden_bits(case, device):
    name = case["name"]
    x, g = GOLDEN[f"{name}.x"].to(device), GOLDEN[f"{name}.g"].to(device)
    result = regenerate.run_case(case, x, g)
    prefix = f"{name}."
    stored = {
        key.removeprefix(prefix): value
        for key, value in GOLDEN.items()
        if key.startswith(prefix) and key.removeprefix(prefix) not in ("x", "g")
    }
    assert sorted(result) == sorted(stored)
    for key, value in result.items():
        assert_same_bits(value.cpu(), stored[key])


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_golden_inputs_are_the_seeded_inputs_of_cases_toml(case):
    assert_same_bits(regenerate.golden_input(case), GOLDEN[f"{case['name']}.x"])


def test_golden_inputs_hold_every_kind_of_edge_value():
    for case in CASES:
        x = GOLDEN[f"{case['name']}.x"].float()
        assert x.isnan().sum() == 1 and x.isposinf().sum() == 1 and x.isneginf().sum() == 1
        assert (x == 0).any() and torch.signbit(x[x == 0]).any()
        assert x.shape[-1] % 16 and x.shape[-1] % 32  # ragged blocks and groups


def test_goldens_are_small():
    assert regenerate.GOLDEN_FILE.stat().st_size < 256 * 1024


def test_regenerate_refuses_to_overwrite_without_force(tmp_path):
    target = tmp_path / "golden.safetensors"
    target.write_bytes(b"keep me")
    with pytest.raises(SystemExit):
        regenerate.main(["--output", str(target)])
    assert target.read_bytes() == b"keep me"


def test_regenerate_with_force_writes_the_committed_goldens(tmp_path):
    target = tmp_path / "golden.safetensors"
    target.write_bytes(b"old")
    assert regenerate.main(["--output", str(target), "--force"]) == 0
    rebuilt = load_file(str(target))
    assert sorted(rebuilt) == sorted(GOLDEN)
    for key, value in rebuilt.items():
        assert_same_bits(value, GOLDEN[key])

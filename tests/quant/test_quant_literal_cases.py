"""The hand-derived tie and saturation cases in conformance/golden/literal_cases.toml."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import torch
from quant_helpers import DEVICES, assert_same_bits, canonical_nan

from libreyolo.quant import fake_quant

CASES_FILE = Path(__file__).parents[2] / "conformance" / "golden" / "literal_cases.toml"
CASES = tomllib.loads(CASES_FILE.read_text())["case"]
TENSOR_PARAMS = ("scale", "global_amax")


def _call(case, device):
    params = {
        name: torch.tensor(value, dtype=torch.float32, device=device)
        if name in TENSOR_PARAMS
        else value
        for name, value in case["params"].items()
    }
    x = torch.tensor(case["x"], dtype=torch.float32, device=device)
    return x, params


def _expected(case):
    expected = torch.tensor(case["expected"], dtype=torch.float32)
    return torch.where(expected.isnan(), canonical_nan(torch.float32), expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['op']}-{c['x']}"[:60])
def test_literal_case_output_and_mask(case, device):
    op = getattr(fake_quant, case["op"])
    x, params = _call(case, device)
    assert_same_bits(op(x, **params).cpu(), _expected(case))
    mask = fake_quant.ste_mask(case["op"], x, **params)
    assert mask.cpu().tolist() == case["mask"], case["why"]

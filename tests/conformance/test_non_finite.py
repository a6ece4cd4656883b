"""A non-finite measurement is a result, not a crash: it is recorded, it fails the cell, and it
is the worst case of its record (found on the H200, where a NaN in the portable path's float16
output made a cell unrecordable, so its slot's record stayed incomplete)."""

from __future__ import annotations

import json
import math

import torch

from conformance.evidence import records
from conformance.running import contracts
from conformance.running.matrix import Cell, json_safe
from conformance.schema.spec import Contract

NAN, INF = float("nan"), float("inf")


def bounded_cell(err, bound, case="c@contiguous", state="pass"):
    return Cell("ms_deform_attn", "triton", "cuda", "float16", case, "medium", state,
                measurements={"output": {"max_abs_err": err, "portable_err": bound / 8,
                                         "bound": bound}})


def test_a_cell_with_nan_and_inf_measurements_is_written_as_json_and_read_back():
    cell = bounded_cell(NAN, INF, state="fail")
    data = json.loads(cell.to_json())
    assert data["measurements"]["output"] == {"max_abs_err": "nan", "portable_err": "inf",
                                              "bound": "inf"}
    assert Cell.from_dict(data).state == "fail"


def test_a_non_finite_error_or_bound_is_its_records_worst_case():
    for err, bound in ((NAN, 1e-3), (1e-4, NAN), (1e-4, INF)):
        cells = [bounded_cell(5e-4, 1e-3, "fine@contiguous"), bounded_cell(err, bound)]
        read_back = [Cell.from_dict(json.loads(c.to_json())) for c in cells]
        worst = records._worst(read_back)["output_error_over_bound"]
        assert worst == {"value": math.inf, "cell": "cuda float16 c@contiguous"}, (err, bound)
        json.dumps(json_safe(worst), allow_nan=False)


def test_a_bound_that_is_not_finite_fails_the_cell_instead_of_passing_everything():
    oracle = torch.ones(4, dtype=torch.float64)
    for portable in (torch.tensor([1.0, INF, 1.0, 1.0]), torch.tensor([1.0, 1.0, NAN, 1.0])):
        verdict = contracts.Verdict()
        contracts.check_bounded(verdict, Contract("bounded", k=8, floor=8), ["output"],
                                [oracle.float()], [portable], [oracle])
        assert verdict.failed == ["bounded"]
        assert "the bound is undefined" in verdict.messages[0]

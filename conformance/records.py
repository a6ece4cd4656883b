"""Parity records: one JSON file per in-tree implementation and slot, from a complete CUDA run.

Written by `pytest conformance/ --gpu --record --profile thorough` as soon as every test of that
implementation finished, so one implementation's record survives another's time-out. The gate
(`conformance/gate.py`) reads them.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from pathlib import Path

from conformance import provenance
from conformance.catalogue import CATALOGUE
from conformance.matrix import Cell, json_safe

RECORDS_DIR = Path(__file__).parent / "records"
RECORD_PROFILE = "thorough"
FORMAT_VERSION = 1


def record_path(slot: str, impl: str, directory: Path = RECORDS_DIR) -> Path:
    return directory / f"{slot}--{impl}.json"


def _number(value) -> float:
    """A measurement as a float (cells' JSON writes non-finite ones as strings); NaN ranks as
    infinity, so a worst case never hides it."""
    number = float(value)
    return math.inf if math.isnan(number) else number


def _measured(cell: Cell):
    """(name, value) of every measurement worth a worst case: exact cells' mismatch counts and
    errors, and each bounded quantity's error as a fraction of its bound (infinite where the
    error or the bound is not finite)."""
    for key in ("mismatches", "max_ulp", "max_abs_err", "grad_mismatches"):
        if cell.measurements.get(key) is not None:
            yield key, _number(cell.measurements[key])
    for name, value in cell.measurements.items():
        if isinstance(value, dict) and value.get("bound"):
            error, bound = _number(value["max_abs_err"]), _number(value["bound"])
            yield f"{name}_error_over_bound", error / bound if math.isfinite(bound) else math.inf


def _worst(cells: list[Cell]) -> dict:
    worst: dict = {}
    for cell in cells:
        for key, value in _measured(cell):
            if value > worst.get(key, (0, None))[0]:
                worst[key] = (value, f"{cell.mode} {cell.dtype} {cell.case}")
    return {k: {"value": v, "cell": where} for k, (v, where) in worst.items()}


def build(slot: str, impl: str, impl_sources, cells: list[Cell], *, expected_tests: int,
          profile: str, seed: int, wall_seconds: float) -> dict:
    """The record of one implementation of one slot, from its cells in this run."""
    spec = CATALOGUE[slot]
    source = provenance.source_digest(spec, impl, impl_sources)
    by = {"state": Counter(c.state for c in cells),
          "dtype": Counter(f"{c.dtype}/{c.state}" for c in cells),
          "size": Counter(f"{c.size}/{c.state}" for c in cells),
          "mode": Counter(f"{c.mode}/{c.state}" for c in cells)}
    outputs = {f"{c.mode}|{c.dtype}|{c.case}": c.measurements["output_digest"]
               for c in cells if c.origin == "suite" and "output_digest" in c.measurements}
    return {
        "format": FORMAT_VERSION, "slot": slot, "impl": impl,
        "source_digest": source["digest"], "source_files": source["files"],
        "git": provenance.git_state(_digest_paths(source)), "machine": provenance.machine(),
        "profile": profile, "seed": seed, "written": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                   time.gmtime()),
        "wall_seconds": round(wall_seconds, 3),
        "complete": len(cells) == expected_tests, "tests": expected_tests,
        "modes": sorted({c.mode for c in cells}),
        "counts": {k: dict(v) for k, v in by.items()},
        "worst": _worst(cells), "output_digests": outputs,
    }


def _digest_paths(source: dict) -> list[Path]:
    return [provenance.ROOT / f for f in source["files"]]


def write(record: dict, directory: Path = RECORDS_DIR) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = record_path(record["slot"], record["impl"], directory)
    path.write_text(json.dumps(json_safe(record), indent=1, sort_keys=True, allow_nan=False)
                    + "\n")
    return path


def load(slot: str, impl: str, directory: Path = RECORDS_DIR) -> dict | None:
    path = record_path(slot, impl, directory)
    return json.loads(path.read_text()) if path.exists() else None


def reference_digest(slot: str, seed: int, key: str) -> str | None:
    """Recompute one recorded exact output (`mode|dtype|case@layout`) from the CPU reference on
    the same seeded inputs; None for large cases (too slow for CPU CI)."""
    import torch

    from conformance.cells import CellPlan, expected, input_seed
    from conformance.layouts import digest
    from conformance.shapesets import load

    _, dtype_name, case_id = key.split("|")
    case_name, _, layout = case_id.partition("@")
    spec = CATALOGUE[slot]
    case = next(c for c in load(spec.shapes) if c.name == case_name)
    if case.size == "large":
        return None
    dtype = getattr(torch, dtype_name)
    plan = CellPlan(slot, "reference", "cpu", dtype, case, layout,
                    input_seed(seed, slot, case_name, dtype, layout))
    return digest(expected(spec, plan).out[0])

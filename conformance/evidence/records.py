"""Parity records: one JSON file per in-tree implementation and slot, from a complete CUDA run.

Written by `pytest conformance/ --gpu --record --profile thorough` as soon as every test of that
implementation finished, so one implementation's record survives another's time-out. The gate
(`conformance/evidence/gate.py`) reads them.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from pathlib import Path

from conformance.catalogue import CATALOGUE
from conformance.evidence import provenance
from conformance.running.matrix import Cell, json_safe

RECORDS_DIR = Path(__file__).resolve().parents[1] / "records"
RECORD_PROFILE = "thorough"
# 2: every cell's state and size, the bounded cells' reference side, the catalogue entry and the
# seconds its tests took (2026-12-01, issue 11); since issue 20 also the declared capabilities
# it was made under (`capabilities`), a field format-2 records made before may lack
FORMAT_VERSION = 2


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


def cell_key(cell: Cell) -> str:
    """`mode|dtype|case@layout`: one cell of a record (hypothesis cells: `mode|any|hypothesis`)."""
    return f"{cell.mode}|{cell.dtype}|{cell.case}"


#: The reference side of a bounded quantity, which CPU CI re-derives from the seeded inputs.
REFERENCE_SIDE = ("oracle_digest", "oracle_max", "portable_err", "bound")


def _reference_side(cell: Cell) -> dict:
    return {name: {k: value[k] for k in (*REFERENCE_SIDE, "max_abs_err") if k in value}
            for name, value in cell.measurements.items()
            if isinstance(value, dict) and "bound" in value}


def counts(cells: dict) -> dict:
    """Counts by state, dtype, size and mode, derived from a record's `cells` (so a reader can
    derive them again and compare)."""
    by = {"state": Counter(), "dtype": Counter(), "size": Counter(), "mode": Counter()}
    for key, (state, size) in cells.items():
        mode, dtype, _ = key.split("|", 2)
        by["state"][state] += 1
        by["dtype"][f"{dtype}/{state}"] += 1
        by["size"][f"{size}/{state}"] += 1
        by["mode"][f"{mode}/{state}"] += 1
    return {k: dict(v) for k, v in by.items()}


def build(slot: str, impl: str, impl_sources, cells: list[Cell], *, expected_tests: int,
          profile: str, seed: int, wall_seconds: float, test_seconds: float = 0.0,
          capabilities=None) -> dict:
    """The record of one implementation of one slot, from its cells in this run, stating the
    capabilities it declared (`libreyolo.kernels.Capabilities`, None: it declared none)."""
    spec = CATALOGUE[slot]
    source = provenance.source_digest(spec, impl, impl_sources)
    states = {cell_key(c): [c.state, c.size] for c in cells}
    outputs = {cell_key(c): c.measurements["output_digest"]
               for c in cells if c.origin == "suite" and "output_digest" in c.measurements}
    bounded = {cell_key(c): side for c in cells if c.origin == "suite"
               and (side := _reference_side(c))}
    return {
        "format": FORMAT_VERSION, "slot": slot, "impl": impl,
        "source_digest": source["digest"], "source_files": source["files"],
        "catalogue_entry": source["entry"],
        "capabilities": capabilities.as_dict() if capabilities is not None else None,
        "git": provenance.git_state(_digest_paths(source)), "machine": provenance.machine(),
        "profile": profile, "seed": seed, "written": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                   time.gmtime()),
        "wall_seconds": round(wall_seconds, 3), "test_seconds": round(test_seconds, 3),
        "complete": len(cells) == expected_tests,
        "tests": expected_tests,
        "modes": sorted({c.mode for c in cells}),
        "counts": counts(states), "cells": states,
        "worst": _worst(cells), "output_digests": outputs, "bounded": bounded,
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

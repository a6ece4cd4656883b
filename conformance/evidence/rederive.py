"""Re-deriving a record's reference side on CPU, from the seeded inputs it names.

A GPU record claims, per exact cell, the digest of the output it saw (which equalled the CPU
reference there), and per bounded quantity the oracle's digest and largest magnitude, the
portable path's error and the bound made of them. Each cell's inputs are a pure function of the
record's seed, slot, case, dtype and layout, so CPU CI computes the same reference side again
and compares: a record cannot claim bits, or a bound, that the references do not produce.
"""

from __future__ import annotations

import math
from functools import cache

import torch

from conformance.catalogue import CATALOGUE
from conformance.inputs.layouts import digest
from conformance.inputs.shapesets import load
from conformance.running.cells import CellPlan, expected, input_seed
from conformance.schema.bounds import bounded_limit

#: CI's CPU torch may differ from the record's: a bounded record's float measurements are
#: re-derived to this relative tolerance there (bits where the torch versions are equal).
BOUNDED_RTOL = 1e-6


def _plan(slot: str, seed: int, dtype_name: str, case_id: str) -> CellPlan:
    spec = CATALOGUE[slot]
    case_name, _, layout = case_id.partition("@")
    case = next((c for c in load(spec.shapes) if c.name == case_name), None)
    if case is None:
        raise LookupError(f"{slot}: the shape set has no case {case_name!r}")
    dtype = getattr(torch, dtype_name)
    return CellPlan(slot, "reference", "cpu", dtype, case, layout,
                    input_seed(seed, slot, case_name, dtype, layout))


@cache
def exact_digest(slot: str, seed: int, dtype_name: str, case_id: str) -> str:
    """The CPU reference's output digest for one exact cell (modes share it)."""
    plan = _plan(slot, seed, dtype_name, case_id)
    return digest(expected(CATALOGUE[slot], plan).out[0])


@cache
def bounded_side(slot: str, seed: int, dtype_name: str, case_id: str) -> dict:
    """{quantity: {oracle_digest, oracle_max, portable_err, bound}} for one bounded cell."""
    spec = CATALOGUE[slot]
    plan = _plan(slot, seed, dtype_name, case_id)
    want = expected(spec, plan)
    side = {}
    for name, port, oracle in zip(want.names, want.out, want.oracle, strict=True):
        oracle_max = float(oracle.abs().max()) if oracle.numel() else 0.0
        port_err = float((port.double() - oracle).abs().max()) if oracle.numel() else 0.0
        eps = torch.finfo(port.dtype).eps
        side[name] = {"oracle_digest": digest(oracle), "oracle_max": oracle_max,
                      "portable_err": port_err,
                      "bound": bounded_limit(port_err, oracle_max, eps, spec.contract.k,
                                             spec.contract.floor)}
    return side


def _close(a, b) -> bool:
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= BOUNDED_RTOL * max(abs(a), abs(b))


def bounded_mismatch(recorded: dict, derived: dict, same_torch: bool) -> str | None:
    """Where a recorded bounded cell's reference side differs from the re-derived one."""
    if set(recorded) != set(derived):
        return f"quantities {sorted(recorded)} recorded, {sorted(derived)} expected"
    for name, want in derived.items():
        got = recorded[name]
        if same_torch and got.get("oracle_digest") != want["oracle_digest"]:
            return f"{name}: oracle digest {str(got.get('oracle_digest'))[:12]} recorded, " \
                   f"{want['oracle_digest'][:12]} re-derived"
        for field in ("oracle_max", "portable_err", "bound"):
            if field not in got or not _close(got[field], want[field]):
                return f"{name}: {field} {got.get(field)} recorded, {want[field]} re-derived"
    return None

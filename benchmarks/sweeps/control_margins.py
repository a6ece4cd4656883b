"""How far past its bound each `bounded` negative control lands, case by case, on one device.

A control is only evidence where it exceeds the check it names by a clear margin, and on every
device the suite runs on (a control that crashes on CUDA tensors, or lands inside the bound there,
is no control there). For every negative control of a slot with a bounded contract, every
shape-set case of the `thorough` profile (first dtype and layout, as the matrix runs them) is run
through the suite's own cell on DEVICE, and the worst quantity's error over its bound is printed
(> 1: rejected) with the contract's k and floor.

    python benchmarks/sweeps/control_margins.py cpu|cuda [OUT.json] [SLOT,SLOT...]
"""

from __future__ import annotations

import json
import math
import sys

from conformance.catalogue import CATALOGUE
from conformance.inputs.strategies import profile
from conformance.negative import load_controls
from conformance.running.cells import run_cell
from conformance.running.plan import RunOptions, cell_plans


def margins(control, mode: str) -> list[dict]:
    run = RunOptions(profile=profile("thorough"), gpu=mode != "cpu", impl=control.name,
                     slots=frozenset({control.slot}))
    rows = []
    for plan in (p for p in cell_plans(run) if p.mode == mode):
        cell = run_cell(CATALOGUE[control.slot], plan)
        ratios = {name: value["max_abs_err"] / value["bound"]
                  for name, value in cell.measurements.items()
                  if isinstance(value, dict) and value.get("bound")}
        worst = max(ratios.values(), default=math.nan)
        rows.append({"case": cell.case, "dtype": cell.dtype, "state": cell.state,
                     "failed_checks": cell.failed_checks, "worst_error_over_bound": worst,
                     "ratios": ratios, "reason": None if cell.state == "pass" else cell.reason})
    return rows


def main(argv: list[str]) -> int:
    mode = argv[0] if argv else "cpu"
    slots = set(argv[2].split(",")) if len(argv) > 2 else set(CATALOGUE)
    report = {}
    for control in load_controls():
        contract = CATALOGUE[control.slot].contract
        if contract.kind != "bounded" or control.slot not in slots:
            continue
        control.register()
        try:
            rows = margins(control, mode)
        finally:
            control.unregister()
        report[control.name] = {"slot": control.slot, "k": contract.k, "floor": contract.floor,
                                "cases": rows}
        print(f"\n{control.name} ({control.slot}; k={contract.k}, floor={contract.floor} eps)")
        for row in rows:
            print(f"  {row['case']:<44} {row['dtype']:<9} {row['state']:<6} "
                  f"error/bound {row['worst_error_over_bound']:9.3g}")
        rejected = sum(r["state"] == "fail" and "bounded" in r["failed_checks"] for r in rows)
        print(f"  rejected by bounded on {rejected} of {len(rows)} cases")
    if len(argv) > 1 and argv[1] != "-":
        with open(argv[1], "w") as file:
            json.dump(report, file, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

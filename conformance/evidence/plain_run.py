"""The plain GPU run as evidence: `pytest conformance/ --gpu -n auto`, written by the run itself.

The command a kernel author runs first covers every registered implementation, the references
included, under the default profile. Unlike the parity records (one per in-tree implementation,
from `--record` runs), its verdict is about the tree as a whole: when such a run ends, the process
that saw every report writes `conformance/records/plain_gpu_run.json` with the counts by state,
the failing cells, the negative controls' verdicts, the test outcomes, the GPUs that ran cells,
the machine and the declared stack, the commit, and the source digest of every implementation it
ran. CPU CI (`tests/conformance/test_plain_run.py`) re-derives what it can and fails when the
evidence is missing, not green, or covered other sources than HEAD's. Nobody edits it by hand:
`python -m conformance.evidence.rerecord` runs the command again when it is stale.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from conformance.evidence import provenance, stack
from conformance.running.matrix import Cell, json_safe

COMMAND = "pytest conformance/ --gpu -n auto"
EVIDENCE_FILE = Path(__file__).resolve().parents[1] / "records" / "plain_gpu_run.json"
FORMAT_VERSION = 1
SUITE_ORIGINS = ("suite", "hypothesis", "errors")


def cell_id(cell: Cell) -> str:
    return f"{cell.slot}:{cell.impl}:{cell.mode}:{cell.dtype}:{cell.case}:{cell.origin}"


def state_counts(cells: dict[str, str]) -> dict[str, int]:
    """Counts by state of the evidence's `cells` (id -> state), as a reader re-derives them."""
    return dict(sorted(Counter(cells.values()).items()))


def digests(pairs) -> dict[str, dict]:
    """`slot/impl` -> its source digest and files, for each registered (slot, impl) pair."""
    from conformance.catalogue import CATALOGUE
    from libreyolo.kernels import registered

    out = {}
    for slot, name in sorted(pairs):
        impl = next((i for i in registered(slot) if i.name == name), None)
        if impl is None:
            continue
        source = provenance.source_digest(CATALOGUE[slot], name, impl.sources)
        out[f"{slot}/{name}"] = {"digest": source["digest"], "files": source["files"]}
    return out


def build(cells: list[Cell], controls: list[dict], outcomes: dict, gpus: list[dict],
          seconds: dict, *, profile: str, seed: int, workers: int, wall_seconds: float) -> dict:
    suite = [c for c in cells if c.origin in SUITE_ORIGINS]
    states = {cell_id(c): c.state for c in suite}
    covered = digests({(c.slot, c.impl) for c in suite})
    files = {f for entry in covered.values() for f in entry["files"]}
    failing = [{"cell": cell_id(c), "state": c.state, "checks": c.failed_checks,
                "reason": (c.reason or "")[:500], "reproduce": c.reproduce}
               for c in suite if c.state in ("fail", "crash")]
    machine = provenance.machine()
    return json_safe({
        "format": FORMAT_VERSION, "command": COMMAND, "profile": profile, "seed": seed,
        "workers": workers, "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_seconds": round(wall_seconds, 1),
        "git": provenance.git_state([provenance.ROOT / f for f in files]),
        "machine": machine, "stack": stack.declared()["gpu"],
        "stack_problems": stack.machine_problems(machine),
        "gpus": sorted(gpus, key=lambda g: (g.get("index", 0), g.get("uuid", ""))),
        "outcomes": dict(sorted(outcomes.items())), "counts": state_counts(states),
        "failing": failing,
        "controls": sorted(controls, key=lambda c: c["name"]),
        "seconds_by_slot": {k: round(v, 1) for k, v in sorted(seconds.items())},
        "sources": covered, "cells": dict(sorted(states.items())),
    })


def write(evidence: dict, path: Path = EVIDENCE_FILE) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(evidence, indent=1, sort_keys=True, allow_nan=False) + "\n")
    return path


def load(path: Path = EVIDENCE_FILE) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def problems(evidence: dict | None, current: dict[str, dict], control_names: set[str]) -> list:
    """Why `evidence` does not show a green plain GPU run of today's tree (empty: it does).
    `current`: `digests(...)` of every implementation registered now; `control_names`: every
    negative control the suite holds."""
    if evidence is None:
        return [f"no evidence of the plain GPU run ({EVIDENCE_FILE.name}): run `{COMMAND}` on "
                "a GPU of the declared stack, or `python -m conformance.evidence.rerecord`"]
    if evidence.get("format") != FORMAT_VERSION:
        return [f"the evidence has format {evidence.get('format')}, not {FORMAT_VERSION}"]
    found = []
    cells = evidence.get("cells") or {}
    if evidence.get("counts") != state_counts(cells):
        found.append("its counts are not the counts of its cells")
    bad = {s: n for s, n in state_counts(cells).items() if s in ("fail", "crash")}
    outcomes = evidence.get("outcomes") or {}
    if bad or outcomes.get("failed", 0) or outcomes.get("error", 0) or not outcomes.get("passed"):
        found.append(f"the run was not green: cells {bad or 'no fail'}, tests {outcomes}; "
                     f"first failing: {[f['cell'] for f in evidence.get('failing', [])[:3]]}")
    verdicts = {c["name"]: c["killed"] for c in evidence.get("controls", [])}
    survived = sorted(n for n, killed in verdicts.items() if not killed)
    missing = sorted(control_names - verdicts.keys())
    if survived or missing:
        found.append(f"negative controls not rejected: survived {survived}, not run {missing}")
    if evidence.get("stack_problems") or stack.machine_problems(evidence.get("machine") or {}):
        found.append("its machine is not on the declared GPU stack: "
                     f"{stack.machine_problems(evidence.get('machine') or {})}")
    git = evidence.get("git") or {}
    if git.get("dirty", True) or not isinstance(git.get("commit"), str):
        found.append("it ran on a DIRTY tree (or names no commit): commit, then run it again")
    elif not provenance.in_history(git["commit"]):
        found.append(f"its commit {git['commit'][:12]} is not in this repository's history")
    ran = evidence.get("sources") or {}
    for key in sorted(current.keys() | ran.keys()):
        if key not in ran:
            found.append(f"{key} is registered now but the run did not cover it")
        elif key not in current:
            found.append(f"{key} was run but is no longer registered")
        elif ran[key]["digest"] != current[key]["digest"]:
            old, new = ran[key]["files"], current[key]["files"]
            changed = sorted(f for f in old.keys() | new.keys() if old.get(f) != new.get(f))
            found.append(f"{key}: the run covered other sources (changed: "
                         f"{', '.join(changed[:5]) or 'the catalogue entry'})")
    return found

"""Writes parity records during a `--gpu --record --profile thorough` run, each as soon as all of
its implementation's tests have reported (in the process that sees every report).

It asks the scan (`scan.py`), not the gate, what to record: this module is in every record's
source digest, with what it imports, and the gate's checks must be free to change without
staling every record."""

from __future__ import annotations

import re
import time
from collections import defaultdict

from conformance.evidence import records, scan
from conformance.running.matrix import Cell

_SLOT_IMPL = re.compile(r"test_(?:matrix|layouts)\.py::\w+\[([^:\[\]]+):([^:\[\]]+):")


def slot_impl(nodeid: str) -> tuple[str, str] | None:
    """(slot, implementation) of a matrix or hypothesis-layout test; None for any other test."""
    match = _SLOT_IMPL.search(nodeid)
    return (match.group(1), match.group(2)) if match else None


class Recorder:
    def __init__(self, profile: str, seed: int, directory=records.RECORDS_DIR):
        self.profile, self.seed, self.directory = profile, seed, directory
        self.targets = {(t.slot, t.impl): t for t in scan.in_tree_targets()}
        self.pending: dict[tuple, set] = {}
        self.cells: dict[tuple, list[Cell]] = defaultdict(list)
        self.tests: dict[tuple, int] = {}
        self.seconds: dict[tuple, float] = defaultdict(float)
        self.started = time.perf_counter()
        self.written: list[str] = []
        self.failed: list[str] = []

    def expect(self, nodeids) -> None:
        """The collected tests; only their in-tree implementations get records."""
        if self.pending:
            return
        for nodeid in nodeids:
            key = slot_impl(nodeid)
            if key in self.targets:
                self.pending.setdefault(key, set()).add(nodeid)
        self.tests = {key: len(ids) for key, ids in self.pending.items()}

    def report(self, nodeid: str, cells: list[Cell], seconds: float = 0.0) -> None:
        """One finished test of a recorded implementation, its cells and how long it ran."""
        key = slot_impl(nodeid)
        if key not in self.pending:
            return
        self.cells[key].extend(cells)
        self.seconds[key] += seconds
        self.pending[key].discard(nodeid)
        if not self.pending[key]:
            del self.pending[key]
            try:
                record = records.build(
                    *key, self.targets[key].sources, self.cells[key],
                    expected_tests=self.tests[key], profile=self.profile, seed=self.seed,
                    wall_seconds=time.perf_counter() - self.started,
                    test_seconds=self.seconds[key],
                    capabilities=self.targets[key].capabilities)
                self.written.append(str(records.write(record, self.directory)))
            except Exception as exc:  # noqa: BLE001 - one record's failure must not end the run
                self.failed.append(f"{key[0]}/{key[1]}: {type(exc).__name__}: {exc}")

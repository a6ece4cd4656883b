"""Re-record what the gate reports, and nothing else: `python -m conformance.evidence.rerecord`.

Its evidence too: when the plain GPU run's (`conformance/evidence/plain_run.py`) does not cover
today's tree, the plain command runs last, after the records.

On a CUDA machine of the declared stack (conformance/stack.toml), from a clean checkout with its
.git: finds every in-tree implementation whose record is missing or does not make it green,
packs their slots into groups of at most `--budget` seconds of estimated run time (estimated
from each slot's previous record: its tests' summed seconds over the workers), and runs the
suite's record command once per group. Each group's records are complete when it ends, whatever
happens to the next. `--dry-run` prints the plan without a GPU.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

from conformance.evidence import awaiting, gate, plain_run, provenance, records, scan

#: Seconds a slot's thorough run is assumed to add to a group when no earlier record says: on the
#: H200 with 15 workers eleven slots took 122 s in one group (benchmarks/NOTES.md, "Re-record
#: timings"), ~11 s a slot; a new slot's compiles are unknown, so count it nearly three times that.
UNKNOWN_SLOT_SECONDS = 30.0
#: What one group costs beyond its tests: interpreter and worker start-up, collection.
GROUP_OVERHEAD_SECONDS = 40.0


@dataclass
class Group:
    impl: str
    slots: list = field(default_factory=list)
    seconds: float = GROUP_OVERHEAD_SECONDS

    def command(self, workers: int) -> list[str]:
        return [sys.executable, "-m", "pytest", "conformance/", "-q", "-p", "no:cacheprovider",
                "--gpu", "--record", "--profile", records.RECORD_PROFILE, "--impl", self.impl,
                "--slot", ",".join(self.slots), "-n", str(workers), "--dist", "worksteal"]


def estimate(target: scan.Target, workers: int) -> float:
    """Seconds `target`'s slot adds to a group: its last record's test time over the workers."""
    record = records.load(target.slot, target.impl) or {}
    seconds = record.get("test_seconds")
    return float(seconds) / workers if seconds else UNKNOWN_SLOT_SECONDS


def stale_targets() -> list[tuple[scan.Target, str]]:
    """Each in-tree target the gate does not find green, with the gate's reason."""
    found = []
    for target in scan.in_tree_targets():
        problem = gate.record_problem(target, records.load(target.slot, target.impl),
                                      gate.current_digest(target))
        if problem is not None:
            found.append((target, problem))
    return found


def plain_run_problems() -> list[str]:
    """Why the plain GPU run's evidence does not cover today's tree (empty: it does)."""
    from conformance.negative import load_controls

    return plain_run.problems(plain_run.load(), plain_run.digests(registered_pairs()),
                              {c.name for c in load_controls()})


def registered_pairs() -> set[tuple[str, str]]:
    """(slot, implementation) of everything registered here: the plain run covers them all."""
    from conformance.catalogue import CATALOGUE
    from libreyolo.kernels import registered

    return {(slot, impl.name) for slot in CATALOGUE for impl in registered(slot)}


def plain_command() -> list[str]:
    """`pytest conformance/ --gpu -n auto` (plain_run.COMMAND) with this interpreter."""
    return [sys.executable, "-m", *plain_run.COMMAND.split()]


def unrunnable_here(targets: list[scan.Target]) -> dict[scan.Target, str]:
    """The targets this machine cannot run, with their environment check's reason: a Hub
    kernel whose artifact cannot be fetched (no network) has no record to make here, and a run of
    only declined cells would be no record of the kernel (docs/hub_kernels.md)."""
    from libreyolo.kernels import registry

    reasons = {t: registry.decline_reason(t.slot, t.impl) for t in targets}
    return {t: reason for t, reason in reasons.items() if reason is not None}


def plan(targets: list[scan.Target], budget: float, workers: int) -> list[Group]:
    """First-fit-decreasing packing of slots into groups of one implementation name each."""
    groups: list[Group] = []
    ranked = sorted(targets, key=lambda t: -estimate(t, workers))
    for target in ranked:
        cost = estimate(target, workers)
        group = next((g for g in groups if g.impl == target.impl and g.seconds + cost <= budget),
                     None)
        if group is None:
            group = Group(target.impl)
            groups.append(group)
        group.slots.append(target.slot)
        group.seconds += cost
    return groups


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.evidence.rerecord",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=540.0,
                        help="seconds of estimated run time per group (default 540)")
    parser.add_argument("-n", "--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                        help="pytest-xdist workers (default: one per core but one)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan; run nothing")
    args = parser.parse_args(argv)

    stale, plain = stale_targets(), plain_run_problems()
    for _, problem in stale:
        print(f"stale: {problem}")
    for problem in plain:
        print(f"plain GPU run: {problem}")
    if not stale and not plain:
        print("every in-tree implementation has a green record and the plain GPU run covers "
              "today's tree: nothing to re-record")
        return 0
    unrunnable: dict = {}
    if not args.dry_run:  # a dry run plans every stale target: it may run where nothing can
        import torch

        if not torch.cuda.is_available():
            print("no CUDA device: records come from a GPU of the declared stack",
                  file=sys.stderr)
            return 2
        unrunnable = unrunnable_here([t for t, _ in stale])
        for target, reason in unrunnable.items():
            print(f"not recorded here: {target.slot}/{target.impl}: {reason}")
    groups = plan([t for t, _ in stale if t not in unrunnable], args.budget, args.workers)
    for i, group in enumerate(groups):
        print(f"group {i}: ~{group.seconds:.0f} s: {' '.join(group.command(args.workers))}")
    if plain:
        print(f"then the plain GPU run: {' '.join(plain_command())}")
    if args.dry_run:
        return 0
    failed = 0
    for i, group in enumerate(groups):
        failed += _timed(f"group {i}", group.command(args.workers))
    if awaiting.write():  # new records take their implementations off the list
        print(f"{awaiting.AWAITING_RECORD_FILE.name} rewritten: commit it with the records")
    if plain:  # last: the evidence covers the records' sources as they are now
        failed += _timed("plain GPU run", plain_command())
    left = [(t, problem) for t, problem in stale_targets() if t not in unrunnable]
    for _, problem in left:
        print(f"still not green: {problem}")
    for problem in plain_run_problems() if plain else ():
        print(f"plain GPU run still not green: {problem}")
        failed += 1
    return 1 if failed or left else 0


def _timed(what: str, command: list[str]) -> int:
    """Run `command` in the repository; 1 if it failed."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=provenance.ROOT)
    print(f"{what}: exit {done.returncode} in {time.perf_counter() - start:.0f} s")
    return int(done.returncode != 0)


if __name__ == "__main__":
    raise SystemExit(main())

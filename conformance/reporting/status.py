"""``python -m conformance.reporting.status [--json]``: what runs here, per slot, with each
implementation's parity-record state, as the gate judges it. The runtime's own report (``python -m
libreyolo.kernels``) knows nothing of the suite or its records; this command adds them."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from conformance.evidence import gate, records, scan
from libreyolo.kernels import cli
from libreyolo.kernels.providers import IN_TREE
from libreyolo.kernels.registry import Implementation, awaiting_record


def record_states() -> Callable[[Implementation], str | None]:
    """A function giving an implementation's parity-record state: ``green``, ``stale`` (the
    record checked other sources), ``not green`` (it failed, or is partial or dirty),
    ``awaiting`` (listed in awaiting_record.toml), ``none``; None for a reference."""

    def state(impl: Implementation) -> str | None:
        if impl.is_reference:
            return None
        if f"{impl.op}/{impl.name}" in awaiting_record():
            return "awaiting"
        record = records.load(impl.op, impl.name) if impl.origin == IN_TREE else None
        if record is None:
            return "none"
        target = scan.Target(impl.op, impl.name, impl.sources, impl.capabilities)
        current = gate.current_digest(target)
        if record.get("source_digest") != current["digest"]:
            return "stale"
        return "green" if gate.record_problem(target, record, current) is None else "not green"

    return state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.reporting.status",
                                     description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    data = cli.report(versions_too=True, record_state=record_states())
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        print()
        return 0
    for name, slot in data["slots"].items():
        print(f"{name}  ->  {slot['selected'] or 'portable path'}")
        for impl in slot["implementations"]:
            if impl["record"] is not None:
                print(f"  {impl['name']:<16} record {impl['record']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

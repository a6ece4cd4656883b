"""``python -m libreyolo.kernels``: what runs here, per slot, and why the others do not."""

from __future__ import annotations

import argparse
import json
import sys

from . import settings
from .registry import explain
from .slots import SLOTS


def report() -> dict:
    """Settings in effect and, per slot, its implementations newest first with their status."""
    slots = {}
    for slot in SLOTS:
        rows = explain(slot.name)
        selected = next((impl.name for impl, reason in rows if reason is None), None)
        slots[slot.name] = {
            "reference": slot.reference,
            "selected": selected or "unavailable",
            "implementations": [
                {"name": impl.name, "eligible": reason is None, "reason": reason}
                for impl, reason in rows
            ],
        }
    return {"settings": settings.in_effect(), "slots": slots}


def _print_text(data: dict) -> None:
    print("settings:")
    for name, value in data["settings"].items():
        print(f"  {name}={value if value is not None else '(unset)'}")
    for name, slot in data["slots"].items():
        print(f"\n{name}  ->  {slot['selected']}")
        if not slot["implementations"]:
            print("  (no implementation registered; callers keep their portable path)")
        for impl in slot["implementations"]:
            if impl["name"] == slot["selected"]:
                status = "selected"
            elif impl["eligible"]:
                status = "eligible"
            else:
                status = f"declines: {impl['reason']}"
            print(f"  {impl['name']:<16} {status}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m libreyolo.kernels", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    data = report()
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        print()
    else:
        _print_text(data)
    return 0

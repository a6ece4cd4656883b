"""``python -m libreyolo.kernels``: what runs here, per slot, and why the others do not."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import platform
import sys
from collections.abc import Callable

import torch

from . import settings
from .capabilities import described
from .providers import PACKAGE
from .registry import Implementation, explain, loading
from .slots import SLOTS


def versions() -> dict[str, str | None]:
    """Python, torch, triton (without importing it), CUDA and the GPU (None: absent)."""
    try:
        triton = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton = None
    cuda = torch.cuda.is_available()
    return {"python": platform.python_version(), "torch": torch.__version__, "triton": triton,
            "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0) if cuda else None}


def report(*, versions_too: bool = False,
           record_state: Callable[[Implementation], str | None] | None = None) -> dict:
    """Settings in effect and, per slot, its implementations newest first with their status;
    with ``versions_too`` the versions, and with ``record_state`` (what the conformance suite's
    ``python -m conformance.reporting.status`` passes: the runtime knows nothing of parity
    records) each implementation's parity-record state."""
    state = record_state
    slots = {}
    for slot in SLOTS:
        rows = explain(slot.name)
        selected = next((impl.name for impl, reason in rows if reason is None), None)
        implementations = []
        for impl, reason in rows:
            declared = impl.capabilities
            row = {"name": impl.name, "eligible": reason is None, "reason": reason,
                   "origin": impl.origin,
                   "capabilities": declared.as_dict() if declared is not None else None}
            if state is not None:
                row["record"] = state(impl)
            implementations.append(row)
        slots[slot.name] = {"reference": slot.reference, "selected": selected or "unavailable",
                            "implementations": implementations}
    data = {"settings": settings.in_effect(), "slots": slots}
    if versions_too:
        data = {"versions": versions(), **data}
    return data


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
            print(f"  {impl['name']:<16} {impl['origin']:<12} {status}")
            if impl["capabilities"] is not None:
                print(f"  {'':<16} {'':<12} declares {described(impl['capabilities'])}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m libreyolo.kernels", description=__doc__)
    parser.add_argument("--json", action="store_true",
                        help="print the report as JSON, with versions (parity-record states: "
                             "python -m conformance.reporting.status, in a source checkout)")
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="PKG",
                        help="import PKG first, so the implementations it registers are shown "
                             "(repeatable)")
    args = parser.parse_args(argv)
    for module in args.imports:
        try:
            with loading(PACKAGE):
                importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - reported as the argument's error
            parser.error(f"--import {module}: {type(exc).__name__}: {exc}")
    data = report(versions_too=args.json)
    if args.json:
        json.dump(data, sys.stdout, indent=2)
        print()
    else:
        _print_text(data)
    return 0

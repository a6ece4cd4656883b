"""``python -m libreyolo.kernels``: what runs here, per slot, why it won, and why the others do
not; with the warnings a slot call would give about the settings in effect."""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

import libreyolo

from . import settings
from .capabilities import described
from .providers import CALLER, IN_TREE, PACKAGE
from .registry import REFERENCE, Implementation, candidates, explain, loading
from .slots import SLOTS, Slot


def versions() -> dict[str, str | None]:
    """Python, torch, triton (without importing it), CUDA and the GPU (None: absent)."""
    try:
        triton = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton = None
    cuda = torch.cuda.is_available()
    return {"python": platform.python_version(), "torch": torch.__version__, "triton": triton,
            "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0) if cuda else None}


def package() -> dict[str, str | None]:
    """libreyolo's version, and the commit checked out when it runs from a git checkout (None
    elsewhere, e.g. installed from a wheel, or without git)."""
    root = Path(libreyolo.__file__).resolve().parents[1]
    commit = None
    if (root / ".git").exists():
        try:
            done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                                  capture_output=True, text=True, timeout=10, check=False)
            commit = done.stdout.strip() if done.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            commit = None
    return {"version": libreyolo.__version__, "commit": commit}


def _why(slot: Slot, eligible: list[Implementation], declining: list[str],
         selection: settings.Selection) -> str:
    """Why the selected implementation runs (or, with none eligible, the caller's portable path),
    in the registry's own terms: the selection, the newest eligible registration, or what is
    left when the others decline."""
    choice = selection.choice(slot.name)
    names = " and ".join(filter(None, (", ".join(declining[:-1]), *declining[-1:])))
    others = f"{names} decline{'s' if len(declining) == 1 else ''}"
    if eligible and not eligible[0].is_reference:
        if choice == eligible[0].name:
            return f"{selection.source} selects it"
        later = [impl.name for impl in eligible[1:]]
        then = f"; an input it declines goes to {', then '.join(later)}" if later else ""
        return f"the newest registration whose environment checks pass{then}"
    if choice == REFERENCE:
        what = "the reference" if eligible else "the callers' portable path"
        return f"{selection.source} forces {what}"
    if eligible:
        return f"only the reference is eligible: {others}" if declining else \
            "the reference is the only implementation registered"
    portable = f"callers run their portable path, {slot.portable}"
    return f"no implementation is eligible ({others}); {portable}" if declining else \
        f"no implementation is registered; {portable}"


def _slot_report(slot: Slot, selection: settings.Selection,
                 record_state: Callable[[Implementation], str | None] | None) -> dict:
    eligible = candidates(slot.name)
    rows = explain(slot.name)
    implementations = []
    for impl, reason in rows:
        declared = impl.capabilities
        row = {"name": impl.name, "eligible": reason is None, "reason": reason,
               "origin": impl.origin, "provider": impl.provider,
               "capabilities": declared.as_dict() if declared is not None else None}
        if record_state is not None:
            row["record"] = record_state(impl)
        implementations.append(row)
    declining = [impl.name for impl, reason in rows if reason is not None]
    return {"reference": slot.reference, "portable": slot.portable,
            "selected": eligible[0].name if eligible else None,
            "why": _why(slot, eligible, declining, selection),
            "implementations": implementations}


def _setting_errors() -> list[str]:
    """What a setting read where it is used (not by the selection) would raise, as it raises it."""
    try:
        settings.fp8_fast_accumulation()
    except ValueError as exc:
        return [f"ValueError: {exc} (the fused FP8 linear raises this on its next call)"]
    return []


def report(*, versions_too: bool = False,
           record_state: Callable[[Implementation], str | None] | None = None) -> dict:
    """Settings in effect, the warnings and errors they give, and, per slot, its implementations
    newest first with their status, the selected one and why; with ``versions_too`` libreyolo's
    version and commit and the versions, and with ``record_state`` (what the conformance
    suite's ``python -m conformance.reporting.status`` passes: the runtime knows nothing of
    parity records) each implementation's parity-record state.

    Each slot is resolved as a call resolves it, so the registry's warnings (an unknown slot or
    name in ``LIBREYOLO_KERNELS``, a raising predicate, a provider that failed to import) are
    caught and listed under ``warnings``; a process warns of each once, so they are complete
    in the first report of a process."""
    selection = settings.selection()
    with warnings.catch_warnings(record=True) as caught:
        slots = {slot.name: _slot_report(slot, selection, record_state) for slot in SLOTS}
    problems = [f"{w.category.__name__}: {w.message}" for w in caught] + _setting_errors()
    data = {"settings": settings.in_effect(), "warnings": problems, "slots": slots}
    if versions_too:
        data = {"libreyolo": package(), "versions": versions(), **data}
    return data


def _print_text(data: dict) -> None:
    print("settings:")
    for name, value in data["settings"].items():
        print(f"  {name}={value if value is not None else '(unset)'}")
    for name, slot in data["slots"].items():
        print(f"\n{name}  ->  {slot['selected'] or 'portable path'}  ({slot['why']})")
        for impl in slot["implementations"]:
            if impl["name"] == slot["selected"]:
                status = "selected"
            elif impl["eligible"]:
                status = "eligible"
            else:
                status = f"declines: {impl['reason']}"
            origin = impl["origin"] if impl["origin"] in (IN_TREE, CALLER) \
                else f"{impl['origin']} ({impl['provider']})"  # which package installed it
            print(f"  {impl['name']:<16} {origin:<12} {status}")
            if impl["capabilities"] is not None:
                print(f"  {'':<16} {'':<12} declares {described(impl['capabilities'])}")


def _version_line() -> str:
    info = package()
    commit = f" (commit {info['commit']})" if info["commit"] else ""
    return f"libreyolo {info['version']}{commit}"


def _run(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m libreyolo.kernels", description=__doc__)
    parser.add_argument("--json", action="store_true",
                        help="print the report as JSON, with libreyolo's version and commit and "
                             "the versions (parity-record states: python -m "
                             "conformance.reporting.status, in a source checkout)")
    parser.add_argument("--import", dest="imports", action="append", default=[], metavar="PKG",
                        help="import PKG first, so the implementations it registers are shown "
                             "(repeatable)")
    parser.add_argument("--version", action="store_true",
                        help="print libreyolo's version (and git commit, in a checkout) and exit")
    args = parser.parse_args(argv)
    if args.version:
        print(_version_line())
        sys.stdout.flush()
        return 0
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
    sys.stdout.flush()  # a closed pipe raises here, inside main, not at the interpreter's exit
    for problem in data["warnings"]:
        print(f"warning: {problem}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command; a reader that stops early (``| head``) ends it quietly, with status 1, as
    Python's documentation recommends for a closed pipe."""
    try:
        return _run(argv)
    except BrokenPipeError:
        # nothing more reaches the reader; stdout goes to devnull so the exit flush is quiet
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1

"""The awaiting list, generated: `libreyolo/kernels/awaiting_record.toml` names every in-tree
implementation that has no parity record yet, so the registry selects it only by name.

The list is a fact of the tree (the registrations, and the records under `conformance/records/`),
so it is written, not kept by hand: `python -m conformance.evidence.awaiting` writes it, and the
gate's tests hold the committed file to what it writes. A record, once it exists, takes its
implementation off the list whatever it says: a stale or red record is the gate's failure to
fix, never a quiet way back to "awaiting". An awaiting Hub implementation (one that lists the Hub
lock among its sources) also carries the pin it awaits a record for, copied from the lock, so a
pin cannot move without this file moving with it (`hub_pins.py`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

from conformance.evidence import hub_pins, records, scan
from libreyolo.kernels import registered
from libreyolo.kernels.hub import lock
from libreyolo.kernels.registry import AWAITING_RECORD_FILE

COMMAND = "python -m conformance.evidence.awaiting"
HEADER = f"""\
# In-tree implementations that have no CUDA parity record yet. GENERATED from the registrations
# and conformance/records/ by `{COMMAND}`; do not edit.
#
# The rule: no implementation is selected by default without a green parity matrix recorded on a
# CUDA runner. An implementation listed here stays registered (the CLI shows it, the conformance
# suite tests it, the Triton interpreter runs it) but is selected only when asked for by name:
# LIBREYOLO_KERNELS=<slot>=<name>. Its first record (`python -m conformance.evidence.rerecord` on
# a declared GPU) takes it off the list; from then on the gate holds it to that record.
#
# An awaiting Hub implementation also names the pin it awaits a record for, copied from
# libreyolo/kernels/hub/hub_kernels.lock.toml: a pin cannot move without this file moving too.
"""


def _listed_pin(target) -> dict | None:
    """The lock's pin a Hub implementation loads (its provider module's ``HUB_KERNEL``), or None
    for an implementation that does not list the lock among its sources."""
    if not hub_pins.pins_lock(target, lock.LOCK_FILE):
        return None
    provider = next(impl.fn.__module__ for impl in registered(target.slot)
                    if impl.name == target.impl)
    name = getattr(importlib.import_module(provider), "HUB_KERNEL", None)
    if name is None:
        raise ValueError(f"{target.key} lists the Hub lock among its sources, but its provider "
                         f"{provider} names no HUB_KERNEL (the lock's name for its pin)")
    return lock.pin(name).as_dict()


def text(targets=None, load: Callable[[str, str], dict | None] = records.load) -> str:
    """The awaiting list of `targets` (default: the scan's in-tree targets), as the file says."""
    targets = scan.in_tree_targets() if targets is None else targets
    waiting = sorted((t for t in targets if load(t.slot, t.impl) is None), key=lambda t: t.key)
    lines = [HEADER, f"awaiting = {json.dumps([t.key for t in waiting])}"]
    for target in waiting:
        pin = _listed_pin(target)
        if pin is not None:
            variants = ", ".join(f"{json.dumps(k)} = {json.dumps(v)}"
                                 for k, v in sorted(pin["variants"].items()))
            lines += ["", f'[hub."{target.key}"]', f"repo = {json.dumps(pin['repo'])}",
                      f"revision = {json.dumps(pin['revision'])}", f"variants = {{{variants}}}"]
    return "\n".join(lines) + "\n"


def write(want: str | None = None, path: Path = AWAITING_RECORD_FILE) -> bool:
    """Write the awaiting list (`want`, default `text()`) where it is not current; whether it
    changed."""
    want = text() if want is None else want
    if path.exists() and path.read_text() == want:
        return False
    path.write_text(want)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 when the committed file is not current")
    args = parser.parse_args(argv)
    want = text()
    if args.check:
        current = AWAITING_RECORD_FILE.read_text() if AWAITING_RECORD_FILE.exists() else ""
        if current != want:
            print(f"{AWAITING_RECORD_FILE} is not current: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    changed = write(want)
    print(f"{AWAITING_RECORD_FILE}: {'written' if changed else 'current'}\n"
          f"{want[len(HEADER):].strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

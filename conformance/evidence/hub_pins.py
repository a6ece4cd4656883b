"""The Hub lock as a gate input (`libreyolo/kernels/hub/hub_kernels.lock.toml`).

A Hub implementation lists the lock among its sources, so a green record's digest covers the
lock's exact content and any change to it stales the record (the gate's `_stale` check). An
implementation still awaiting its record names the pin it awaits in
`libreyolo/kernels/awaiting_record.toml` (`[hub."slot/name"]`, copied from the lock by
`awaiting.py`); the lock must say the same, so a pin cannot move without the awaiting list being
regenerated with it. Every lock pin is covered one way or the other.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from libreyolo.kernels.hub import lock
from libreyolo.kernels.registry import AWAITING_RECORD_FILE


def awaiting_pins(path: Path = AWAITING_RECORD_FILE) -> dict[str, dict]:
    """`slot/name` -> the pin (repo, revision, variants) that implementation awaits a record for."""
    with Path(path).open("rb") as file:
        return tomllib.load(file).get("hub", {})


def pins_lock(target, lock_file: Path) -> bool:
    """Whether `target` lists `lock_file` among its sources (it loads a Hub pin)."""
    return any(Path(source).resolve() == Path(lock_file).resolve() for source in target.sources)


def problems(targets, awaited: frozenset[str], pins_awaited: dict[str, dict],
             pins: dict[str, lock.HubPin], lock_file: Path) -> list[str]:
    """Why the lock and the awaiting entries disagree (empty: they agree).

    `targets`: the gate's in-tree targets; `awaited`: the awaiting list; `pins_awaited`: its
    `[hub]` table; `pins`: the lock's pins, read from `lock_file`.
    """
    found, by_key = [], {t.key: t for t in targets}
    by_repo = {p.repo: p for p in pins.values()}
    for key, want in sorted(pins_awaited.items()):
        target = by_key.get(key)
        if target is None or key not in awaited:
            found.append(f"awaiting_record.toml pins {key}, which is not an in-tree "
                         "implementation listed as awaiting its record")
            continue
        if not pins_lock(target, lock_file):
            found.append(f"{key} does not list {lock_file.name} among its sources")
        have = by_repo.get(want.get("repo"))
        if have is None or have.as_dict() != want:
            found.append(f"{key} awaits a record for {want}, the lock pins "
                         f"{have.as_dict() if have else 'no such repository'}: bump both "
                         "together (docs/hub_kernels.md, 'Bumping a pin')")
    awaited_repos = {want.get("repo") for want in pins_awaited.values()}
    recorded = [t for t in targets if t.key not in awaited and pins_lock(t, lock_file)]
    for pin in pins.values():
        if pin.repo not in awaited_repos and not recorded:
            found.append(f"the lock pins {pin.repo}@{pin.revision[:12]}, which no awaiting entry "
                         "names and no gated implementation's record covers")
    return found

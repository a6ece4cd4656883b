"""A disabled implementation is a failure, never a decline.

The registry disables an implementation for the rest of the process when one of its calls fails
and the slot's judge takes the input (`libreyolo.kernels.dispatch`): from then on it declines
every input as the environment's doing. In a conformance run that would turn every later cell of
it into `not-applicable` and a broken backend green, so the suite asks the registry first: a
disabled implementation's cells fail with check `disabled`, naming the first failure and where it
happened (the cell, or the test whose call reached it through `dispatch`).
"""

from __future__ import annotations

CHECK = "disabled"

#: (slot, implementation) -> (the registry's failure message, where it was first seen)
_seen: dict[tuple[str, str], tuple[str, str]] = {}


def _failures() -> dict[tuple[str, str], str]:
    from libreyolo.kernels import failures

    return failures()


def snapshot() -> dict[tuple[str, str], str]:
    """The implementations disabled now, with what failed."""
    return _failures()


def note(before: dict, where: str) -> None:
    """Attribute every implementation disabled since `before` (a `snapshot`) to `where`."""
    for key, what in _failures().items():
        if before.get(key) != what and _seen.get(key, (None,))[0] != what:
            _seen[key] = (what, where)


def reason(slot: str, impl: str) -> str | None:
    """Why `impl` counts as failed in every cell from now on (None: it is not disabled)."""
    what = _failures().get((slot, impl))
    if what is None:
        return None
    seen_what, where = _seen.get((slot, impl), (None, None))
    place = where if seen_what == what else "outside any test of this run (at import or collection)"
    return (f"{CHECK}: the registry disabled {slot}/{impl} after a failure ({what}), first in "
            f"{place}; every later call of it runs the next implementation instead")

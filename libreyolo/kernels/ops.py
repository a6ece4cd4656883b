"""Callable entry points, one per slot: ``ops.fake_quant_fp8(x, scale)`` dispatches the slot.

Derived from the slot catalogue, so a new slot needs no edit here.
"""

from __future__ import annotations

import functools

from .registry import dispatch
from .slots import get_slot, slot_names


@functools.cache
def _entry_point(name: str):
    """``dispatch`` bound to the slot: a C-level partial, no Python frame of its own per call
    (every slot call comes through here, and a Python frame with ``**kwargs`` is a measurable
    share of a call: ``benchmarks/NOTES.md``, "Host-side helpers")."""
    slot = get_slot(name)
    call = functools.partial(dispatch, name)
    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"{slot.doc}. Dispatches slot {name!r} (see libreyolo.kernels.dispatch)."
    return call


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        entry = _entry_point(name)
    except ValueError as exc:
        raise AttributeError(str(exc)) from None
    globals()[name] = entry  # later lookups find it directly, without this hook
    return entry


def __dir__() -> list[str]:
    return sorted(slot_names())

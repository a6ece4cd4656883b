"""The runtime registry: which implementation of a slot runs, and why the others do not.

Implementations are kept newest first; the reference (name ``reference``, registered by the
registry itself from the slot catalogue) always sits last. Eligibility has two levels:

* the *predicate* (zero arguments, memoized): can this implementation run here at all
  (CUDA present, triton importable, a setting)? It returns True, or False or a reason string;
* *accepts* (called with the slot's arguments): does it take this input? It returns ``None`` to
  take it, a reason string to decline, or a ``Prepared`` plan to take it with the validation and
  planning done once: the call then gets it as ``prepared=``. A declined input goes to the next
  implementation. Before it, an implementation that declared its ``Capabilities`` declines what
  lies outside them (``capabilities.py``), with a reason derived from the declaration.

The environment's part of the decision (slot, selection settings, interpreter, registry
generation) keys a cache of each slot's eligible implementations, so a steady-state call costs a
dictionary lookup, the implementation's ``accepts`` and the implementation; an implementation
that plans an input caches its own plans by what decides them (shapes, dtypes, devices, layout,
capture state). Every mutation bumps the generation, so a registration takes effect on the next
call. One lock guards all state.

The rooms, each importing only those before it: ``records`` (what it hands out and raises),
``state`` (the lists, caches and lock), ``registration``, ``environment`` (declines before any
input, and the warnings), ``selection`` (the selection step, ``dispatch``, ``choose``,
``backward``), ``introspection`` (``explain``, ``active``, ...). This package is their face:
every name callers use is here, and setting one here sets it where the rooms read it (below).
"""

from __future__ import annotations

import sys
import types

from libreyolo.deprecated import moved

from ..slots import SLOTS, get_slot
from . import environment, introspection, registration, selection, state

# Besides the public names, the private ones that tests, benchmarks and the traced rules read as
# ``registry.<name>`` (an alias to itself marks each as served here).
from .environment import AWAITING_RECORD_FILE, awaiting_record
from .environment import _awaits_record as _awaits_record
from .environment import _eligible as _eligible
from .introspection import (
    Selected,
    active,
    candidates,
    decline_reason,
    explain,
    failures,
    plan_or_raise,
    registered,
    resolve,
)
from .records import (
    INPUT_ERRORS,
    REFERENCE,
    Choice,
    Implementation,
    KernelDisabledWarning,
    KernelOutputError,
    NoImplementationError,
    OutOfTreeWarning,
    PredicateWarning,
    SelectionWarning,
)
from .registration import _ensure_loaded as _ensure_loaded
from .registration import clear_cache, loading, register, unregister
from .selection import _DECLARED as _DECLARED
from .selection import _loaded_for_trace as _loaded_for_trace
from .selection import _selection_guard as _selection_guard
from .selection import (
    answer,
    backward,
    choose,
    compile_with,
    dispatch,
    run_selected,
)

__all__ = [
    "AWAITING_RECORD_FILE", "INPUT_ERRORS", "REFERENCE", "SLOTS", "Choice", "Implementation",
    "KernelDisabledWarning", "KernelOutputError", "NoImplementationError",
    "OutOfTreeWarning", "PredicateWarning", "Selected", "SelectionWarning", "active", "answer",
    "awaiting_record", "backward", "candidates", "choose", "clear_cache", "compile_with",
    "decline_reason", "dispatch", "explain", "failures", "get_slot", "loading", "plan_or_raise",
    "register", "registered", "resolve", "run_selected", "unregister",
]

#: Rooms whose module-level names a setting through this face rebinds.
_ROOMS = (registration, environment, selection, introspection)


class _Face(types.ModuleType):
    """This package, as its callers and tests use it: a name set on it (``monkeypatch.setattr(
    registry, "awaiting_record", ...)``, ``registry.JUDGE_OUTPUTS = False``) is set in every
    room that holds it, where the code reads it, and the state (``state.NAMES``) is read from
    and written to ``state`` itself, so ``registry._generation`` is always the current one."""

    def __setattr__(self, name: str, value: object) -> None:
        for room in _ROOMS:
            if name in vars(room):
                setattr(room, name, value)
        super().__setattr__(name, value)


def _state_property(name: str) -> property:
    return property(lambda _face: getattr(state, name),
                    lambda _face, value: setattr(state, name, value),
                    doc=f"``state.{name}``")


for _name in state.NAMES:
    setattr(_Face, _name, _state_property(_name))

__getattr__ = moved(__name__, {
    "selected": "libreyolo.kernels.registry:run_selected",
    "planned": "libreyolo.kernels.registry:plan_or_raise",
})

sys.modules[__name__].__class__ = _Face

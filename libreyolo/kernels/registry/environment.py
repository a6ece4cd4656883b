"""What the environment allows: the selection settings, a failure, a predicate or a missing
parity record decline an implementation before any input is seen, and the one-time warnings
about them. ``_eligible`` caches the result per slot, settings and registry generation, so a
steady-state call costs a dictionary lookup here."""

from __future__ import annotations

import functools
import inspect
import sys
import tomllib
import warnings
from pathlib import Path

from libreyolo.suggest import did_you_mean

from .. import settings
from ..providers import ANNOUNCED, IN_TREE
from ..slots import get_slot
from . import state
from .records import (
    REFERENCE,
    Implementation,
    KernelDisabledWarning,
    OutOfTreeWarning,
    PredicateWarning,
    SelectionWarning,
)
from .registration import _ensure_loaded

#: The ``libreyolo.kernels`` package: its frames are skipped when a warning names its caller.
_PACKAGE = str(Path(__file__).resolve().parents[1])


def _caller_stacklevel() -> int:
    """``warnings.warn``'s stacklevel, from its caller here, of the first frame outside the
    ``libreyolo.kernels`` package: the line of the caller's code that made the call, whichever
    entry point it used (``ops.<slot>`` is a partial of ``dispatch``, ``maybe_ms_deform_attn`` a
    function)."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def _warn_once(key: tuple[str, object], message: str, category: type[Warning]) -> None:
    with state._lock:
        if key in state._warned:
            return
        state._warned.add(key)
    warnings.warn(message, category, stacklevel=_caller_stacklevel())


def _disable(impl: Implementation, what: str) -> None:
    """Disable ``impl`` for the rest of the process after a failure, with one warning."""
    with state._lock:
        if impl in state._failures or impl not in state._impls[impl.op]:
            return
        state._failures[impl] = what
        state.invalidate()
    warnings.warn(
        f"libreyolo.kernels: {impl.op}/{impl.name} failed ({what}) and is disabled for the rest "
        "of the process; the next implementation takes over",
        KernelDisabledWarning,
        stacklevel=_caller_stacklevel(),
    )


def _predicate_decline(impl: Implementation) -> str | None:
    """Why the environment excludes ``impl`` (memoized), or None when it may run here.

    A predicate returning a string names the part of its condition that failed; False gets the
    predicate's name and the first line of its docstring.
    """
    if impl.predicate is None:
        return None
    if impl in state._predicate_results:
        return state._predicate_results[impl]
    label = getattr(impl.predicate, "__qualname__", repr(impl.predicate))
    try:
        verdict = impl.predicate()
        if isinstance(verdict, str) and verdict:
            reason = f"environment check {label}(): {verdict}"
        elif verdict and not isinstance(verdict, str):
            reason = None
        else:
            reason = f"environment check {label}() is false"
            doc = (inspect.getdoc(impl.predicate) or "").split("\n")[0]
            reason = f"{reason} ({doc.rstrip('.')})" if doc else reason
    except Exception as exc:  # noqa: BLE001 - a raising predicate means "not eligible"
        reason = f"environment check {label}() raised {type(exc).__name__}: {exc}"
        _warn_once(
            ("predicate", impl),
            f"libreyolo.kernels: predicate of {impl.op}/{impl.name} raised "
            f"{type(exc).__name__}: {exc}; treating it as ineligible",
            PredicateWarning,
        )
    state._predicate_results[impl] = reason
    return reason


AWAITING_RECORD_FILE = Path(__file__).resolve().parents[1] / "awaiting_record.toml"


@functools.cache
def awaiting_record() -> frozenset[str]:
    """``slot/name`` of in-tree implementations without a green CUDA parity record yet."""
    with AWAITING_RECORD_FILE.open("rb") as file:
        return frozenset(tomllib.load(file)["awaiting"])


def _environment_decline(
    impl: Implementation, selection: settings.Selection, *, by_name: bool = False
) -> str | None:
    """Why the environment excludes ``impl``: the selection, a failure, its predicate, or (last:
    it could run here) a missing parity record, which only naming the implementation overrides."""
    if not selection.allows(impl.op, impl.name, impl.is_reference):
        choice = selection.choice(impl.op)
        if choice == REFERENCE:
            return f"{selection.source} forces the reference"
        return f"{selection.source} selects {choice!r} for {impl.op}"
    if impl in state._failures:
        return f"disabled after a failure: {state._failures[impl]}"
    reason = _predicate_decline(impl)
    if reason is None and _awaits_record(impl, selection, by_name):
        reason = (
            "awaiting a green CUDA parity record (libreyolo/kernels/awaiting_record.toml); "
            f"LIBREYOLO_KERNELS={impl.op}={impl.name} selects it anyway"
        )
    return reason


def _awaits_record(impl: Implementation, selection: settings.Selection, by_name: bool) -> bool:
    """Listed as awaiting its record and not asked for by name (the interpreter is a test mode)."""
    named = by_name or selection.choice(impl.op) == impl.name
    listed = f"{impl.op}/{impl.name}" in awaiting_record()
    return listed and not named and not settings.interpreting()


def _warn_unknown_selection(selection: settings.Selection) -> None:
    """One warning per unknown slot, per name no implementation (of that slot) has, and per
    item the value's parser could not follow as written (``Selection.problems``)."""
    for problem in selection.problems:
        _warn_once(("selection-item", selection.source, problem),
                   f"{selection.source}: {problem}", SelectionWarning)
    with state._lock:
        known = {op: {e.name for e in entries} for op, entries in state._impls.items()}
    everywhere = set().union(*known.values())
    for slot, choice in selection.per_slot:
        if choice == REFERENCE:
            continue
        if slot not in known:
            _warn_once(("selection-slot", slot),
                       f"{selection.source} names the unknown slot {slot!r}"
                       f"{did_you_mean(slot, known)} (slots: {', '.join(sorted(known))}); it "
                       "is ignored", SelectionWarning)
        elif choice not in known[slot]:
            _warn_once(("selection", slot, choice),
                       f"{selection.source}: {slot}={choice!r} names no registered implementation "
                       f"of {slot} (registered: {', '.join(sorted(known[slot]))}); "
                       "using its reference", SelectionWarning)
    if selection.only is not None and selection.only not in everywhere:
        _warn_once(
            ("selection", selection.only),
            f"{selection.source}={selection.only!r} names no registered implementation "
            f"(registered: {', '.join(sorted(everywhere)) or 'none'}); using the references",
            SelectionWarning,
        )


def _eligible(op: str) -> tuple[Implementation, ...]:
    """The implementations that may run here for ``op``: a lookup in steady state."""
    key = (op, *settings.raw_values())
    cached = state._resolved.get(key)
    if cached is not None and cached[0] == state._generation:
        return cached[1]
    get_slot(op)
    selection = settings.selection()
    _ensure_loaded(selection)
    _warn_unknown_selection(selection)
    with state._lock:
        generation = state._generation
        eligible = tuple(e for e in state._impls[op]
                         if _environment_decline(e, selection) is None)
        if generation == state._generation:
            state._resolved[key] = (generation, eligible)
    _announce(op, eligible)
    return eligible


def _announce(op: str, eligible: tuple[Implementation, ...]) -> None:
    """Warn once per process per slot and implementation when one that an installed package
    registered (``providers.ANNOUNCED``) runs ``op`` in place of an in-tree one or the reference:
    installing a package must not change numbers silently. A ``register`` call of the process's
    own code is its own choice, not announced."""
    if not eligible or eligible[0].origin not in ANNOUNCED:
        return
    chosen = eligible[0]
    displaced = next((e for e in eligible[1:] if e.origin == IN_TREE), None)
    if displaced is None:
        return
    _warn_once(("out-of-tree", op, chosen.name),
               f"libreyolo.kernels: {op} now runs {chosen.name!r}, registered by {chosen.provider} "
               f"({chosen.origin}), in place of the in-tree {displaced.name!r}; "
               f"LIBREYOLO_KERNELS={op}={displaced.name} keeps the in-tree one",
               OutOfTreeWarning)

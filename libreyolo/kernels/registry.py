"""The runtime registry: which implementation of a slot runs, and why the others do not.

Implementations are kept newest first; the reference (name ``reference``) always sits last,
whatever the order of registration. Eligibility has two levels:

* the *predicate* (zero arguments, memoized): can this implementation run here at all
  (CUDA present, triton importable, a setting)?
* *accepts* (called with the slot's arguments): does it take this input? It returns ``None`` to
  take it or a reason string to decline; a declined input goes to the next implementation.

Every mutation bumps a generation counter that invalidates memoized resolution, so a
registration takes effect on the next call without ``clear_cache()``; the selection settings
are part of the cache key, so a change of them is honoured too. One lock guards all state.
"""

from __future__ import annotations

import functools
import inspect
import threading
import tomllib
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import providers, settings
from .prepared import Prepared
from .slots import SLOTS, get_slot

REFERENCE = "reference"

# ValueError and TypeError report bad input: they propagate from every implementation. Anything
# else raised by an accelerated implementation (a compile, load or launch failure) disables it.
INPUT_ERRORS = (ValueError, TypeError)


class KernelDisabledWarning(RuntimeWarning):
    """An accelerated implementation failed and is disabled for the rest of the process."""


class PredicateWarning(RuntimeWarning):
    """An implementation's predicate raised; the implementation is treated as ineligible."""


class SelectionWarning(UserWarning):
    """``LIBREYOLO_KERNELS`` names no registered implementation."""


@dataclass(frozen=True, eq=False)
class Implementation:
    """One registered implementation of a slot. Compared by identity."""

    op: str
    name: str
    fn: Callable
    predicate: Callable[[], bool] | None = None
    accepts: Callable[..., str | None] | None = None
    sources: tuple[str, ...] = field(default=())

    @property
    def is_reference(self) -> bool:
        return self.name == REFERENCE


class NoImplementationError(LookupError):
    """A slot with a reference found no implementation willing to take an input."""


_lock = threading.RLock()
_load_lock = threading.RLock()
_impls: dict[str, list[Implementation]] = {slot.name: [] for slot in SLOTS}
_generation = 0
_resolved: dict[tuple[str, settings.Selection, bool], tuple[int, tuple[Implementation, ...]]] = {}
_predicate_results: dict[Implementation, str | None] = {}
_failures: dict[Implementation, str] = {}
_warned: set[tuple[str, object]] = set()
_references_loaded = False
_providers_started = False
_providers_loaded = False


def _default_sources(impl: Callable) -> tuple[str, ...]:
    try:
        path = inspect.getsourcefile(impl)
    except TypeError:
        return ()
    return (path,) if path else ()


def register(
    op: str,
    impl: Callable,
    *,
    name: str,
    predicate: Callable[[], bool] | None = None,
    accepts: Callable[..., str | None] | None = None,
    sources: Iterable[str] | None = None,
) -> Implementation:
    """Register ``impl`` for slot ``op`` under ``name``, as the newest implementation.

    A name already registered in that slot is replaced (and becomes newest). ``predicate``
    says whether the implementation can run in this environment; ``accepts`` whether it takes a
    given input (``None``) or why not (a string). ``sources`` are the files its numbers depend
    on, for the parity records' digest (default: the file defining ``impl``).
    """
    global _generation
    get_slot(op)
    if not callable(impl):
        raise TypeError(f"impl: expected a callable, got {type(impl).__name__}")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name: expected a non-empty string, got {name!r}")
    for argument, value in (("predicate", predicate), ("accepts", accepts)):
        if value is not None and not callable(value):
            raise TypeError(f"{argument}: expected a callable or None, got {type(value).__name__}")
    if name.strip().lower() != REFERENCE:
        _ensure_loaded(settings.selection())  # in-tree providers first: a caller's is newer
    entry = Implementation(
        op,
        name.strip().lower(),
        impl,
        predicate,
        accepts,
        tuple(sources) if sources is not None else _default_sources(impl),
    )
    with _lock:
        entries = [e for e in _impls[op] if e.name != entry.name]
        entries.insert(0, entry)
        entries.sort(key=lambda e: e.is_reference)  # stable: the reference sinks to the end
        _impls[op] = entries
        _generation += 1
    return entry


def unregister(op: str, name: str) -> bool:
    """Remove ``name`` from slot ``op``. Returns False, and changes nothing, for an unknown name."""
    global _generation
    get_slot(op)
    name = name.strip().lower()
    with _lock:
        before = _impls[op]
        after = [e for e in before if e.name != name]
        if len(after) == len(before):
            return False
        _impls[op] = after
        _generation += 1
        return True


def clear_cache() -> None:
    """Forget memoized resolution and predicate results (they are recomputed on demand)."""
    global _generation
    with _lock:
        _resolved.clear()
        _predicate_results.clear()
        _generation += 1


def _ensure_loaded(selection: settings.Selection) -> None:
    """Register the references, then import providers unless references are forced.

    ``_providers_started`` guards against re-entry (providers call ``register``) under the
    re-entrant load lock; ``_providers_loaded`` is set only once every provider is imported, so
    another thread never resolves with half of them.
    """
    global _references_loaded, _providers_started, _providers_loaded
    if _references_loaded and (_providers_loaded or selection.reference_only):
        return
    with _load_lock:
        if not _references_loaded:
            for slot in SLOTS:
                reference = slot.load_reference()
                if reference is not None:
                    register(slot.name, reference, name=REFERENCE)
            _references_loaded = True
        if not _providers_started and not selection.reference_only:
            _providers_started = True
            providers.import_providers()
            _providers_loaded = True


def _warn_once(key: tuple[str, object], message: str, category: type[Warning]) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, category, stacklevel=4)


def _predicate_decline(impl: Implementation) -> str | None:
    """Why the environment excludes ``impl`` (memoized), or None when it may run here."""
    if impl.predicate is None:
        return None
    if impl in _predicate_results:
        return _predicate_results[impl]
    label = getattr(impl.predicate, "__qualname__", repr(impl.predicate))
    try:
        reason = None if impl.predicate() else f"environment check {label}() is false"
        doc = (inspect.getdoc(impl.predicate) or "").split("\n")[0]
        if reason is not None and doc:
            reason = f"{reason} ({doc.rstrip('.')})"
    except Exception as exc:  # noqa: BLE001 - a raising predicate means "not eligible"
        reason = f"environment check {label}() raised {type(exc).__name__}: {exc}"
        _warn_once(
            ("predicate", impl),
            f"libreyolo.kernels: predicate of {impl.op}/{impl.name} raised "
            f"{type(exc).__name__}: {exc}; treating it as ineligible",
            PredicateWarning,
        )
    _predicate_results[impl] = reason
    return reason


AWAITING_RECORD_FILE = Path(__file__).with_name("awaiting_record.toml")


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
    if not selection.allows(impl.name, impl.is_reference):
        if selection.reference_only:
            return f"{selection.source} forces the reference"
        return f"{selection.source}={selection.only} selects another implementation"
    if impl in _failures:
        return f"disabled after a failure: {_failures[impl]}"
    reason = _predicate_decline(impl)
    if reason is None and _awaits_record(impl, selection, by_name):
        reason = (
            "awaiting a green CUDA parity record (libreyolo/kernels/awaiting_record.toml); "
            f"LIBREYOLO_KERNELS={impl.name} selects it anyway"
        )
    return reason


def _awaits_record(impl: Implementation, selection: settings.Selection, by_name: bool) -> bool:
    """Listed as awaiting its record and not asked for by name (the interpreter is a test mode)."""
    named = by_name or selection.only == impl.name
    listed = f"{impl.op}/{impl.name}" in awaiting_record()
    return listed and not named and not settings.interpreting()


def _warn_unknown_selection(selection: settings.Selection) -> None:
    if selection.only is None:
        return
    with _lock:
        known = {e.name for entries in _impls.values() for e in entries}
    if selection.only not in known:
        _warn_once(
            ("selection", selection.only),
            f"{selection.source}={selection.only!r} names no registered implementation "
            f"(registered: {', '.join(sorted(known)) or 'none'}); using the references",
            SelectionWarning,
        )


def candidates(op: str) -> list[Implementation]:
    """The implementations that may run here for ``op``, newest first, reference last."""
    get_slot(op)
    selection = settings.selection()
    _ensure_loaded(selection)
    _warn_unknown_selection(selection)
    key = (op, selection, settings.interpreting())
    with _lock:
        cached = _resolved.get(key)
        if cached is not None and cached[0] == _generation:
            return list(cached[1])
        generation = _generation
        eligible = tuple(e for e in _impls[op] if _environment_decline(e, selection) is None)
        if generation == _generation:
            _resolved[key] = (generation, eligible)
        return list(eligible)


def resolve(op: str) -> Callable | None:
    """The callable that would run for ``op`` (ignoring per-input checks), or None."""
    eligible = candidates(op)
    return eligible[0].fn if eligible else None


def registered(op: str) -> list[Implementation]:
    """Every implementation registered for ``op``, eligible or not, newest first."""
    get_slot(op)
    _ensure_loaded(settings.selection())
    with _lock:
        return list(_impls[op])


def explain(op: str, *args, **kwargs) -> list[tuple[Implementation, str | None]]:
    """Each registered implementation with the reason it declines (None: it would take it).

    Without arguments only the environment is considered; with the slot's arguments each
    implementation's ``accepts`` is asked too; an ``accepts`` raising ValueError/TypeError (bad
    input) propagates, as in ``dispatch``.
    """
    selection = settings.selection()
    with_input = bool(args or kwargs)
    report = []
    for impl in registered(op):
        with _lock:
            reason = _environment_decline(impl, selection)
        if reason is None and with_input:
            reason = _input_decline(impl, args, kwargs)
        report.append((impl, reason))
    return report


def decline_reason(op: str, name: str, *args, **kwargs) -> str | None:
    """Why implementation ``name`` would not run these arguments (None: it would); without
    arguments, why the environment excludes it.

    Asking by name selects it, as ``LIBREYOLO_KERNELS=name`` would: an implementation awaiting
    its parity record is judged on its own checks (this is how the conformance suite asks).
    """
    name = name.strip().lower()
    for impl in registered(op):
        if impl.name == name:
            with _lock:
                reason = _environment_decline(impl, settings.selection(), by_name=True)
            if reason is None and (args or kwargs):
                reason = _input_decline(impl, args, kwargs)
            return reason
    return f"no implementation named {name!r} is registered for {op}"


def _input_decline(impl: Implementation, args: tuple, kwargs: dict) -> str | None:
    if impl.accepts is None:
        return None
    try:
        reason = impl.accepts(*args, **kwargs)
        return None if isinstance(reason, Prepared) else reason
    except INPUT_ERRORS:
        raise
    except Exception as exc:  # noqa: BLE001 - one broken accepts() must not hide the rest
        return f"accepts() raised {type(exc).__name__}: {exc}"


def active() -> dict[str, str]:
    """Slot name to the name of the implementation that would run, or ``"unavailable"``."""
    return {
        slot.name: (eligible[0].name if (eligible := candidates(slot.name)) else "unavailable")
        for slot in SLOTS
    }


def _disable(impl: Implementation, exc: BaseException) -> None:
    global _generation
    with _lock:
        if impl in _failures:
            return
        _failures[impl] = f"{type(exc).__name__}: {exc}"
        _generation += 1
    warnings.warn(
        f"libreyolo.kernels: {impl.op}/{impl.name} failed ({type(exc).__name__}: {exc}) and is "
        "disabled for the rest of the process; the next implementation takes over",
        KernelDisabledWarning,
        stacklevel=3,
    )


def dispatch(op: str, *args, **kwargs):
    """Run ``op`` on the first eligible implementation that accepts these arguments.

    Slots without a reference return None when every implementation declines, so the caller
    keeps its portable path. ``accepts`` raising ValueError/TypeError reports bad input: it
    propagates. An accelerated implementation that fails when called is not trusted to judge the
    input: the next implementation runs the same call. If that one succeeds, the failure was the
    kernel's, and it is disabled for the process (one warning); if that one raises too, its error
    propagates (the input was bad) and nothing is disabled. Running out of memory propagates and
    disables nothing (it is transient).
    """
    declined, suspects = [], []
    for impl in candidates(op):
        try:
            reason = impl.accepts(*args, **kwargs) if impl.accepts is not None else None
        except INPUT_ERRORS:
            raise
        except Exception as exc:  # noqa: BLE001 - a broken accepts() is the kernel's failure
            _disable(impl, exc)
            declined.append(f"{impl.name}: failed: {type(exc).__name__}")
            continue
        if reason is not None and not isinstance(reason, Prepared):
            declined.append(f"{impl.name}: {reason}")
            continue
        try:
            result = impl.fn(*args, **kwargs) if reason is None else \
                impl.fn(*args, prepared=reason, **kwargs)
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:
            if impl.is_reference:
                raise
            if not isinstance(exc, INPUT_ERRORS):
                _disable(impl, exc)
            else:
                suspects.append((impl, exc))
            declined.append(f"{impl.name}: failed: {type(exc).__name__}")
            continue
        for suspect, exc in suspects:  # this input was fine: their errors were their own
            _disable(suspect, exc)
        return result
    if get_slot(op).reference is None:
        return None
    raise NoImplementationError(
        f"no implementation of {op} took this input ({'; '.join(declined) or 'none registered'})"
    )

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
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import sys
import threading
import tomllib
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from libreyolo.capture import COMPILE, graph_capture
from libreyolo.suggest import did_you_mean

from . import providers, settings
from .capabilities import Capabilities
from .prepared import Prepared
from .providers import ANNOUNCED, CALLER, IN_TREE
from .slots import SLOTS, get_slot

REFERENCE = settings.REFERENCE

# Bad input is reported by ValueError and TypeError. Which of them an implementation's error is
# (bad input, or its own bug) is decided by the slot's judge: the reference, or the validator.
INPUT_ERRORS = (ValueError, TypeError)


class KernelDisabledWarning(RuntimeWarning):
    """An accelerated implementation failed and is disabled for the rest of the process."""


class PredicateWarning(RuntimeWarning):
    """An implementation's predicate raised; the implementation is treated as ineligible."""


class SelectionWarning(UserWarning):
    """``LIBREYOLO_KERNELS`` names an unknown slot, or no registered implementation."""


class OutOfTreeWarning(UserWarning):
    """An implementation an installed package registered runs a slot in place of an in-tree one
    (the reference included): installing a package changes that slot's numbers."""


@dataclass(frozen=True, eq=False)
class Implementation:
    """One registered implementation of a slot. Compared by identity."""

    op: str
    name: str
    fn: Callable
    predicate: Callable[[], bool | str] | None = None
    accepts: Callable[..., str | Prepared | None] | None = None
    sources: tuple[str, ...] = field(default=())
    origin: str = CALLER
    capabilities: Capabilities | None = None
    #: ``backward(grad, *args, **kwargs)``: the gradients of the slot's differentiable inputs
    #: (declared in ``slots.py``), for the slot's operator; None: recomputed through ``fn``.
    backward: Callable[..., tuple] | None = None
    #: It may write an input tensor: after it raised or returned a wrong output nothing else may
    #: run the (possibly changed) inputs, so its error propagates (``register``).
    writes_inputs: bool = False
    #: Who registered it: the distribution of an entry point, else the module of ``fn`` (for a
    #: package the registry or the CLI's ``--import`` imported, that package's module).
    provider: str | None = None
    #: The slot's own reference (the name ``reference``); a field, not a property: dispatch
    #: asks it per call.
    is_reference: bool = field(init=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "is_reference", self.name == REFERENCE)


class NoImplementationError(LookupError):
    """A slot with a reference found no implementation willing to take an input."""


class KernelOutputError(RuntimeError):
    """An implementation that declared it may write its inputs (``writes_inputs=True``) returned
    something other than the slot's declared output: nothing else may run those inputs now."""


#: Benchmark-only knob (``benchmarks/bench/bench_host.py --judge off``): False skips binding each
#: call to the slot's signature up front and judging what an accelerated implementation returns
#: against the slot's declared output. Never turn it off elsewhere: a wrong-shaped, wrong-dtype
#: or wrong-device result would then reach the caller.
JUDGE_OUTPUTS = True


_lock = threading.RLock()
_load_lock = threading.RLock()
_loading = threading.local()  # .origin, .provider: of registrations made by a provider import
_impls: dict[str, list[Implementation]] = {slot.name: [] for slot in SLOTS}
_generation = 0
_resolved: dict[tuple, tuple[int, tuple[Implementation, ...]]] = {}
_predicate_results: dict[Implementation, str | None] = {}
_failures: dict[Implementation, str] = {}
_warned: set[tuple[str, object]] = set()
_references_loaded = False
_providers_started = False
_providers_loaded = False


def _default_sources(impl: Callable) -> tuple[str, ...]:
    """The file ``impl`` is written in; for a function made at import (the fake-quant ops,
    compiled from their declarations under a name that is no file), its module's file."""
    try:
        path = inspect.getsourcefile(impl)
    except TypeError:
        return ()
    if path and not os.path.exists(path):
        path = getattr(sys.modules.get(getattr(impl, "__module__", "")), "__file__", None)
    return (path,) if path else ()


def _checked_sources(sources: Iterable[str] | None, impl: Callable) -> tuple[str, ...]:
    if sources is None:
        return _default_sources(impl)
    if isinstance(sources, (str, bytes, os.PathLike)) or not isinstance(sources, Iterable):
        raise TypeError(f"sources: expected an iterable of paths, got {sources!r}")
    paths = tuple(sources)
    for path in paths:
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"sources: expected paths (str or os.PathLike), got {path!r}")
    return tuple(os.fspath(path) for path in paths)


def _checked_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name: expected a non-empty string, got {name!r}")
    name = name.strip().lower()
    if name == REFERENCE:
        raise ValueError("name: 'reference' is the slot's reference, declared in "
                         "libreyolo/kernels/slots.py; it cannot be registered or unregistered")
    return name


def _origin(impl: Callable) -> tuple[str, str | None]:
    """``(origin, provider)``: the provider import in progress decides (its provider, else the
    module of ``impl``); else a function of this package is in-tree."""
    module = getattr(impl, "__module__", None)
    origin = getattr(_loading, "origin", None)
    if origin is not None:
        return origin, getattr(_loading, "provider", None) or module
    return (IN_TREE if (module or "").split(".")[0] == "libreyolo" else CALLER), module


@contextlib.contextmanager
def loading(origin: str, provider: str | None = None) -> Iterator[None]:
    """Registrations made inside come from ``origin``, registered by ``provider`` (None: the
    module of each registered function); used by ``providers`` and the CLI's ``--import``."""
    previous = getattr(_loading, "origin", None), getattr(_loading, "provider", None)
    _loading.origin, _loading.provider = origin, provider
    try:
        yield
    finally:
        _loading.origin, _loading.provider = previous


def register(
    op: str,
    impl: Callable,
    *,
    name: str,
    predicate: Callable[[], bool | str] | None = None,
    accepts: Callable[..., str | Prepared | None] | None = None,
    sources: Iterable[str] | None = None,
    capabilities: Capabilities | None = None,
    backward: Callable[..., tuple] | None = None,
    writes_inputs: bool = False,
) -> Implementation:
    """Register ``impl`` for slot ``op`` under ``name``, as the newest implementation.

    A name already registered in that slot is replaced (and becomes newest); ``reference`` is
    the slot's own and cannot be registered. ``predicate`` says whether the implementation can
    run in this environment; ``accepts`` whether it takes a given input (see the module
    docstring). ``sources`` are the files its numbers depend on, for the parity records' digest
    (an iterable of paths; default: the file defining ``impl``). ``capabilities`` declares
    what it supports (devices, dtypes, modes, layouts): an input outside it is declined with
    a reason derived from it, and the conformance suite holds it to no more than that.
    ``backward(grad, *args, **kwargs)`` gives the gradients of the slot's differentiable inputs
    without a recorded forward (what the slot's operator calls under ``torch.compile``; it gets
    ``prepared=`` as the call does); without it the operator recomputes through ``impl``.
    ``writes_inputs=True`` declares that it may write an input tensor: when it raises (or
    returns something other than the slot's declared output) no other implementation runs the
    input, which may have changed, and its error propagates.
    """
    get_slot(op)
    if not callable(impl):
        raise TypeError(f"impl: expected a callable, got {type(impl).__name__}")
    name = _checked_name(name)
    for argument, value in (("predicate", predicate), ("accepts", accepts),
                            ("backward", backward)):
        if value is not None and not callable(value):
            raise TypeError(f"{argument}: expected a callable or None, got {type(value).__name__}")
    if capabilities is not None and not isinstance(capabilities, Capabilities):
        raise TypeError("capabilities: expected libreyolo.kernels.Capabilities(...) or None, got "
                        f"{type(capabilities).__name__}")
    if not isinstance(writes_inputs, bool):
        raise TypeError(f"writes_inputs: expected True or False, got {writes_inputs!r}")
    origin, provider = _origin(impl)
    entry = Implementation(op, name, impl, predicate, accepts, _checked_sources(sources, impl),
                           origin, capabilities, backward, writes_inputs, provider)
    _ensure_loaded(settings.selection())  # in-tree providers first: a caller's is newer
    _insert(entry)
    return entry


def _insert(entry: Implementation) -> None:
    with _lock:
        entries = [e for e in _impls[entry.op] if e.name != entry.name]
        _forget(e for e in _impls[entry.op] if e.name == entry.name)
        entries.insert(0, entry)
        entries.sort(key=lambda e: e.is_reference)  # stable: the reference sinks to the end
        _impls[entry.op] = entries
        _invalidate()


def _forget(entries: Iterable[Implementation]) -> None:
    """Drop what the registry remembers about replaced or removed entries (bounded state)."""
    for entry in entries:
        _failures.pop(entry, None)
        _predicate_results.pop(entry, None)
        _warned.discard(("predicate", entry))


def _invalidate() -> None:
    global _generation
    _generation += 1
    _resolved.clear()


def unregister(op: str, name: str) -> bool:
    """Remove ``name`` from slot ``op``. Returns False, and changes nothing, for an unknown name;
    ``reference`` cannot be removed."""
    get_slot(op)
    name = _checked_name(name)
    with _lock:
        before = _impls[op]
        after = [e for e in before if e.name != name]
        if len(after) == len(before):
            return False
        _forget(e for e in before if e.name == name)
        _impls[op] = after
        _invalidate()
        return True


def clear_cache() -> None:
    """Forget memoized resolution and predicate results (they are recomputed on demand)."""
    with _lock:
        _predicate_results.clear()
        _invalidate()


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
                    _insert(Implementation(slot.name, REFERENCE, reference,
                                           sources=_default_sources(reference), origin=IN_TREE,
                                           provider=reference.__module__))
            _references_loaded = True
        if not _providers_started and not selection.reference_only:
            _providers_started = True
            providers.import_providers(loading)
            _providers_loaded = True


_PACKAGE = str(Path(__file__).resolve().parent)


def _caller_stacklevel() -> int:
    """``warnings.warn``'s stacklevel, from its caller here, of the first frame outside this
    package: the line of the caller's code that made the call, whichever entry point it used
    (``ops.<slot>`` is a partial of ``dispatch``, ``maybe_ms_deform_attn`` a function)."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def _warn_once(key: tuple[str, object], message: str, category: type[Warning]) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, category, stacklevel=_caller_stacklevel())


def _predicate_decline(impl: Implementation) -> str | None:
    """Why the environment excludes ``impl`` (memoized), or None when it may run here.

    A predicate returning a string names the part of its condition that failed; False gets the
    predicate's name and the first line of its docstring.
    """
    if impl.predicate is None:
        return None
    if impl in _predicate_results:
        return _predicate_results[impl]
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
    if not selection.allows(impl.op, impl.name, impl.is_reference):
        choice = selection.choice(impl.op)
        if choice == REFERENCE:
            return f"{selection.source} forces the reference"
        return f"{selection.source} selects {choice!r} for {impl.op}"
    if impl in _failures:
        return f"disabled after a failure: {_failures[impl]}"
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
    with _lock:
        known = {op: {e.name for e in entries} for op, entries in _impls.items()}
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
    cached = _resolved.get(key)
    if cached is not None and cached[0] == _generation:
        return cached[1]
    get_slot(op)
    selection = settings.selection()
    _ensure_loaded(selection)
    _warn_unknown_selection(selection)
    with _lock:
        generation = _generation
        eligible = tuple(e for e in _impls[op] if _environment_decline(e, selection) is None)
        if generation == _generation:
            _resolved[key] = (generation, eligible)
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


def candidates(op: str) -> list[Implementation]:
    """The implementations that may run here for ``op``, newest first, reference last."""
    return list(_eligible(op))


def resolve(op: str) -> Callable | None:
    """A callable for slot ``op``, or None when no implementation may run here.

    Calling it is ``dispatch(op, ...)``: the implementation that would run now
    (``.implementation``) runs when it takes the input; an input it declines falls through to
    the next implementation, and for a slot without a reference to ``None``, so the caller takes
    its portable path. It never raises for a declined input.
    """
    eligible = _eligible(op)
    if not eligible:
        return None

    def call(*args, **kwargs):
        return dispatch(op, *args, **kwargs)

    call.implementation = eligible[0]
    call.__name__ = call.__qualname__ = f"{op}_via_{eligible[0].name}"
    call.__doc__ = f"dispatch({op!r}, ...), starting at {eligible[0].name!r} (see resolve)."
    return call


def registered(op: str) -> list[Implementation]:
    """Every implementation registered for ``op``, eligible or not, newest first."""
    get_slot(op)
    _ensure_loaded(settings.selection())
    with _lock:
        return list(_impls[op])


def explain(op: str, *args, **kwargs) -> list[tuple[Implementation, str | None]]:
    """Each registered implementation with the reason it declines (None: it would take it).

    Without arguments only the environment is considered; with the slot's arguments each
    implementation's ``accepts`` is asked too, and one that raises is reported as such (never
    raised: ``dispatch`` decides, with the slot's judge, whether the input or ``accepts`` is bad).
    """
    selection = settings.selection()
    with_input = bool(args or kwargs)
    if with_input:
        get_slot(op).bind(args, kwargs)  # a call the slot's signature does not take: TypeError
    report = []
    for impl in registered(op):
        with _lock:
            reason = _environment_decline(impl, selection)
        if reason is None and with_input:
            try:
                reason = _input_decline(impl, args, kwargs)
            except Exception as exc:  # noqa: BLE001 - reported, not raised
                reason = f"accepts() raised {type(exc).__name__}: {exc}"
        report.append((impl, reason))
    return report


def decline_reason(op: str, name: str, *args, **kwargs) -> str | None:
    """Why implementation ``name`` would not run these arguments (None: it would); without
    arguments, why the environment excludes it.

    Asking by name selects it, as ``LIBREYOLO_KERNELS=name`` would: an implementation awaiting
    its parity record is judged on its own checks (this is how the conformance suite asks). An
    ``accepts`` raising ValueError/TypeError propagates: the suite judges the error itself.
    """
    if not isinstance(name, str):
        raise TypeError(f"name: expected an implementation's name (a string), got {name!r}")
    name = name.strip().lower()
    if args or kwargs:
        get_slot(op).bind(args, kwargs)  # a call the slot's signature does not take: TypeError
    for impl in registered(op):
        if impl.name == name:
            with _lock:
                reason = _environment_decline(impl, settings.selection(), by_name=True)
            if reason is None and (args or kwargs):
                try:
                    reason = _input_decline(impl, args, kwargs)
                except INPUT_ERRORS:
                    raise
                except Exception as exc:  # noqa: BLE001 - one broken accepts() hides nothing
                    reason = f"accepts() raised {type(exc).__name__}: {exc}"
            return reason
    return f"no implementation named {name!r} is registered for {op}"


def answer(impl: Implementation, args: tuple, kwargs: dict | None = None):
    """What ``impl`` answers this call before it runs, as ``dispatch`` asks it: its declared
    capabilities' decline (a reason), else its ``accepts``' answer (None, a reason or a
    ``Prepared`` plan). For a caller that runs one implementation's kernels itself (the fused
    FP8 linear) and must hear the same declines."""
    kwargs = kwargs or {}
    if impl.capabilities is not None:
        declared = impl.capabilities.decline(impl.op, args, kwargs)
        if declared is not None:
            return declared
    return None if impl.accepts is None else impl.accepts(*args, **kwargs)


def planned(impl: Implementation, args: tuple, kwargs: dict | None = None):
    """What a direct call of ``impl`` (no ``prepared`` plan given) runs on: ``answer``'s plan, or
    None. A decline raises, since nothing falls back: the slot's own error for a bad input (its
    validator, as ``dispatch``'s judge: the same error on every path), else a ``ValueError``
    naming the implementation and the reason."""
    kwargs = kwargs or {}
    given = answer(impl, args, kwargs)
    if not isinstance(given, str):
        return given
    if graph_capture() is None:  # a traced input is no input to validate
        _judge(impl.op, args, kwargs)
    raise ValueError(f"{impl.op} {impl.name} implementation declines this input: {given}")


def _input_decline(impl: Implementation, args: tuple, kwargs: dict) -> str | None:
    """``answer`` as a reason (None: taken); a wrong kind of answer is a reason too."""
    given = answer(impl, args, kwargs)
    if given is None or isinstance(given, Prepared):
        return None
    return given if isinstance(given, str) else _bad_answer(given)


def _bad_answer(answer: object) -> str:
    return (f"accepts() returned {answer!r} ({type(answer).__name__}); it must return None, a "
            "reason string or a Prepared plan")


class Selected(str):
    """What ``active()`` maps a slot to: the name of the implementation that would run, a string
    as it always was, carrying where that implementation came from: ``origin`` and ``provider``
    (``Implementation``'s; None for ``"unavailable"``)."""

    origin: str | None
    provider: str | None

    def __new__(cls, name: str, origin: str | None = None, provider: str | None = None):
        selected = super().__new__(cls, name)
        selected.origin, selected.provider = origin, provider
        return selected


def active() -> dict[str, Selected]:
    """Slot name to the name of the implementation that would run (with its ``origin`` and
    ``provider``), or ``"unavailable"``."""
    return {
        slot.name: (Selected(eligible[0].name, eligible[0].origin, eligible[0].provider)
                    if (eligible := _eligible(slot.name)) else Selected("unavailable"))
        for slot in SLOTS
    }


def failures() -> dict[tuple[str, str], str]:
    """``(slot, name)`` of every implementation disabled after a failure in this process, with
    what failed (the conformance suite fails every later cell of one)."""
    with _lock:
        return {(impl.op, impl.name): what for impl, what in _failures.items()}


def _disable(impl: Implementation, what: str) -> None:
    with _lock:
        if impl in _failures or impl not in _impls[impl.op]:
            return
        _failures[impl] = what
        _invalidate()
    warnings.warn(
        f"libreyolo.kernels: {impl.op}/{impl.name} failed ({what}) and is disabled for the rest "
        "of the process; the next implementation takes over",
        KernelDisabledWarning,
        stacklevel=_caller_stacklevel(),
    )


def _judge(op: str, args: tuple, kwargs: dict) -> None:
    """Raise the slot's own error if the input is bad (slots without a reference: their
    validator); return if it is fine. A call the slot's signature does not take is bad input
    whatever the validator's own signature accepts (a TypeError naming the signature)."""
    slot = get_slot(op)
    slot.bind(args, kwargs)
    validator = slot.load_validator()
    if validator is not None:
        validator(*args, **kwargs)


#: Per slot, for ``dispatch``: the counts of positional arguments a call may give, the keywords
#: it may still give after each count, the check of a call against its signature, the fast check
#: of a result against its declared output, the slot, and whether it has a reference. A call
#: between the two counts whose keywords the signature still has needs no check: the common call
#: costs a length, two comparisons and a set comparison here, not a function call (what
#: ``Binder.check`` tests first).
_DECLARED = {slot.name: (slot.binder.n_required, len(slot.binder.positional),
                         slot.binder.keywords_after, slot.binder.check, slot.fits, slot,
                         slot.reference is not None) for slot in SLOTS}


def _output_problem(slot, args: tuple, kwargs: dict, result: object) -> str | None:
    """How ``result`` differs from the slot's declared output for this call (None: it is it):
    type, shape, dtype and device, part by part for a slot returning several tensors. Reads
    metadata only: no value, no sync. Called when the fast check (``Slot.fits``) did not pass."""
    try:
        want = slot.expected_output(args, kwargs)
    except Exception as exc:  # noqa: BLE001 - an input the rule cannot describe is not judged good
        return f"the slot's output rule does not apply to this input ({type(exc).__name__}: {exc})"
    if type(want) is not tuple:
        return want.mismatch(result)
    if type(result) is not tuple or len(result) != len(want):
        got = f"a tuple of {len(result)}" if type(result) is tuple else type(result).__name__
        return f"returned {got}, expected a tuple of {len(want)} tensors"
    for i, (part, wanted) in enumerate(zip(result, want, strict=True)):
        if (problem := wanted.mismatch(part)) is not None:
            return f"output {i} {problem}"
    return None


def dispatch(op: str, *args, **kwargs):
    """Run ``op`` on the first eligible implementation that takes these arguments.

    The call is bound to the slot's signature first: one the signature does not take is a
    TypeError naming it, and nothing runs. Slots without a reference return None when every
    implementation declines, so the caller keeps its portable path; the slot's validator then
    checks the input, so a bad input raises on this path too. An implementation whose call, or
    whose ``accepts``, raises, or whose result is not the slot's declared output (type, shape,
    dtype, device: ``Slot.output``), is a suspect and the next implementation gets the same
    input; the slot's judge decides whose fault it was. The judge is the reference (it runs the
    input last) or, in a slot without one, the slot's validator. If the judge rejects the input,
    its error propagates and nothing is disabled; if it takes the input, every suspect is
    disabled for the process with exactly one ``KernelDisabledWarning``. An ``accepts``
    answering anything but None, a string or a ``Prepared`` plan is disabled at once. An
    implementation registered with ``writes_inputs=True`` gets no fallback: its error (or a
    ``KernelOutputError`` for a wrong result) propagates. Running out of memory propagates and
    disables nothing.

    While a graph is captured no implementation is asked: an export gets the reference's math
    (a slot without one returns None, for the caller's portable path), ``torch.compile`` the
    slot's operator, which runs this same selection when the compiled code runs.
    """
    if (captured := graph_capture()) is not None:
        return _captured(op, captured, args, kwargs)
    return selected(op, args, kwargs)


def selected(op: str, args: tuple, kwargs: dict):
    """``dispatch`` without its capture check: the eager selection itself (what the slot's
    operator runs, so a kernel never re-enters the operator, even traced)."""
    eligible = _eligible(op)
    fewest, most, keywords_after, check_call, fits, slot, has_reference = _DECLARED[op]
    judging = JUDGE_OUTPUTS
    if judging and not (fewest <= len(args) <= most and (
            not kwargs or keywords_after[len(args)].issuperset(kwargs))):
        check_call(args, kwargs)
    declined, suspects = [], []
    for impl in eligible:
        plan = None
        if impl.capabilities is not None:
            declared = impl.capabilities.decline(op, args, kwargs)
            if declared is not None:
                declined.append(f"{impl.name}: {declared}")
                continue
        if impl.accepts is not None:
            try:
                plan = impl.accepts(*args, **kwargs)
            except torch.OutOfMemoryError:
                raise
            except Exception as exc:  # noqa: BLE001 - judged below: bad input or a bug
                suspects.append((impl, f"accepts() raised {type(exc).__name__}: {exc}"))
                declined.append(f"{impl.name}: accepts() raised {type(exc).__name__}")
                continue
            if plan is not None and not isinstance(plan, Prepared):
                if isinstance(plan, str):
                    declined.append(f"{impl.name}: {plan}")
                else:
                    _disable(impl, _bad_answer(plan))
                    declined.append(f"{impl.name}: {_bad_answer(plan)}")
                continue
        try:
            result = impl.fn(*args, **kwargs) if plan is None else \
                impl.fn(*args, prepared=plan, **kwargs)
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:
            if impl.is_reference:
                raise  # the judge rejects this input: nobody is disabled
            if impl.writes_inputs:  # its inputs may have changed: nothing else may run them
                if not isinstance(exc, INPUT_ERRORS):
                    _disable(impl, f"{type(exc).__name__}: {exc}")
                raise
            suspects.append((impl, f"{type(exc).__name__}: {exc}"))
            declined.append(f"{impl.name}: failed: {type(exc).__name__}")
            continue
        if judging and not impl.is_reference:
            try:
                fine = fits(args, kwargs, result)
            except Exception:  # noqa: BLE001 - what the fast check cannot read, the rule says
                fine = False
            problem = None if fine else _output_problem(slot, args, kwargs, result)
        else:
            problem = None
        if problem is not None:
            what = f"its result is not the slot's declared output: {problem}"
            if impl.writes_inputs:
                _disable(impl, what)
                raise KernelOutputError(f"{op}/{impl.name}: {what}; it may write its inputs, "
                                        "so no other implementation runs them")
            suspects.append((impl, what))
            declined.append(f"{impl.name}: wrong output")
            continue
        for suspect, what in suspects:  # this input was fine: their errors were their own
            _disable(suspect, what)
        return result
    if suspects or not has_reference:
        _judge(op, args, kwargs)  # a bad input raises here, on every path, and disables nothing
        for suspect, what in suspects:
            _disable(suspect, what)
    if not has_reference:
        return None
    raise NoImplementationError(
        f"no implementation of {op} took this input ({'; '.join(declined) or 'none registered'})"
    )


def _captured(op: str, kind: str, args: tuple, kwargs: dict):
    """A slot call while a graph is captured (see ``dispatch``)."""
    if kind == COMPILE:
        from . import operators

        return operators.call(op, args, kwargs)
    reference = get_slot(op).load_reference()
    return None if reference is None else reference(*args, **kwargs)


def backward(op: str, grad: torch.Tensor, *args, **kwargs) -> tuple:
    """The gradients of slot ``op``'s differentiable inputs (``Slot.differentiable``) for the
    upstream gradient ``grad``: what the implementation ``dispatch`` would run computes, by its
    ``backward`` where it declared one, else through autograd over a fresh forward of it (the
    reference's or the portable path's last of all). A ``backward`` that raises is disabled like
    a failing call, and the recomputation answers."""
    slot = get_slot(op)
    for impl in _eligible(op):
        if impl.capabilities is not None and impl.capabilities.decline(op, args, kwargs):
            continue
        plan = impl.accepts(*args, **kwargs) if impl.accepts is not None else None
        if plan is not None and not isinstance(plan, Prepared):
            continue
        prepared = {} if plan is None else {"prepared": plan}
        if impl.backward is not None:
            try:
                return tuple(impl.backward(grad, *args, **prepared, **kwargs))
            except torch.OutOfMemoryError:
                raise
            except Exception as exc:  # noqa: BLE001 - its own failure: the recomputation answers
                _disable(impl, f"backward raised {type(exc).__name__}: {exc}")
                return _recomputed(slot, slot.load_portable(), {}, grad, args, kwargs)
        return _recomputed(slot, impl.fn, prepared, grad, args, kwargs)
    return _recomputed(slot, slot.load_portable(), {}, grad, args, kwargs)


def _recomputed(slot, fn: Callable, prepared: dict, grad, args: tuple, kwargs: dict) -> tuple:
    """Autograd through a fresh ``fn(...)``: the differentiable inputs as new leaves."""
    bound = slot.bind(args, kwargs)
    leaves = {}
    for name in slot.differentiable:
        leaves[name] = bound[name] = bound[name].detach().requires_grad_()
    args, kwargs = slot.split(bound)
    with torch.enable_grad():
        out = fn(*args, **prepared, **kwargs)
    grads = torch.autograd.grad(out, list(leaves.values()), grad, allow_unused=True) \
        if out.requires_grad else (None,) * len(leaves)
    return tuple(torch.zeros_like(leaf) if g is None else g
                 for leaf, g in zip(leaves.values(), grads, strict=True))

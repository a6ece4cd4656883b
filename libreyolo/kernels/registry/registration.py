"""Who is registered: ``register`` and its checks, ``unregister``, and loading the references
and the providers on first use. Every change bumps the generation (``state.invalidate``), so a
registration takes effect on the next call."""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
from collections.abc import Callable, Iterable, Iterator

from .. import providers, settings
from ..capabilities import Capabilities
from ..prepared import Prepared
from ..providers import CALLER, IN_TREE
from ..slots import SLOTS, get_slot
from . import state
from .records import REFERENCE, Implementation


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
    origin = getattr(state._loading, "origin", None)
    if origin is not None:
        return origin, getattr(state._loading, "provider", None) or module
    return (IN_TREE if (module or "").split(".")[0] == "libreyolo" else CALLER), module


@contextlib.contextmanager
def loading(origin: str, provider: str | None = None) -> Iterator[None]:
    """Registrations made inside come from ``origin``, registered by ``provider`` (None: the
    module of each registered function); used by ``providers`` and the CLI's ``--import``."""
    previous = getattr(state._loading, "origin", None), getattr(state._loading, "provider", None)
    state._loading.origin, state._loading.provider = origin, provider
    try:
        yield
    finally:
        state._loading.origin, state._loading.provider = previous


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
    traceable: bool = False,
) -> Implementation:
    """Register ``impl`` for slot ``op`` under ``name``, as the newest implementation.

    A name already registered in that slot is replaced (and becomes newest); ``reference`` is
    the slot's own and cannot be registered. ``predicate`` says whether the implementation can
    run in this environment; ``accepts`` whether it takes a given input (see the package
    docstring). ``sources`` are the files its numbers depend on, for the parity records' digest
    (an iterable of paths; default: the file defining ``impl``). ``capabilities`` declares
    what it supports (devices, dtypes, modes, layouts): an input outside it is declined with
    a reason derived from it, and the conformance suite holds it to no more than that.
    ``backward(grad, *args, **kwargs)`` gives the gradients of the slot's differentiable inputs
    without a recorded forward (what the slot's operator calls under ``torch.compile``; it gets
    ``prepared=`` as the call does); without it the operator recomputes through ``impl``.
    ``writes_inputs=True`` declares that it may write an input tensor: when it raises (or
    returns something other than the slot's declared output) no other implementation runs the
    input, which may have changed, and its error propagates. ``traceable=True`` declares that
    a compiled graph may trace it in place of the slot's opaque operator (``Implementation``
    says what that asks of it); only an in-tree implementation is traced.
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
    for argument, value in (("writes_inputs", writes_inputs), ("traceable", traceable)):
        if not isinstance(value, bool):
            raise TypeError(f"{argument}: expected True or False, got {value!r}")
    origin, provider = _origin(impl)
    entry = Implementation(op, name, impl, predicate, accepts, _checked_sources(sources, impl),
                           origin, capabilities, backward, writes_inputs, traceable, provider)
    _ensure_loaded(settings.selection())  # in-tree providers first: a caller's is newer
    _insert(entry)
    return entry


def _insert(entry: Implementation) -> None:
    with state._lock:
        entries = [e for e in state._impls[entry.op] if e.name != entry.name]
        state.forget(e for e in state._impls[entry.op] if e.name == entry.name)
        entries.insert(0, entry)
        entries.sort(key=lambda e: e.is_reference)  # stable: the reference sinks to the end
        state._impls[entry.op] = entries
        state.invalidate()


def unregister(op: str, name: str) -> bool:
    """Remove ``name`` from slot ``op``. Returns False, and changes nothing, for an unknown name;
    ``reference`` cannot be removed."""
    get_slot(op)
    name = _checked_name(name)
    with state._lock:
        before = state._impls[op]
        after = [e for e in before if e.name != name]
        if len(after) == len(before):
            return False
        state.forget(e for e in before if e.name == name)
        state._impls[op] = after
        state.invalidate()
        return True


def clear_cache() -> None:
    """Forget memoized resolution and predicate results (they are recomputed on demand)."""
    with state._lock:
        state._predicate_results.clear()
        state.invalidate()


def _ensure_loaded(selection: settings.Selection) -> None:
    """Register the references, then import providers unless references are forced.

    ``state._providers_started`` guards against re-entry (providers call ``register``) under the
    re-entrant load lock; ``state._providers_loaded`` is set only once every provider is
    imported, so another thread never resolves with half of them.
    """
    if state._references_loaded and (state._providers_loaded or selection.reference_only):
        return
    with state._load_lock:
        if not state._references_loaded:
            for slot in SLOTS:
                reference = slot.load_reference()
                if reference is not None:
                    _insert(Implementation(slot.name, REFERENCE, reference,
                                           sources=_default_sources(reference), origin=IN_TREE,
                                           provider=reference.__module__))
            state._references_loaded = True
        if not state._providers_started and not selection.reference_only:
            state._providers_started = True
            providers.import_providers(loading)
            state._providers_loaded = True

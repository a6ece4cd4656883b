"""Asking the registry without running a slot: who is registered and eligible, why each
implementation declines (``explain``, ``decline_reason``), what runs per slot (``active``), what
failed (``failures``), and the plan a direct call of one implementation runs on
(``plan_or_raise``)."""

from __future__ import annotations

from collections.abc import Callable

from libreyolo.capture import graph_capture

from .. import settings
from ..slots import SLOTS, get_slot
from . import state
from .environment import _eligible, _environment_decline
from .records import INPUT_ERRORS, Choice, Implementation
from .registration import _ensure_loaded
from .selection import _ask, _judge, dispatch


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
    with state._lock:
        return list(state._impls[op])


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
        with state._lock:
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
            with state._lock:
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


def _input_decline(impl: Implementation, args: tuple, kwargs: dict) -> str | None:
    """The selection step's answer as a reason (None: taken)."""
    asked = _ask(impl, args, kwargs)
    return None if type(asked) is Choice else asked.reason


def plan_or_raise(impl: Implementation, args: tuple, kwargs: dict | None = None):
    """What a direct call of ``impl`` (no ``prepared`` plan given) runs on: the selection step's
    plan, or None. A decline raises, since nothing falls back: the slot's own error for a bad
    input (its validator, as ``dispatch``'s judge: the same error on every path), else a
    ``ValueError`` naming the implementation and the reason (an ``accepts`` answering a wrong
    kind of thing included)."""
    kwargs = kwargs or {}
    asked = _ask(impl, args, kwargs)
    if type(asked) is Choice:
        return asked.plan
    if graph_capture() is None:  # a traced input is no input to validate
        _judge(impl.op, args, kwargs)
    raise ValueError(f"{impl.op} {impl.name} implementation declines this input: {asked.reason}")


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
    with state._lock:
        return {(impl.op, impl.name): what for impl, what in state._failures.items()}

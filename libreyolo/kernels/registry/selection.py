"""Which implementation runs a call, and running it: the one selection step (``_ask``: the
declared capabilities, then ``accepts``, read as a ``Choice`` or a ``Declined``), the call that
runs the first implementation that takes an input and judges the others (``run_selected``),
the capture check in front of it (``dispatch``), the choice without running (``choose``) and the
gradients of what a call would run (``backward``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from libreyolo.capture import COMPILE, graph_capture

from .. import settings
from ..prepared import Prepared
from ..slots import SLOTS, Slot, get_slot
from . import state
from .environment import _disable, _eligible
from .records import (
    INPUT_ERRORS,
    Choice,
    Declined,
    Implementation,
    KernelOutputError,
    NoImplementationError,
)
from .registration import _ensure_loaded


@dataclass(frozen=True, slots=True)
class Declared:
    """What ``run_selected`` reads of a slot per call. A call giving between ``fewest`` and
    ``most`` positional arguments whose keywords the signature still has after them
    (``keywords_after``) needs no ``check_call``: the common call costs a length, two
    comparisons and a set comparison, not a function call (what ``Binder.check`` tests first).
    ``fits`` is the fast check of a result against the declared output."""

    fewest: int
    most: int
    keywords_after: tuple
    check_call: Callable[[tuple, dict], None]
    fits: Callable[[tuple, dict, object], bool]
    slot: Slot
    has_reference: bool


_DECLARED = {slot.name: Declared(slot.binder.n_required, len(slot.binder.positional),
                                 slot.binder.keywords_after, slot.binder.check, slot.fits, slot,
                                 slot.reference is not None) for slot in SLOTS}


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


def _ask(impl: Implementation, args: tuple, kwargs: dict) -> Choice | Declined:
    """The selection step every path shares: ``answer``, read by its type. What it raises
    propagates: each caller judges a raising ``accepts`` its own way."""
    given = answer(impl, args, kwargs)
    if given is None or isinstance(given, Prepared):
        return Choice(impl, given)
    if isinstance(given, str):
        return Declined(given)
    return Declined(f"accepts() returned {given!r} ({type(given).__name__}); it must return "
                    "None, a reason string or a Prepared plan", wrong_answer=True)


def _judge(op: str, args: tuple, kwargs: dict) -> None:
    """Raise the slot's own error if the input is bad (slots without a reference: their
    validator); return if it is fine. A call the slot's signature does not take is bad input
    whatever the validator's own signature accepts (a TypeError naming the signature)."""
    slot = get_slot(op)
    slot.bind(args, kwargs)
    validator = slot.load_validator()
    if validator is not None:
        validator(*args, **kwargs)


def _output_problem(slot: Slot, args: tuple, kwargs: dict, result: object) -> str | None:
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
    return run_selected(op, args, kwargs)


def run_selected(op: str, args: tuple, kwargs: dict):
    """``dispatch`` without its capture check: selects and runs (what the slot's operator runs,
    so a kernel never re-enters the operator, even traced)."""
    eligible = _eligible(op)
    declared = _DECLARED[op]
    judging = state.JUDGE_OUTPUTS
    if judging and not (declared.fewest <= len(args) <= declared.most and (
            not kwargs or declared.keywords_after[len(args)].issuperset(kwargs))):
        declared.check_call(args, kwargs)
    declined, suspects = [], []
    for impl in eligible:
        try:
            asked = _ask(impl, args, kwargs)
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - judged below: bad input or a bug
            suspects.append((impl, f"accepts() raised {type(exc).__name__}: {exc}"))
            declined.append(f"{impl.name}: accepts() raised {type(exc).__name__}")
            continue
        if type(asked) is Declined:
            if asked.wrong_answer:
                _disable(impl, asked.reason)
            declined.append(f"{impl.name}: {asked.reason}")
            continue
        try:
            result = impl.fn(*args, **kwargs) if asked.plan is None else \
                impl.fn(*args, prepared=asked.plan, **kwargs)
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
                fine = declared.fits(args, kwargs, result)
            except Exception:  # noqa: BLE001 - what the fast check cannot read, the rule says
                fine = False
            problem = None if fine else _output_problem(declared.slot, args, kwargs, result)
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
    if suspects or not declared.has_reference:
        _judge(op, args, kwargs)  # a bad input raises here, on every path, and disables nothing
        for suspect, what in suspects:
            _disable(suspect, what)
    if not declared.has_reference:
        return None
    raise NoImplementationError(
        f"no implementation of {op} took this input ({'; '.join(declined) or 'none registered'})"
    )


#: The module that defines the slots' operators and installs ``_compiled_call``.
_OPERATORS = "libreyolo.kernels.operators"

#: What a slot call under ``torch.compile`` becomes: the slot's operator (``operators.call``).
#: A hook the operators module installs (``compile_with``) rather than an import of it: the
#: operators run this module's selection, so this module does not import them back; it loads
#: them by name, as the providers are loaded, when a trace first needs them
#: (``_loaded_for_trace``), since defining them loads every slot's judge.
_compiled_call: Callable[[str, tuple, dict], object] | None = None


def compile_with(call: Callable[[str, tuple, dict], object]) -> None:
    """Make ``call(op, args, kwargs)`` what a slot call under ``torch.compile`` becomes."""
    global _compiled_call
    _compiled_call = call


def _captured(op: str, kind: str, args: tuple, kwargs: dict):
    """A slot call while a graph is captured (see ``dispatch``)."""
    if kind == COMPILE:
        _loaded_for_trace()
        _selection_guard()
        return _compiled_call(op, args, kwargs)
    reference = get_slot(op).load_reference()
    return None if reference is None else reference(*args, **kwargs)


def choose(op: str, args: tuple, kwargs: dict) -> Choice | None:
    """The first eligible implementation that takes this input, with its plan, without running
    anything: what ``dispatch`` would try first. An implementation whose ``accepts`` raises or
    answers wrongly is passed over here (a call would judge it). None: none takes it."""
    for impl in _eligible(op):
        try:
            asked = _ask(impl, args, kwargs)
        except torch.OutOfMemoryError:
            raise
        except Exception:  # noqa: BLE001 - the call judges it; choosing does not
            continue
        if type(asked) is Choice:
            return asked
    return None


def _loaded_for_trace() -> bool:
    """The providers loaded and the slots' operators defined, run by Dynamo as it traces a slot
    call (not traced: a constant, so it may import), so the registry generation
    ``_selection_guard`` reads next is the one the trace selects with."""
    _ensure_loaded(settings.selection())
    if _compiled_call is None:
        importlib.import_module(_OPERATORS)
    return True


# What ``torch.compiler.assume_constant_result`` does (torch 2.11 to 2.13): calling it imports
# Dynamo, and with it triton, at the registry's import, which must import neither.
_loaded_for_trace._dynamo_marked_constant = True


def _selection_guard() -> bool:
    """What the selection reads from the process, compared where Dynamo traces a slot call: a
    comparison makes Dynamo guard the compiled graph on each value compared (every setting's raw
    value and the registry generation), so a changed setting, a registration or a disabled
    implementation recompiles the graph, whose kernels were chosen when it was traced
    (``libreyolo.kernels.traced``). Plain comparisons: torch 2.11's Dynamo cannot ``hash`` a
    tuple."""
    changed = state._generation < 0
    for value in settings.traced_values():
        changed = changed or value == b"\0"
    return changed


def backward(op: str, grad: torch.Tensor, *args, **kwargs) -> tuple:
    """The gradients of slot ``op``'s differentiable inputs (``Slot.differentiable``) for the
    upstream gradient ``grad``: what the implementation ``dispatch`` would run computes, by its
    ``backward`` where it declared one, else through autograd over a fresh forward of it (the
    reference's or the portable path's last of all). A ``backward`` that raises is disabled like
    a failing call, and the recomputation answers."""
    slot = get_slot(op)
    choice = choose(op, args, kwargs)
    if choice is None:
        return _recomputed(slot, slot.load_portable(), {}, grad, args, kwargs)
    impl, prepared = choice.impl, choice.prepared
    if impl.backward is not None:
        try:
            return tuple(impl.backward(grad, *args, **prepared, **kwargs))
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - its own failure: the recomputation answers
            _disable(impl, f"backward raised {type(exc).__name__}: {exc}")
            return _recomputed(slot, slot.load_portable(), {}, grad, args, kwargs)
    return _recomputed(slot, impl.fn, prepared, grad, args, kwargs)


def _recomputed(slot: Slot, fn: Callable, prepared: dict, grad, args: tuple,
                kwargs: dict) -> tuple:
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

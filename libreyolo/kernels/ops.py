"""Callable entry points, one per slot: ``ops.fake_quant_fp8(x, scale)`` dispatches the slot.

Derived from the slot catalogue, so a new slot needs no edit here. Each entry point carries the
slot's declared signature (``inspect.signature``) and a docstring made from its declaration, so an
editor and ``help()`` show what it takes; ``ops.pyi``, generated from the same entry points
(``tests/packaging/test_typing.py`` checks it), shows type checkers the same signatures.
"""

from __future__ import annotations

import functools
import inspect
import textwrap

import torch

from .registry import dispatch
from .slots import Slot, get_slot, slot_names

#: A schema type (``slots.py``'s declarations) as the Python type a call passes.
_PYTHON_TYPES = {"Tensor": torch.Tensor, "int": int, "float": float, "bool": bool, "str": str,
                 "int[]": list[int], "ScalarType": torch.dtype}


def _python_type(schema_type: str):
    optional = schema_type.endswith("?")
    try:
        kind = _PYTHON_TYPES[schema_type.removesuffix("?")]
    except KeyError:
        raise ValueError(f"schema type {schema_type!r} has no Python type in ops._PYTHON_TYPES") \
            from None
    return kind | None if optional else kind


def _returned(slot: Slot):
    """The schema's result as a Python type; ``| None`` where no implementation may take an
    input (a slot without a reference: the caller then runs its portable path)."""
    result = slot.schema.partition("->")[2].strip()
    parts = [part.strip() for part in result.strip("()").split(",")]
    types = [_python_type(part) for part in parts]
    kind = tuple[tuple(types)] if result.startswith("(") else types[0]
    return kind if slot.reference is not None else kind | None


def _signature(slot: Slot) -> inspect.Signature:
    """The slot's declared signature, annotated with the Python types of its schema."""
    types = slot.argument_types
    return slot.signature.replace(
        parameters=[p.replace(annotation=_python_type(types[p.name]))
                    for p in slot.signature.parameters.values()],
        return_annotation=_returned(slot))


def _names(values) -> str:
    return ", ".join(str(v).removeprefix("torch.") for v in values)


def _wrapped(line: str, indent: str = "") -> str:
    """A paragraph, or an indented entry whose later lines are indented once more."""
    return textwrap.fill(line, 88, initial_indent=indent, break_long_words=False,
                         subsequent_indent=indent + "    " if indent else "")


def _argument(slot: Slot, parameter: inspect.Parameter) -> str:
    """One ``Args:`` entry: its type and default, and what the declaration says of it."""
    name = parameter.name
    kind = inspect.formatannotation(parameter.annotation)
    if parameter.default is not inspect.Parameter.empty:
        kind += f", default {_names([repr(parameter.default)])}"
    notes = []
    if name in slot.differentiable:
        notes.append("the straight-through gradient flows to it" if slot.contract.ste
                     else "differentiable")
    notes += [f"no gradient when {argument}={value!r}"
              for target, argument, value in slot.gradient_unless if target == name]
    if name in slot.float8_inputs:
        notes.append("E4M3 codes (torch.float8_e4m3fn)")
    return _wrapped(f"{name} ({kind}){': ' + '; '.join(notes) if notes else ''}", "    ")


def _docstring(slot: Slot, signature: inspect.Signature) -> str:
    """What the slot takes, returns and raises, from its declaration (``slots.py``)."""
    plain = inspect.Signature([p.replace(annotation=inspect.Parameter.empty)
                               for p in signature.parameters.values()])
    result = inspect.formatannotation(signature.return_annotation)
    rule = slot.output
    returns = f"{result}: {rule!r}: {(inspect.getdoc(type(rule)) or '').split(chr(10))[0]}"
    if slot.reference is not None:
        judge, last = f"the reference ({slot.reference})", [_wrapped(
            "NoImplementationError: no implementation took the input (the message gives each "
            "one's reason).", "    ")]
    else:
        returns += (" None when no implementation takes the input: the caller then runs its "
                    f"portable path ({slot.portable}).")
        judge, last = f"the validator ({slot.validator})", []
    return "\n".join([
        _wrapped(f"{slot.name}{plain}"), "",
        _wrapped(f"{slot.doc[0].upper()}{slot.doc[1:]}."), "",
        _wrapped(f"Dispatches slot {slot.name!r}: the first eligible implementation that takes "
                 "the input runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows "
                 "which, and why). Defined for inputs of dtype "
                 f"{_names(slot.dtypes)}; layouts {_names(slot.layouts)}."), "",
        "Args:", *(_argument(slot, p) for p in signature.parameters.values()), "",
        "Returns:", _wrapped(returns, "    "), "",
        "Raises:",
        _wrapped("TypeError: a call the signature does not take (a missing, unknown or "
                 "repeated argument).", "    "),
        _wrapped(f"ValueError, TypeError: a bad input, as {judge} raises it.", "    "),
        *last,
    ])


@functools.cache
def _entry_point(name: str):
    """``dispatch`` bound to the slot: a C-level partial, no Python frame of its own per call
    (every slot call comes through here, and a Python frame with ``**kwargs`` is a measurable
    share of a call: ``benchmarks/NOTES.md``, "Host-side helpers"). Its signature and docstring
    are attributes of the partial, read by ``inspect`` and ``help()``, not per call."""
    slot = get_slot(name)
    call = functools.partial(dispatch, name)
    call.__name__ = call.__qualname__ = name
    call.__module__ = __name__
    call.__signature__ = _signature(slot)
    call.__doc__ = _docstring(slot, call.__signature__)
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

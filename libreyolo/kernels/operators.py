"""The slots as PyTorch operators: ``torch.ops.libreyolo.<slot>``, derived from the declarations.

``torch.compile`` cannot see into the registry (its selection reads settings and per-process
state on every call), so under compile a slot call becomes its operator (``registry.dispatch``
routes it here through the hook this module installs, ``registry.compile_with(call)``: this
module runs the registry's selection, so the registry does not import it back, and loads it by
name when a trace first needs it): inductor treats the operator as opaque, and when the compiled
code runs, the operator's kernel is the registry's eager selection — the Triton kernel on CUDA,
the reference run as written on CPU, a third party's implementation through the same registry.
So a compiled call gives the eager call's bits, forward and backward. Exports never get here:
they hold the portable math (``libreyolo.capture``).

Each operator is made from its slot's declaration (``slots.py``), with no per-slot code:
- the schema is the declaration's;
- the kernel (``CompositeExplicitAutograd``, any device) runs ``dispatch`` without autograd, and a
  slot without a reference falls back to its portable path, so an operator always returns tensors;
- the fake kernel runs the slot's judge (the reference, or the validator) on the fake inputs, so
  bad input raises the eager error when the graph is traced; checks that need tensor values are
  left to the real call. Its outputs come from the declared output rule;
- a slot with differentiable inputs gets a second operator, ``<slot>_backward(grad, ...)``, whose
  kernel is ``registry.backward`` (the selected implementation's own backward where it declares
  one), and the autograd formula that calls it.

- when AOTAutograd traces a compiled graph, each operator's rule (``traced.py``) chooses once for
  the traced input: an in-tree Triton implementation is traced in the operator's place, so
  inductor launches its kernels itself; anything else keeps the opaque operator above.

Eager calls never come here: ``ops.<slot>`` and ``dispatch`` keep their direct path.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, dtype, float8_e4m3fn, uint8

from libreyolo.capture import no_host_reads

from . import registry, traced
from .outputs import Output
from .slots import SLOTS, Slot, get_slot, schema_arguments

NAMESPACE = "libreyolo"
_library = torch.library.Library(NAMESPACE, "DEF")
#: ``torch.ops.libreyolo``. ``call``'s trace reads no ``torch`` attribute on this module's global,
#: which Dynamo would guard with a comparison against ``libreyolo.capture``'s ``torch`` (the same
#: module reached by two names).
_OPERATORS = torch.ops.libreyolo

#: Exceptions a fake tensor raises where a value is needed: the real call checks those.
try:
    from torch._subclasses.fake_tensor import (
        DataDependentOutputException,
        DynamicOutputShapeException,
    )
    from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

    VALUE_NEEDED: tuple[type[Exception], ...] = (
        DataDependentOutputException, DynamicOutputShapeException, GuardOnDataDependentSymNode)
except ImportError:  # pragma: no cover - every torch this package admits has them
    VALUE_NEEDED = ()


#: Each slot's judge (``Slot.judge``), loaded when its operator is defined: ``call`` runs while
#: Dynamo traces, and loading it there would call ``importlib.import_module``, which Dynamo
#: refuses to trace (a graph break in every compiled slot call).
_JUDGES: dict[str, object] = {}


def operator(name: str):
    """``torch.ops.libreyolo.<name>``: the slot's operator."""
    return getattr(_OPERATORS, name)


def call(name: str, args: tuple, kwargs: dict):
    """The slot's operator on a call's arguments: ``spatial_shapes`` given as pairs becomes the
    int64 tensor the schema takes (``_shapes_tensor``), and E4M3 inputs (``Slot.float8_inputs``)
    cross as their bytes, since torch's schema check compares inputs with ``allclose``, which
    float8 lacks; an input of another dtype gets the slot's own error.

    Dynamo traces this once per graph and guards the graph on every global the trace reads. So
    the binding and the type checks are decided by ``_call_form`` from what each argument is
    (``_described``), which Dynamo takes as a constant: a compiled call is not guarded on the
    slot's declaration (about 40 guards fewer, 2-4 µs a call on CPU: ``benchmarks/NOTES.md``)."""
    form = _call_form(name, tuple(_described(a) for a in args),
                      tuple((key, _described(value)) for key, value in kwargs.items()))
    if form.pairs is not None:  # pairs are checked as given (SymInts from .shape included)
        _JUDGES[name](*args, **kwargs)
    if form.error is not None:
        if form.judge_first:  # the slot's own error, not the schema's
            _JUDGES[name](*args, **kwargs)
        raise TypeError(form.error)
    values = [args[position] if position >= 0 else kwargs[key] if key is not None else default
              for position, key, default in form.sources]
    if form.pairs is not None:
        values[form.pairs] = _shapes_tensor(values[form.pairs], values)
    for index in form.float8:
        if values[index].dtype != float8_e4m3fn:
            _JUDGES[name](*args, **kwargs)
            raise TypeError(f"{name}: {form.names[index]} must be a float8_e4m3fn tensor")
        values[index] = values[index].view(uint8)
    keywords = {form.names[i]: values[i] for i in range(form.positional, len(values))}
    return operator(name)(*values[:form.positional], **keywords)


def _described(value: object) -> str | tuple:
    """What ``_call_form`` needs to know of an argument: its type's name, and for a list or
    tuple its elements' (a tensor's values are never read)."""
    if isinstance(value, Tensor):
        return "Tensor"
    if value is None:
        return "NoneType"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, str):
        return "str"
    if isinstance(value, dtype):
        return "dtype"
    if isinstance(value, list):
        return ("list", tuple(_described(v) for v in value))
    if isinstance(value, tuple):
        return ("tuple", tuple(_described(v) for v in value))
    return ("other", type(value).__name__)


class CallForm(NamedTuple):
    """How a call's arguments become its operator's (``_call_form``)."""

    names: tuple[str, ...]  # the slot's parameters, in order
    positional: int  # how many of them the operator takes positionally
    #: per parameter, where its value is: (its position in args, or -1; its key in kwargs, or
    #: None; its default)
    sources: tuple[tuple[int, str | None, object], ...]
    pairs: int | None  # the index of ``spatial_shapes`` given as (H, W) pairs
    float8: tuple[int, ...]  # the indices of the E4M3 inputs
    error: str | None  # the TypeError of a call the slot does not take
    judge_first: bool  # a wrong type: the slot's judge raises its own error first, if it does


def _call_form(name: str, args: tuple, kwargs: tuple) -> CallForm:
    """``call``'s decisions for a call whose arguments ``_described`` gives: a constant to Dynamo
    (``_dynamo_marked_constant``: what ``torch.compiler.assume_constant_result`` sets, without
    importing Dynamo here), so nothing read here guards the compiled graph."""
    slot = get_slot(name)
    names = tuple(slot.signature.parameters)
    positional = len(slot.binder.positional)
    try:
        bound = slot.bind(args, dict(kwargs))
    except TypeError as exc:
        return CallForm(names, positional, (), None, (), str(exc), False)
    given = dict(kwargs)
    sources = tuple((i, None, None) if i < len(args) else
                    (-1, n, None) if n in given else (-1, None, bound[n])
                    for i, n in enumerate(names))
    passed = {*names[:len(args)], *given}  # the rest hold their defaults, not descriptions
    as_pairs = bound.get("spatial_shapes", "Tensor") not in ("Tensor", "NoneType")
    for argument, kind in slot.argument_types.items():
        described = bound[argument] if argument in passed else _described(bound[argument])
        if not (as_pairs and argument == "spatial_shapes") and not _fits(kind, described):
            return CallForm(names, positional, (), None, (),
                            f"{name}: {argument} must be {kind}, got {_type_name(described)}",
                            True)
    return CallForm(names, positional, sources,
                    names.index("spatial_shapes") if as_pairs else None,
                    tuple(names.index(a) for a in slot.float8_inputs), None, False)


_call_form._dynamo_marked_constant = True


def _shapes_tensor(pairs, values: list) -> torch.Tensor:
    """``(H, W)`` pairs as the ``(levels, 2)`` int64 tensor the schema takes, made on the device
    of the call's first tensor: a traced kernel reads the sizes there (``traced.py``), and
    inductor makes a short flat tensor of known ints in a kernel of its own, where a host tensor
    copied over would put a CPU node in the graph, which keeps it out of CUDA graphs."""
    device = next((v.device for v in values if isinstance(v, torch.Tensor)), None)
    flat = [size for pair in pairs for size in pair]
    return torch.tensor(flat, dtype=torch.int64, device=device).view(-1, 2)


def _fits(kind: str, described: str | tuple) -> bool:
    """Whether an argument ``_described`` describes is what a schema type takes (``spatial_shapes``
    pairs are converted)."""
    if kind.endswith("?"):
        return described == "NoneType" or _fits(kind[:-1], described)
    if kind in ("Tensor", "int", "str"):
        return described == kind
    if kind == "int[]":
        return described[0] in ("list", "tuple") and all(d == "int" for d in described[1])
    if kind == "ScalarType":
        return described == "dtype"
    raise AssertionError(f"a schema type operators.py does not know: {kind}")


def _type_name(described: str | tuple) -> str:
    """The type name an error gives for an argument ``_described`` describes."""
    if isinstance(described, str):
        return described
    kind, detail = described
    return detail if kind == "other" else kind


def _as_called(slot: Slot, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The arguments an operator got, as the slot takes them (its E4M3 inputs from bytes)."""
    if not slot.float8_inputs:
        return args, kwargs
    bound = slot.bind(args, kwargs)
    for argument in slot.float8_inputs:
        bound[argument] = bound[argument].view(torch.float8_e4m3fn)
    return slot.split(bound)


def _kernel(slot: Slot):
    portable = None if slot.reference is not None else slot.load_portable()

    def kernel(*args, **kwargs):
        args, kwargs = _as_called(slot, args, kwargs)
        with torch.no_grad():
            out = registry.run_selected(slot.name, args, kwargs)
            if out is None:
                out = portable(*args, **kwargs)
        return _unaliased(out, args, kwargs)

    kernel.__name__ = kernel.__qualname__ = f"{slot.name}_kernel"
    return kernel


def _unaliased(out, args: tuple, kwargs: dict):
    """An operator's outputs are contiguous, as its fake kernel says, and share no memory with
    its inputs: copy one that is not or does (an implementation may return a view, or hand back
    an input it did not need to change)."""
    if isinstance(out, tuple):
        return tuple(_unaliased(o, args, kwargs) for o in out)
    inputs = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if not out.is_contiguous() or any(
            out.untyped_storage().data_ptr() == t.untyped_storage().data_ptr() != 0
            for t in inputs):
        return out.contiguous(memory_format=torch.contiguous_format).clone() \
            if out.is_contiguous() else out.contiguous()
    return out


def _fake(slot: Slot):
    def fake(*args, **kwargs):
        args, kwargs = _as_called(slot, args, kwargs)
        try:
            with no_host_reads():
                slot.judge(*args, **kwargs)
        except VALUE_NEEDED:
            pass  # a check of tensor values: the real call makes it
        except registry.INPUT_ERRORS as exc:
            raise _refused(slot, exc) from None
        expected = slot.expected_output(args, kwargs)
        if isinstance(expected, Output):
            return expected.empty()
        return tuple(o.empty() for o in expected)

    fake.__name__ = fake.__qualname__ = f"{slot.name}_fake"
    return fake


def _refused(slot: Slot, exc: Exception) -> Exception:
    """What the fake kernel raises for bad input: Dynamo wraps any other exception of a fake
    kernel in its own error, but breaks the graph on this one, so the call runs eagerly and
    raises the slot's own error (under ``fullgraph=True`` Dynamo reports it, with its text)."""
    from torch._subclasses.fake_tensor import UnsupportedOperatorException

    refused = UnsupportedOperatorException(operator(slot.name).default)
    refused.args = (f"{slot.name}: {type(exc).__name__}: {exc}",)
    return refused


def _backward_schema(slot: Slot) -> str:
    arguments = schema_arguments(slot.schema)
    returns = ", ".join("Tensor" for _ in slot.differentiable)
    result = returns if len(slot.differentiable) == 1 else f"({returns})"
    return f"{slot.name}_backward(Tensor grad, {arguments}) -> {result}"


def _backward_kernel(slot: Slot):
    def kernel(grad, *args, **kwargs):
        with torch.no_grad():
            grads = registry.backward(slot.name, grad, *args, **kwargs)
        grads = _unaliased(tuple(grads), (grad, *args), kwargs)
        return grads[0] if len(grads) == 1 else grads

    kernel.__name__ = kernel.__qualname__ = f"{slot.name}_backward_kernel"
    return kernel


def _backward_fake(slot: Slot):
    def fake(grad, *args, **kwargs):
        bound = slot.bind(args, kwargs)
        grads = tuple(torch.empty(bound[name].shape, dtype=bound[name].dtype,
                                  device=bound[name].device) for name in slot.differentiable)
        return grads[0] if len(grads) == 1 else grads

    return fake


def autograd_formula(slot: Slot, backward_op):
    """``(backward, setup_context)`` for an operator with ``slot``'s signature, whose gradients
    come from ``backward_op(grad, *arguments)`` (one per differentiable input, in order): each
    gradient at its input's position, where autograd needs it and the declaration lets it flow
    (``Slot.gradient_flows``). Also the formula of ``benchmarks/bench/compile_floor.py``'s bare
    ops, so the floor's backward is asked for what a slot call's is."""
    names = tuple(slot.signature.parameters)
    positions = [names.index(name) for name in slot.differentiable]

    def setup_context(ctx, inputs, output, keyword_only_inputs=None):
        inputs = (*inputs, *(keyword_only_inputs or {}).values())
        tensors = [i for i, value in enumerate(inputs) if isinstance(value, torch.Tensor)]
        ctx.tensor_positions = tensors
        ctx.others = {i: value for i, value in enumerate(inputs) if i not in tensors}
        ctx.positional = len(inputs) - len(keyword_only_inputs or {})
        ctx.save_for_backward(*(inputs[i] for i in tensors))

    def backward(ctx, grad):
        inputs = [None] * len(names)
        for i, value in zip(ctx.tensor_positions, ctx.saved_tensors, strict=True):
            inputs[i] = value
        for i, value in ctx.others.items():
            inputs[i] = value
        arguments = dict(zip(names, inputs, strict=True))
        grads = backward_op(grad, *inputs[:ctx.positional],
                            **dict(list(arguments.items())[ctx.positional:]))
        grads = grads if isinstance(grads, tuple) else (grads,)
        out = [None] * ctx.positional  # keyword-only inputs get no gradient slot
        for position, name, g in zip(positions, slot.differentiable, grads, strict=True):
            if ctx.needs_input_grad[position] and slot.gradient_flows(name, arguments):
                out[position] = g
        return tuple(out)

    return backward, setup_context


def _define(slot: Slot) -> None:
    qualified = f"{NAMESPACE}::{slot.name}"
    _JUDGES[slot.name] = slot.judge
    _library.define(f"{slot.name}{slot.schema}")
    _library.impl(slot.name, _kernel(slot), "CompositeExplicitAutograd")
    torch.library.register_fake(qualified, _fake(slot), lib=_library)
    if slot.differentiable:
        _library.define(_backward_schema(slot))
        _library.impl(f"{slot.name}_backward", _backward_kernel(slot),
                      "CompositeExplicitAutograd")
        torch.library.register_fake(f"{qualified}_backward", _backward_fake(slot),
                                    lib=_library)
        backward, setup_context = autograd_formula(slot, operator(f"{slot.name}_backward"))
        torch.library.register_autograd(qualified, backward, setup_context=setup_context,
                                        lib=_library)
    traced.install(slot, _library, _as_called)


for _slot in SLOTS:  # once, at import: importing the module defines the operators
    _define(_slot)
registry.compile_with(call)

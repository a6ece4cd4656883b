"""Reference fake-quantization ops: the definition every accelerated implementation must match.

Each op quantizes and dequantizes in float32 (see `docs/quantization.md` for the rules), returns a
tensor of the input's dtype and shape, and has the straight-through backward: the gradient is
`torch.where(mask, grad, 0)`, with the op's mask stated in its docstring. `ste_mask` computes
that mask without autograd, for building expected gradients. Scales get no gradient.

The ops are not written here: each slot declared in `libreyolo/kernels/slots.py` with this module
as its reference, ``fake_quant_<q>``, gets its op made from quantizer ``quantizers.<q>`` at
import, with the declared signature and the quantizer's docstring. Adding a fake-quant slot is
its declaration and its quantizer.
"""

from __future__ import annotations

import linecache
from collections.abc import Callable

import torch

from libreyolo.kernels.slots import SLOTS, Slot
from libreyolo.quant import quantizers
from libreyolo.quant.numerics import canonical_nan_like
from libreyolo.quant.straight_through import StraightThrough


def _forward_values(x: torch.Tensor, result: quantizers.Quantized) -> torch.Tensor:
    """The quantizer's values cast back to x's dtype, NaN inputs as the canonical NaN."""
    out = result.values.to(x.dtype)
    return torch.where(torch.isnan(x), canonical_nan_like(x.dtype, x.device), out)


class _QuantizerStep:
    """The straight-through step of a reference: forward ``_forward_values``, backward the
    gradient where the quantizer's mask is set, else 0."""

    @staticmethod
    def forward(x, quantizer, args, kwargs):
        result = quantizer(x, *args, **kwargs)
        return _forward_values(x, result), (result.mask,), None

    @staticmethod
    def backward(saved, state, grad, *extra):
        (mask,) = saved
        return torch.where(mask, grad, 0.0)


_QUANTIZER_STEP = _QuantizerStep()


def _fake_quant(quantizer: Callable[..., quantizers.Quantized], x, *args, **kwargs):
    """The autograd function only where a gradient can flow: it is a Python callback that
    ``torch.jit.trace`` records as an opaque ``prim::PythonOp`` and the ONNX exporters cannot
    translate, so an inference input (finalized models, exports) gets the plain tensor math."""
    if isinstance(x, torch.Tensor) and x.requires_grad and torch.is_grad_enabled():
        return StraightThrough.apply(x, _QUANTIZER_STEP, quantizer, args, kwargs)
    return _forward_values(x, quantizer(x, *args, **kwargs))


def _quantizer_name(slot: Slot) -> str:
    """``<q>`` for fake-quant slot ``fake_quant_<q>``, whose op is made from ``quantizers.<q>``;
    an ImportError, at this module's import, when there is no such quantizer."""
    name = slot.name.removeprefix("fake_quant_")
    if not callable(getattr(quantizers, name, None)):
        raise ImportError(f"slot {slot.name} is declared with reference {slot.reference}, which "
                          f"is made from quantizers.{name}; libreyolo.quant.quantizers has no "
                          f"{name}")
    return name


def _make_op(slot: Slot) -> Callable[..., torch.Tensor]:
    """The op of fake-quant ``slot``: ``_fake_quant(quantizers.<q>, ...)`` with exactly the
    declared signature and the quantizer's docstring, a function of this module.

    Made by compiling the ``def`` the slot's signature spells, not as a closure over
    ``*args, **kwargs``: the registry calls the reference on every CPU call, and a function with
    its own parameters costs what a hand-written one does, Python itself refusing a call the
    signature does not take (with a TypeError naming the op), where a closure would check each
    call again (``Signature.bind`` costs microseconds) and raise an error of its own. The source
    is our own declaration; it goes in ``linecache`` so tracebacks and ``inspect.getsource``
    show it.
    """
    q = _quantizer_name(slot)
    arguments = ", ".join(
        name if parameter.kind is parameter.POSITIONAL_OR_KEYWORD else f"{name}={name}"
        for name, parameter in slot.signature.parameters.items())
    source = (f"def {slot.name}{slot.signature}:\n"
              f"    return _fake_quant(quantizers.{q}, {arguments})\n")
    filename = f"<{__name__}.{slot.name}, made from its slot>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Callable] = {}
    exec(compile(source, filename, "exec"), globals(), namespace)
    op = namespace[slot.name]
    op.__doc__ = getattr(quantizers, q).__doc__
    return op


#: The slots this module is the reference of, in their declared order.
_SLOTS = tuple(slot for slot in SLOTS if slot.reference == f"{__name__}:{slot.name}")
_QUANTIZER_OF_OP = {slot.name: getattr(quantizers, _quantizer_name(slot)) for slot in _SLOTS}
FAKE_QUANT_OPS = tuple(_QUANTIZER_OF_OP)
globals().update({slot.name: _make_op(slot) for slot in _SLOTS})


def __getattr__(name: str) -> Callable[..., torch.Tensor]:
    """A name this module lacks (PEP 562). Static type checkers cannot see the ops made at
    import; this function's return type is what they take any other name of the module for."""
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}; its ops are those of "
                         f"the declared fake-quant slots: {', '.join(FAKE_QUANT_OPS)}")


def ste_mask(op: str, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """The straight-through mask of fake-quant op `op` (by name) for these arguments, no autograd.

    The expected gradient of `op(x, *args, **kwargs)` for an upstream gradient g is
    `torch.where(ste_mask(op, x, *args, **kwargs), g, 0)`.
    """
    if op not in _QUANTIZER_OF_OP:
        raise ValueError(f"op must be one of {FAKE_QUANT_OPS}, got {op!r}")
    return _QUANTIZER_OF_OP[op](x, *args, **kwargs).mask

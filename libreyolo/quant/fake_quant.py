"""Reference fake-quantization ops: the definition every accelerated implementation must match.

Each op quantizes and dequantizes in float32 (see `docs/quantization.md` for the rules), returns a
tensor of the input's dtype and shape, and has the straight-through backward: the gradient is
`torch.where(mask, grad, 0)`, with the op's mask stated in its docstring. `ste_mask` computes
that mask without autograd, for building expected gradients. Scales get no gradient.

One short ``def fake_quant_<q>`` per slot declared in `libreyolo/kernels/slots.py` with this
module as its reference: it has the declared signature and calls ``_fake_quant`` with quantizer
``quantizers.<q>``, whose docstring it takes at import. The declaration stays the one source of
truth: a declared slot without its def is an ImportError here, and
`tests/quant/test_ops_from_declarations.py` holds each def's signature to its declaration.
Plain defs, not functions generated from the declaration, so `grep "def fake_quant_fp8"` finds
the op; the registry calls the reference on every CPU call, and a def costs nothing to call
beyond its body, Python itself refusing a call the signature does not take (a TypeError naming
the op).
"""

from __future__ import annotations

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


def fake_quant_int8_per_channel(x, scale, axis=0):
    return _fake_quant(quantizers.int8_per_channel, x, scale, axis)


def fake_quant_int8_affine(x, scale, zero_point):
    return _fake_quant(quantizers.int8_affine, x, scale, zero_point)


def fake_quant_fp8(x, scale=None, *, fmt="e4m3", axis=None):
    return _fake_quant(quantizers.fp8, x, scale, fmt=fmt, axis=axis)


def fake_quant_int_grouped(w, bits, group_size):
    return _fake_quant(quantizers.int_grouped, w, bits, group_size)


def fake_quant_nvfp4_weight(w, global_amax=None):
    return _fake_quant(quantizers.nvfp4_weight, w, global_amax)


def fake_quant_nvfp4_dynamic(x):
    return _fake_quant(quantizers.nvfp4_dynamic, x)


def fake_quant_mxfp4_weight(w):
    return _fake_quant(quantizers.mxfp4_weight, w)


def fake_quant_mxfp4_dynamic(x):
    return _fake_quant(quantizers.mxfp4_dynamic, x)


def fake_quant_mxfp8_weight(w):
    return _fake_quant(quantizers.mxfp8_weight, w)


def fake_quant_mxfp8_dynamic(x):
    return _fake_quant(quantizers.mxfp8_dynamic, x)


def _quantizer_documenting(slot: Slot) -> Callable[..., quantizers.Quantized]:
    """``quantizers.<q>``, the quantizer of fake-quant slot ``fake_quant_<q>``, whose docstring
    the slot's def takes; an ImportError naming both when this module has no such def (a slot
    declared without its op) or the quantizers no such function."""
    name = slot.name.removeprefix("fake_quant_")
    where = f"slot {slot.name} is declared with reference {slot.reference}"
    op = globals().get(slot.name)
    if not callable(op):
        raise ImportError(f"{where}; {__name__} has no def {slot.name} (one that calls "
                          f"_fake_quant with quantizers.{name})")
    quantizer = getattr(quantizers, name, None)
    if not callable(quantizer):
        raise ImportError(f"{where}, which calls quantizers.{name}; "
                          f"libreyolo.quant.quantizers has no {name}")
    op.__doc__ = quantizer.__doc__
    return quantizer


#: The slots this module is the reference of, in their declared order.
_SLOTS = tuple(slot for slot in SLOTS if slot.reference == f"{__name__}:{slot.name}")
_QUANTIZER_OF_OP = {slot.name: _quantizer_documenting(slot) for slot in _SLOTS}
FAKE_QUANT_OPS = tuple(_QUANTIZER_OF_OP)


def ste_mask(op: str, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """The straight-through mask of fake-quant op `op` (by name) for these arguments, no autograd.

    The expected gradient of `op(x, *args, **kwargs)` for an upstream gradient g is
    `torch.where(ste_mask(op, x, *args, **kwargs), g, 0)`.
    """
    if op not in _QUANTIZER_OF_OP:
        raise ValueError(f"op must be one of {FAKE_QUANT_OPS}, got {op!r}")
    return _QUANTIZER_OF_OP[op](x, *args, **kwargs).mask

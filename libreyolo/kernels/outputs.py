"""What a slot returns, as a function of its arguments: type, shape, dtype and device.

A slot's declaration names one of these rules (``libreyolo/kernels/slots.py``). The registry
judges what an implementation returns against it (no value is read, nothing syncs), and the
slot's PyTorch operator builds its fake (meta) result from it, so a compiled graph knows the
output without running a kernel. A rule takes the call's arguments bound to the slot's parameter
names and gives one ``Output``, or a tuple of them for a slot that returns several tensors.

The registry judges every accelerated call, so each rule also compiles, once per slot, a check
``fits(args, kwargs, result) -> bool`` that reads the arguments where the call put them (no
binding, no ``Output`` built): True when ``result`` is the declared output. False (or an
exception, for an input the rule cannot describe) sends the registry to the full rule, which says
what differs. The check reads each argument where the slot's ``Binder.place`` says a call holds
it, ``args[position] if len(args) > position else kwargs.get(name, default)``, inline: a function
call per argument was most of an unpack slot's check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

import torch

if TYPE_CHECKING:  # slots.py declares the slots with these rules
    from .slots import Binder


class Output(NamedTuple):
    """One tensor a slot returns."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device

    def empty(self) -> torch.Tensor:
        return torch.empty(self.shape, dtype=self.dtype, device=self.device)

    def mismatch(self, result: object) -> str | None:
        """How `result` differs from this output (None: it is such a tensor)."""
        if not isinstance(result, torch.Tensor):
            return f"returned {type(result).__name__}, expected a tensor"
        for what, got, want in (("shape", tuple(result.shape), self.shape),
                                ("dtype", result.dtype, self.dtype),
                                ("device", result.device, self.device)):
            if got != want:
                return f"returned {what} {got}, expected {want}"
        return None


Fits = Callable[[tuple, dict, object], bool]

Tensor = torch.Tensor


class Rule:
    """What a slot returns: ``rule(bound)`` gives its ``Output`` (or a tuple of them);
    ``rule.compile(binder)`` gives the fast check for the slot's signature (module docstring)."""

    label = "rule"

    def __call__(self, args: Mapping[str, object]) -> Output | tuple[Output, ...]:
        raise NotImplementedError

    def compile(self, binder: Binder) -> Fits:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.label


class like(Rule):  # noqa: N801 - reads as the declaration it is: outputs.like("x")
    """The shape and device of argument `name`, its dtype or `dtype`."""

    def __init__(self, name: str, dtype: torch.dtype | None = None):
        self.name, self.dtype = name, dtype
        self.label = f"like({name!r}{f', {dtype}' if dtype else ''})"

    def __call__(self, args: Mapping[str, object]) -> Output:
        t = args[self.name]
        return Output(tuple(t.shape), self.dtype or t.dtype, t.device)

    def compile(self, binder: Binder) -> Fits:
        name, dtype = self.name, self.dtype
        i, default = binder.place(name)
        if dtype is None:
            def fits(args, kwargs, result):
                t = args[i] if len(args) > i else kwargs.get(name, default)
                return isinstance(result, Tensor) and result.dtype is t.dtype and \
                    result.device == t.device and result.shape == t.shape
        else:
            def fits(args, kwargs, result):
                t = args[i] if len(args) > i else kwargs.get(name, default)
                return isinstance(result, Tensor) and result.dtype is dtype and \
                    result.device == t.device and result.shape == t.shape
        return fits


class unpacked(Rule):  # noqa: N801
    """``(codes rows, in_features)`` of the ``dtype`` argument on the codes' device (MXFP8's
    codes hold one byte an input: their own width)."""

    def __init__(self, in_features: str | None = "in_features"):
        self.in_features = in_features
        self.label = f"unpacked({in_features!r})"

    def __call__(self, args: Mapping[str, object]) -> Output:
        codes = args["codes"]
        cols = args[self.in_features] if self.in_features else codes.shape[1]
        return Output((codes.shape[0], int(cols)), args["dtype"], codes.device)

    def compile(self, binder: Binder) -> Fits:
        (c, codes_default), (d, dtype_default) = binder.place("codes"), binder.place("dtype")
        features = self.in_features
        f, features_default = binder.place(features) if features else (None, None)

        def fits(args, kwargs, result):
            n = len(args)
            codes = args[c] if n > c else kwargs.get("codes", codes_default)
            shape = codes.shape
            if f is None:
                cols = shape[1]
            else:
                cols = args[f] if n > f else kwargs.get(features, features_default)
            dtype = args[d] if n > d else kwargs.get("dtype", dtype_default)
            return isinstance(result, Tensor) and result.dtype is dtype and \
                result.device == codes.device and result.shape == (shape[0], cols)
        return fits


class _Codes(Rule):
    """E4M3 codes shaped like ``x``, and float32 scales, one per row: ``x.shape[:-1] + (1,)``."""

    label = "fp8_codes_and_row_scales"

    def __call__(self, args: Mapping[str, object]) -> tuple[Output, Output]:
        x = args["x"]
        return (Output(tuple(x.shape), torch.float8_e4m3fn, x.device),
                Output((*x.shape[:-1], 1), torch.float32, x.device))

    def compile(self, binder: Binder) -> Fits:
        e4m3, f32 = torch.float8_e4m3fn, torch.float32
        i, default = binder.place("x")

        def fits(args, kwargs, result):
            if type(result) is not tuple or len(result) != 2:
                return False
            x = args[i] if len(args) > i else kwargs.get("x", default)
            codes, scales = result
            shape, device = x.shape, x.device
            return isinstance(codes, Tensor) and isinstance(scales, Tensor) and \
                codes.dtype is e4m3 and scales.dtype is f32 and codes.device == device and \
                scales.device == device and codes.shape == shape and \
                scales.shape == (*shape[:-1], 1)
        return fits


fp8_codes_and_row_scales = _Codes()


class _Epilogue(Rule):
    """``acc``'s shape and device in ``out_dtype``."""

    label = "epilogue"

    def __call__(self, args: Mapping[str, object]) -> Output:
        acc = args["acc"]
        return Output(tuple(acc.shape), args["out_dtype"], acc.device)

    def compile(self, binder: Binder) -> Fits:
        (a, acc_default), (d, dtype_default) = binder.place("acc"), binder.place("out_dtype")

        def fits(args, kwargs, result):
            n = len(args)
            acc = args[a] if n > a else kwargs.get("acc", acc_default)
            dtype = args[d] if n > d else kwargs.get("out_dtype", dtype_default)
            return isinstance(result, Tensor) and result.dtype is dtype and \
                result.device == acc.device and result.shape == acc.shape
        return fits


epilogue = _Epilogue()


class _Gemm(Rule):
    """``(a rows, b rows)`` (``b`` is stored output channels first) in ``out_dtype``."""

    label = "gemm"

    def __call__(self, args: Mapping[str, object]) -> Output:
        a, b = args["a"], args["b"]
        return Output((a.shape[0], b.shape[0]), args["out_dtype"], a.device)

    def compile(self, binder: Binder) -> Fits:
        (i, a_default), (j, b_default) = binder.place("a"), binder.place("b")
        d, dtype_default = binder.place("out_dtype")

        def fits(args, kwargs, result):
            n = len(args)
            a = args[i] if n > i else kwargs.get("a", a_default)
            b = args[j] if n > j else kwargs.get("b", b_default)
            dtype = args[d] if n > d else kwargs.get("out_dtype", dtype_default)
            return isinstance(result, Tensor) and result.dtype is dtype and \
                result.device == a.device and result.shape == (a.shape[0], b.shape[0])
        return fits


gemm = _Gemm()


class _Attention(Rule):
    """``(batch, len_q, heads * channels)`` in the value's dtype."""

    label = "attention"

    def __call__(self, args: Mapping[str, object]) -> Output:
        value, locations = args["value"], args["sampling_locations"]
        return Output((value.shape[0], locations.shape[1], value.shape[2] * value.shape[3]),
                      value.dtype, value.device)

    def compile(self, binder: Binder) -> Fits:
        (v, value_default), (loc, locations_default) = \
            binder.place("value"), binder.place("sampling_locations")

        def fits(args, kwargs, result):
            n = len(args)
            value = args[v] if n > v else kwargs.get("value", value_default)
            locations = args[loc] if n > loc else \
                kwargs.get("sampling_locations", locations_default)
            if not (isinstance(result, Tensor) and result.dtype is value.dtype
                    and result.device == value.device):
                return False
            batch, _, heads, channels = value.shape
            return result.shape == (batch, locations.shape[1], heads * channels)
        return fits


attention = _Attention()

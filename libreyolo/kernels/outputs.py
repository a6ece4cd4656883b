"""What a slot returns, as a function of its arguments: type, shape, dtype and device.

A slot's declaration names one of these rules (``libreyolo/kernels/slots.py``). The registry
judges what an implementation returns against it (no value is read, nothing syncs), and the
slot's PyTorch operator builds its fake (meta) result from it, so a compiled graph knows the
output without running a kernel. A rule takes the call's arguments bound to the slot's parameter
names and gives one ``Output``, or a tuple of them for a slot that returns several tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import torch


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


Rule = Callable[[Mapping[str, object]], "Output | tuple[Output, ...]"]


def like(name: str, dtype: torch.dtype | None = None) -> Rule:
    """The shape and device of argument `name`, its dtype or `dtype`."""

    def rule(args: Mapping[str, object]) -> Output:
        t = args[name]
        return Output(tuple(t.shape), dtype or t.dtype, t.device)

    rule.__qualname__ = f"like({name!r}{f', {dtype}' if dtype else ''})"
    return rule


def unpacked(in_features: str | None = "in_features") -> Rule:
    """``(codes rows, in_features)`` of the ``dtype`` argument on the codes' device (MXFP8's
    codes hold one byte an input: their own width)."""

    def rule(args: Mapping[str, object]) -> Output:
        codes = args["codes"]
        cols = args[in_features] if in_features else codes.shape[1]
        return Output((codes.shape[0], int(cols)), args["dtype"], codes.device)

    rule.__qualname__ = f"unpacked({in_features!r})"
    return rule


def fp8_codes_and_row_scales(args: Mapping[str, object]) -> tuple[Output, Output]:
    """E4M3 codes shaped like ``x``, and float32 scales, one per row: ``x.shape[:-1] + (1,)``."""
    x = args["x"]
    return (Output(tuple(x.shape), torch.float8_e4m3fn, x.device),
            Output((*x.shape[:-1], 1), torch.float32, x.device))


def epilogue(args: Mapping[str, object]) -> Output:
    acc = args["acc"]
    return Output(tuple(acc.shape), args["out_dtype"], acc.device)


def gemm(args: Mapping[str, object]) -> Output:
    a, b = args["a"], args["b"]
    return Output((a.shape[0], b.shape[0]), args["out_dtype"], a.device)


def attention(args: Mapping[str, object]) -> Output:
    """``(batch, len_q, heads * channels)`` in the value's dtype."""
    value, locations = args["value"], args["sampling_locations"]
    return Output((value.shape[0], locations.shape[1], value.shape[2] * value.shape[3]),
                  value.dtype, value.device)

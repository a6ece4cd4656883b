"""What every in-tree Triton provider shares: the environment check, the declared capabilities,
the interpreter's device rule and the host-side integer helpers of the plans.

A Triton provider is then its kernels, its plan and one registration line::

    register(slot, run, name="triton", predicate=triton_ready, capabilities=CAPABILITIES,
             accepts=accepts, sources=SOURCES)

The registry applies ``CAPABILITIES`` before the provider's ``accepts`` (graph capture, the
device and the mode of a call), so no provider writes those declines itself; ``accepts`` checks
the arguments (bad input raises the reference's error) and what its kernels cannot hold.
This module imports no triton: without it a provider still imports and registers, and
``triton_ready`` says which piece is missing.
"""

from __future__ import annotations

import importlib.util
from enum import IntEnum

import torch

from .capabilities import Capabilities
from .settings import interpreting

#: Compiled on CUDA tensors, eagerly and inside a CUDA graph; interpreted on CPU tensors under
#: ``TRITON_INTERPRET=1`` (how CI checks the kernels' logic); never while a graph is traced,
#: compiled or exported, whose graph keeps the portable math.
CAPABILITIES = Capabilities(devices={"cpu", "cuda"}, modes={"interpreter", "cuda", "cuda-graph"},
                            traced=False)


class FloatKind(IntEnum):
    """How a kernel is told a tensor's float dtype (a compile-time constant): the fake-quant and
    FP8 kernels read bfloat16 as int16 bits and widen them by a shift, the unpack kernels store
    it, the ragged MSDA kernels emulate its rounding."""

    FLOAT32 = 0
    FLOAT16 = 1
    BFLOAT16 = 2

    @classmethod
    def of(cls, dtype: torch.dtype) -> FloatKind:
        return {torch.float32: cls.FLOAT32, torch.float16: cls.FLOAT16}.get(dtype, cls.BFLOAT16)


def triton_ready() -> bool | str:
    """True when the kernels can run here, else the missing piece."""
    if not _installed("triton"):
        return "triton is not installed"
    if interpreting() or torch.cuda.is_available():
        return True
    return "no CUDA device, and TRITON_INTERPRET=1 (the interpreter, on CPU tensors) is not set"


def _installed(module: str) -> bool:
    """Found without importing it (an import hook may refuse it: that is "not installed")."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def interpreter_decline(device: torch.device) -> str | None:
    """Why a call on ``device`` is declined under ``TRITON_INTERPRET=1``, which interprets the
    kernels on CPU tensors only (None: no decline). A CUDA call is in mode ``cuda`` whatever the
    setting, so the declared modes cannot tell; a plan asks this once per description it keeps."""
    if device.type != "cpu" and interpreting():
        return f"inputs on {device}: under TRITON_INTERPRET=1 the kernels run on CPU tensors"
    return None


def cdiv(n: int, d: int) -> int:
    """ceil(n / d) for ints, in plain Python: ``triton.cdiv`` called from the host goes through
    a JIT function's ``__call__``, a visible share of a launch's own Python
    (``benchmarks/NOTES.md``, "Host-side helpers")."""
    return -(-n // d)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n, 0 for n <= 0 (as ``triton.next_power_of_2``)."""
    return 1 << (n - 1).bit_length() if n > 0 else 0

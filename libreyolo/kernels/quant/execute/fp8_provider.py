"""Registers the FP8 execute implementations: ``triton`` for the prologue (``fp8_cast_static``,
``fp8_cast_dynamic``) and the epilogue (``fp8_perchannel_epilogue``), ``scaled_mm`` for the GEMM
slots (``fp8_gemm``, ``fp8_gemm_tensorwise``).

Imported lazily by the registry (``IN_TREE_PROVIDERS``); it imports no triton itself. The
declared capabilities decline graph capture and devices first (the Triton kit's for the
prologue and epilogue, ``SCALED_MM`` for the GEMM); ``accepts`` then checks the arguments with
the reference's (or the GEMM judge's) own checks, so bad input raises the slot's
TypeError/ValueError and is never silently declined, declines what the kernel cannot run here
and returns its plan. Whether FP8 is *worth* running on a
shape is not decided here but in ``fp8_linear``'s policy: these implementations take every shape
the catalogue holds them to (docs/fp8_execute.md).
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from libreyolo.kernels import Capabilities, register
from libreyolo.kernels.ptx import ARITHMETIC_SOURCE
from libreyolo.kernels.triton_kit import CAPABILITIES, triton_ready
from libreyolo.kernels.triton_launch import SOURCE as launcher_source
from libreyolo.quant import fp8_execute as ref

from . import fp8_gemm
from .fp8_plan import PLANNERS, CastPlan, EpiloguePlan, decline_reason

_HERE = Path(__file__).resolve().parent
_SIMULATE = _HERE.parent / "simulate"
TRITON_SOURCES = tuple(str(p) for p in (
    _HERE / "fp8_kernels.py", _HERE / "fp8_launch.py", _HERE / "fp8_plan.py",
    _SIMULATE / "kernels.py", _SIMULATE / "plan.py", _SIMULATE / "launch.py",
    Path(__file__).resolve(), launcher_source, ARITHMETIC_SOURCE))
GEMM_SOURCES = (str(_HERE / "fp8_gemm.py"), *TRITON_SOURCES)


def _triton(slot: str):
    planner = PLANNERS[slot]

    def accepts(*args, **kwargs) -> CastPlan | EpiloguePlan | str:
        plan = planner(*args, **kwargs)
        return decline_reason(plan) or plan

    def run(*args, prepared=None, **kwargs):
        from . import fp8_launch  # imports triton: only when a kernel runs

        plan = prepared if prepared is not None else planner(*args, **kwargs)
        if isinstance(plan, EpiloguePlan):
            return fp8_launch.epilogue(plan)
        codes, row_scale = fp8_launch.cast(plan)
        codes = codes.view(plan.shape)
        return codes if plan.scale is not None else (codes, row_scale.view(*plan.shape[:-1], 1))

    accepts.__qualname__ = f"accepts_{slot}"
    run.__qualname__ = run.__name__ = f"triton_{slot}"
    run.__doc__ = f"Triton {slot}, bit-exact against libreyolo.quant.fp8_execute.{slot}."
    return run, accepts


#: Hopper's FP8 tensor cores accumulate with about 14 bits (DeepSeek-V3 technical report,
#: section 3.3.2), and float32 outputs came out far less accurate than a float32 product, already
#: at small K (``benchmarks/NOTES.md``, "FP8 GEMM outputs in float32"). Half-precision outputs
#: round far above that; a float32 output would
#: claim digits the GEMM does not keep, so the caller's portable path makes it.
FLOAT32_DECLINE = ("out_dtype float32: the FP8 tensor cores accumulate with ~14 bits, so the "
                   "GEMM cannot give float32 digits; the caller's portable path runs")


CPU_ROWWISE_DECLINE = ("this torch's CPU torch._scaled_mm takes per-tensor scales only (torch "
                       "2.11); the caller's portable path runs")


@functools.cache
def cpu_rowwise() -> bool:
    """Whether this torch's CPU ``_scaled_mm`` takes rowwise scales (2.13 does; 2.11 asserts
    per-tensor scaling inside oneDNN): one 16x16 product, tried once."""
    a = torch.zeros((16, 16), dtype=torch.float8_e4m3fn)
    try:
        torch._scaled_mm(a, a.T, scale_a=torch.ones(16, 1), scale_b=torch.ones(1, 16),
                         out_dtype=torch.bfloat16)
    except RuntimeError:
        return False
    return True


#: ``torch._scaled_mm`` runs on CUDA and CPU tensors, eagerly and inside a CUDA graph; never while
#: a graph is traced, compiled or exported, whose graph keeps the portable math.
SCALED_MM = Capabilities(devices={"cpu", "cuda"}, traced=False)


def scaled_mm_ready() -> bool | str:
    """torch has ``_scaled_mm``."""
    return hasattr(torch, "_scaled_mm") or "this torch has no torch._scaled_mm"


def _gemm(rowwise: bool):
    def accepts(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16):
        ref.check_fp8_gemm(a, b, scale_a, scale_b, bias, out_dtype, rowwise=rowwise)
        if a.device.type == "cuda" and not fp8_gemm.fp8_tensor_cores(a.device.index or 0):
            return f"{a.device} has no FP8 tensor cores (compute capability below 8.9)"
        if a.device.type == "cpu" and rowwise and not cpu_rowwise():
            return CPU_ROWWISE_DECLINE
        if out_dtype == torch.float32:
            return FLOAT32_DECLINE
        return fp8_gemm.GemmPlan(a, b, scale_a, scale_b, bias, out_dtype, rowwise)

    def run(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16, *, prepared=None):
        plan = prepared if prepared is not None else accepts(a, b, scale_a, scale_b, bias,
                                                              out_dtype)
        if isinstance(plan, str):
            raise RuntimeError(f"scaled_mm cannot run this input: {plan}")
        return fp8_gemm.run(plan)

    name = "fp8_gemm" if rowwise else "fp8_gemm_tensorwise"
    run.__qualname__ = run.__name__ = f"scaled_mm_{name}"
    accepts.__qualname__ = f"accepts_{name}"
    return name, run, accepts


# Unconditional, at import (conformance/evidence/gate.py scans for registrations that are not).
for _slot in PLANNERS:
    _run, _accepts = _triton(_slot)
    register(_slot, _run, name="triton", predicate=triton_ready, capabilities=CAPABILITIES,
             accepts=_accepts, sources=TRITON_SOURCES, traceable=True)
for _rowwise in (True, False):
    _name, _run, _accepts = _gemm(_rowwise)
    register(_name, _run, name="scaled_mm", predicate=scaled_mm_ready, capabilities=SCALED_MM,
             accepts=_accepts, sources=GEMM_SOURCES, traceable=True)

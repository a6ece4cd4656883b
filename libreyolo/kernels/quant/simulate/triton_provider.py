"""Registers the ``triton`` implementation of every fake-quant slot.

Imported lazily by the registry (``IN_TREE_PROVIDERS``). It imports no triton itself: without
triton it still imports and registers, and the environment check says why nothing runs. Kernels
load on the first call that runs one.

Eligibility, in the order ``accepts`` checks it (``accepts`` returns the plan it made, which the
registry hands to the call, so an input is validated and planned once per call):
1. the arguments, with the shared validators: bad input raises the reference's TypeError or
   ValueError here too, it is never silently declined;
2. graph capture (tracing, compiling, exporting, ONNX export): exported graphs keep the
   reference's portable math;
3. what the kernel cannot hold: sparse layouts, 2^31 or more elements, groups wider than one tile;
4. the input's device: CUDA for compiled kernels, CPU under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from libreyolo.capture import capture_reason
from libreyolo.kernels import register
from libreyolo.kernels.settings import interpreting
from libreyolo.kernels.triton_launch import SOURCE as launcher_source

from .plan import MAX_UNIT, PLANNERS, AmaxFrom, Plan, ScaleSource

NAME = "triton"
_HERE = Path(__file__).resolve().parent
SOURCES = tuple(str(_HERE / f) for f in (
    "kernels.py", "launch.py", "plan.py", Path(__file__).name)) + (launcher_source,)
_MAX_ELEMENTS = 2**31  # element offsets inside a row are int32


def triton_ready() -> bool | str:
    """triton importable, and CUDA present or the interpreter on (else which one is missing)."""
    if not _triton_installed():
        return "triton is not installed"
    return interpreting() or torch.cuda.is_available() or "no CUDA device"


def _triton_installed() -> bool:
    """Found without importing it (an import hook may refuse it: that is "not installed")."""
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


def decline_reason(plan: Plan) -> str | None:
    """Why the kernel will not take this (already validated) input, or None."""
    captured = capture_reason()
    if captured is not None:
        return captured
    x = plan.x
    if x.layout != torch.strided:
        return f"x has layout {x.layout}: the kernels read strided (dense) tensors"
    if x.numel() >= _MAX_ELEMENTS:
        return f"x has {x.numel()} elements: the kernels index fewer than 2^31"
    wide_group = plan.scale_source == ScaleSource.FROM_AMAX and plan.amax_from == AmaxFrom.UNIT
    if wide_group and plan.unit > MAX_UNIT:
        return f"groups of {plan.unit} columns: one program holds at most {MAX_UNIT}"
    if interpreting():
        if x.device.type != "cpu":
            return f"x is on {x.device}: under TRITON_INTERPRET=1 the kernels run on CPU tensors"
    elif x.device.type != "cuda":
        return f"x is on {x.device}: the compiled kernels need a CUDA tensor"
    return None


def _implementation(slot: str):
    planner = PLANNERS[slot]

    def accepts(*args, **kwargs) -> str | Plan:
        plan = planner(*args, **kwargs)
        return decline_reason(plan) or plan

    def run(*args, prepared: Plan | None = None, **kwargs) -> torch.Tensor:
        from .launch import run as launch  # imports triton: only when a kernel runs

        return launch(prepared if prepared is not None else planner(*args, **kwargs))

    accepts.__qualname__ = f"accepts_{slot}"
    run.__qualname__ = run.__name__ = f"triton_{slot}"
    run.__doc__ = f"Triton {slot}, bit-exact against libreyolo.quant.fake_quant.{slot}."
    return run, accepts


# Unconditional, at import (conformance/gate.py scans for registrations that are not).
for _slot in PLANNERS:
    _run, _accepts = _implementation(_slot)
    register(_slot, _run, name=NAME, predicate=triton_ready, accepts=_accepts, sources=SOURCES)

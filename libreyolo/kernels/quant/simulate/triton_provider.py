"""Registers the ``triton`` implementation of every fake-quant slot.

Imported lazily by the registry (``IN_TREE_PROVIDERS``). It imports no triton itself: without
triton it still imports and registers, and the environment check says why nothing runs. Kernels
load on the first call that runs one.

Eligibility, as ``plan.prepare`` decides it (``accepts`` returns the plan it made, which the
registry hands to the call, so an input is validated and planned once per call, and a call
described as an earlier one reuses that one's layout):
1. the arguments, with the shared validators: bad input raises the reference's TypeError or
   ValueError here too, it is never silently declined;
2. graph capture (tracing, compiling, exporting, ONNX export): exported graphs keep the
   reference's portable math;
3. what the kernel cannot hold: sparse layouts, 2^31 or more elements, groups wider than one tile;
4. the input's device: CUDA for compiled kernels, CPU under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import torch

from libreyolo.kernels import register
from libreyolo.kernels.settings import interpreting
from libreyolo.kernels.triton_launch import SOURCE as launcher_source

from .plan import PLANNERS, Plan, prepare

NAME = "triton"
_HERE = Path(__file__).resolve().parent
SOURCES = tuple(str(_HERE / f) for f in (
    "kernels.py", "launch.py", "plan.py", Path(__file__).name)) + (launcher_source,)


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


@functools.cache
def _launch():
    """The launch module, imported (with triton) when a kernel first runs, then kept: an import
    statement in every call costs about a microsecond."""
    from . import launch

    return launch


def _implementation(slot: str):
    planner = PLANNERS[slot]
    # ``prepare`` itself, bound to the slot: no wrapper's frame on every call
    accepts = functools.partial(prepare, slot)

    def run(*args, prepared: Plan | None = None, **kwargs) -> torch.Tensor:
        return _launch().run(prepared if prepared is not None else planner(*args, **kwargs))

    def backward(grad, *args, prepared: Plan | None = None, **kwargs) -> tuple:
        plan = prepared if prepared is not None else planner(*args, **kwargs)
        return (_launch().backward(plan, grad),)

    accepts.__qualname__ = f"accepts_{slot}"
    run.__qualname__ = run.__name__ = f"triton_{slot}"
    run.__doc__ = f"Triton {slot}, bit-exact against libreyolo.quant.fake_quant.{slot}."
    backward.__qualname__ = backward.__name__ = f"triton_{slot}_backward"
    return run, accepts, backward


# Unconditional, at import (conformance/gate.py scans for registrations that are not).
for _slot in PLANNERS:
    _run, _accepts, _backward = _implementation(_slot)
    register(_slot, _run, name=NAME, predicate=triton_ready, accepts=_accepts, sources=SOURCES,
             backward=_backward)

"""Registers the ``triton`` implementation of every fake-quant slot.

Imported lazily by the registry (``IN_TREE_PROVIDERS``). It imports no triton itself: without
triton it still imports and registers, and the environment check says why nothing runs. Kernels
load on the first call that runs one.

Eligibility: first the Triton kit's declared capabilities, which the registry applies (no graph
capture: exported graphs keep the reference's portable math; CUDA tensors for compiled kernels,
CPU tensors under ``TRITON_INTERPRET=1``), then ``plan.prepare`` (``accepts`` returns the plan it
made, which the registry hands to the call, so an input is validated and planned once per call,
and a call described as an earlier one reuses that one's layout):
1. the arguments, with the shared validators: bad input raises the reference's TypeError or
   ValueError here too, it is never silently declined;
2. what the kernel cannot hold: sparse layouts, 2^31 or more elements, groups wider than one
   tile, and CUDA tensors under the interpreter.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from libreyolo.deprecated import moved
from libreyolo.kernels import register, triton_kit
from libreyolo.kernels.triton_launch import SOURCE as launcher_source

from .plan import PLANNERS, Plan, prepare

NAME = "triton"
_HERE = Path(__file__).resolve().parent
SOURCES = tuple(str(_HERE / f) for f in (
    "kernels.py", "launch.py", "plan.py", Path(__file__).name)) + (launcher_source,)


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


__getattr__ = moved(__name__, {"triton_ready": "libreyolo.kernels.triton_kit:triton_ready"})

# Unconditional, at import (conformance/evidence/gate.py scans for registrations that are not).
for _slot in PLANNERS:
    _run, _accepts, _backward = _implementation(_slot)
    register(_slot, _run, name=NAME, predicate=triton_kit.triton_ready,
             capabilities=triton_kit.CAPABILITIES,
             accepts=_accepts, sources=SOURCES, backward=_backward,
             traceable=True)

"""Registers the ``triton`` implementation of every unpack slot.

Imported lazily by the registry (``IN_TREE_PROVIDERS``). It imports no triton itself: without
triton it still imports and registers, and the environment check says why nothing runs. The kernel
loads on the first call that runs it.

The Triton kit's declared capabilities decline graph capture (exported graphs keep the
reference's portable math) and the devices the kernel cannot run on (CUDA compiled, CPU under
``TRITON_INTERPRET=1``). ``accepts`` then checks the arguments with the reference's own checks
(bad input raises the reference's TypeError or ValueError, it is never silently declined) and
declines non-strided tensors and a scale that requires grad. It returns the ``UnpackPlan`` it
made, which ``dispatch`` hands to the call as ``prepared``; a direct call plans for itself.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import torch

from libreyolo.kernels import register
from libreyolo.kernels.triton_kit import CAPABILITIES, triton_ready
from libreyolo.kernels.triton_launch import SOURCE as launcher_source

from .unpack_plan import PLANNERS, UnpackPlan, decline_reason

NAME = "triton"
_HERE = Path(__file__).resolve().parent
SOURCES = tuple(str(_HERE / f) for f in (
    "unpack_kernels.py", "unpack_launch.py", "unpack_plan.py", "unpack_tiles.py",
    "unpack_tiles.toml", Path(__file__).name)) + (
    launcher_source,)


@cache
def _launcher():
    """The launcher, imported (with triton) when a kernel first runs, then kept: an import
    statement in every call costs about a microsecond."""
    from .unpack_launch import run

    return run


def _implementation(slot: str):
    planner = PLANNERS[slot]

    def accepts(*args, **kwargs) -> UnpackPlan | str:
        plan = planner(*args, **kwargs)
        return decline_reason(plan) or plan

    def run(*args, prepared: UnpackPlan | None = None, **kwargs) -> torch.Tensor:
        return _launcher()(prepared if prepared is not None else planner(*args, **kwargs))

    accepts.__qualname__ = f"accepts_{slot}"
    run.__qualname__ = run.__name__ = f"triton_{slot}"
    run.__doc__ = f"Triton {slot}, bit-exact against libreyolo.quant.packing.{slot}."
    return run, accepts


# Unconditional, at import (conformance/evidence/gate.py scans for registrations that are not).
for _slot in PLANNERS:
    _run, _accepts = _implementation(_slot)
    register(_slot, _run, name=NAME, predicate=triton_ready, capabilities=CAPABILITIES,
             accepts=_accepts, sources=SOURCES, traceable=True)

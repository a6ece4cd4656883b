"""From the FP8 execute slots' arguments to what the kernels need (no triton here: cheap to import).

Each ``plan_*`` runs the reference's (or, for the GEMM slots, the judge's) own argument checks, so
bad input raises the same TypeError/ValueError whichever implementation sees it, and returns a
``Prepared`` plan that the provider's ``accepts`` hands to the call. ``decline_reason`` then says
why a kernel will not take an input it could otherwise run: a non-strided tensor, an input that
requires grad, a CUDA tensor under the interpreter, a row longer than one tile. Graph capture,
the device and the mode are the declared capabilities' (``libreyolo.kernels.triton_kit``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from libreyolo.kernels.plan_cache import PlanCache, describe
from libreyolo.kernels.prepared import Prepared
from libreyolo.kernels.triton_kit import FloatKind, interpreter_decline
from libreyolo.quant import fp8_execute as ref
from libreyolo.quant import validation as v

#: The dynamic prologue keeps a whole row in one tile (its amax, scale and codes in one pass).
#: 16384 float32 lanes is 64 registers a thread at eight warps; longer rows are declined (the
#: shape sets hold none: the widest activation of the models served, ViT-L fc2's, is 4096).
MAX_DYNAMIC_COLS = 16384


@dataclass(frozen=True, slots=True)
class CastPlan(Prepared):
    """Quantize ``x2d`` (rows, cols), read through its strides; ``scale`` is the 0-dim static
    scale, or None for dynamic per-row scales; ``shape`` is the codes' shape."""

    x2d: torch.Tensor
    scale: torch.Tensor | None
    shape: tuple[int, ...]
    #: the launches made for calls described as this one (``fp8_launch.cast``), by name: shared
    #: by every plan of the description (``_by_description``), so a steady-state call relaunches
    #: the compiled kernel instead of binding its arguments again (``triton_launch.Launcher``)
    launches: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def kind(self) -> FloatKind:
        return FloatKind.of(self.x2d.dtype)

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.x2d,) if self.scale is None else (self.x2d, self.scale)


@dataclass(frozen=True, slots=True)
class EpiloguePlan(Prepared):
    acc: torch.Tensor
    row_scale: torch.Tensor
    col_scale: torch.Tensor
    bias: torch.Tensor | None
    relu: bool
    out_dtype: torch.dtype

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return tuple(t for t in (self.acc, self.row_scale, self.col_scale, self.bias)
                     if t is not None)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as (rows, last dim); rows counted, not inferred (``-1`` is ambiguous for an empty
    last dim: a (0,) input is one empty row, a case of the thorough profile)."""
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1]) if x.dim() != 2 else x


#: Per description of a prologue's rows (static or dynamic, dtype, shape, strides, device): the
#: ``launches`` its plans share. Bounded like every kept plan (``plan_cache``).
_by_description = PlanCache(64)


def _shared(x2d: torch.Tensor, dynamic: bool) -> dict:
    key = (dynamic, describe(x2d))
    kept = _by_description.get(key)
    if kept is None:
        kept = {}
        _by_description.put(key, kept)
    return kept


def plan_fp8_cast_static(x, scale) -> CastPlan:
    v.check_float_tensor("x", x)
    v.check_min_rank("x", x, 1)
    v.check_scale("scale", scale, (), x.device)
    x2d = _rows(x)
    return CastPlan(x2d, scale, tuple(x.shape), _shared(x2d, False))


def plan_fp8_cast_dynamic(x) -> CastPlan:
    v.check_float_tensor("x", x)
    v.check_min_rank("x", x, 1)
    x2d = _rows(x)
    return CastPlan(x2d, None, tuple(x.shape), _shared(x2d, True))


def plan_fp8_perchannel_epilogue(acc, row_scale, col_scale, bias=None, activation=None,
                                 out_dtype=torch.bfloat16) -> EpiloguePlan:
    ref.check_epilogue(acc, row_scale, col_scale, bias, activation, out_dtype)
    return EpiloguePlan(acc, row_scale, col_scale, bias, activation == "relu", out_dtype)


PLANNERS = {
    "fp8_cast_static": plan_fp8_cast_static,
    "fp8_cast_dynamic": plan_fp8_cast_dynamic,
    "fp8_perchannel_epilogue": plan_fp8_perchannel_epilogue,
}


def decline_reason(plan: CastPlan | EpiloguePlan) -> str | None:
    """Why the Triton kernels will not take this (already checked) input, or None."""
    tensors = plan.tensors()
    if any(t.layout != torch.strided for t in tensors):
        return "a non-strided tensor: the kernels read strided (dense) tensors"
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return "an input requires grad: the execute kernels have no backward"
    if (interpreted := interpreter_decline(tensors[0].device)) is not None:
        return interpreted
    if isinstance(plan, CastPlan) and plan.scale is None and plan.x2d.shape[1] > MAX_DYNAMIC_COLS:
        return (f"rows of {plan.x2d.shape[1]} elements: the dynamic prologue holds a row in one "
                f"tile of at most {MAX_DYNAMIC_COLS}")
    return None

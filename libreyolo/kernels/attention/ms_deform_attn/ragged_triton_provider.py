"""The ``triton`` implementation of the ``ms_deform_attn_ragged`` slot: forward and backward.

Registered at import time with the Triton kit's predicate and capabilities
(``libreyolo.kernels.triton_kit``: triton and CUDA, or the interpreter on CPU tensors; declined
while a graph is traced, compiled or exported; runs under CUDA-graph capture). The kernels
module is imported only when the implementation first runs. Inputs in float32, float16 or
bfloat16 are computed in float32 and returned in the input dtype.

``accepts`` validates and plans the input once and hands the plan (a :class:`RaggedPlan`) to the
call (the ``Prepared`` protocol); a direct call plans for itself through the same function.
``spatial_shapes`` as ``(H, W)`` pairs (how RT-DETRv2, D-FINE and DEIM pass them) are validated
on the host like the portable path does, with its errors, and copied to the device once per
distinct set of pairs (a cache: the warm-up call before a CUDA-graph capture fills it); as an
int64 device tensor they are used as they are, never read on the host (the kernels mask every
access at ``len_in``, as the classic kernels do).
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from libreyolo.kernels import ptx, register
from libreyolo.kernels.attention.ms_deform_attn import deterministic, memo
from libreyolo.kernels.attention.ms_deform_attn import triton_common as common
from libreyolo.kernels.attention.ms_deform_attn.levels import traced_on
from libreyolo.kernels.attention.ms_deform_attn.portable import (
    SAMPLING_METHODS,
    check_points_per_level,
    validate_ragged_inputs,
)
from libreyolo.kernels.autograd import SOURCE as autograd_source
from libreyolo.kernels.autograd import applier
from libreyolo.kernels.prepared import Prepared
from libreyolo.kernels.registry import plan_or_raise
from libreyolo.kernels.triton_kit import (
    CAPABILITIES,
    FloatKind,
    cdiv,
    interpreter_decline,
    triton_ready,
)
from libreyolo.kernels.triton_launch import SOURCE as launcher_source
from libreyolo.kernels.triton_launch import Launcher

SLOT = "ms_deform_attn_ragged"
#: Point counts and first-point indices travel to the kernels packed this many bits per level
#: into one compile-time integer each; so at most 2**COUNT_BITS - 1 points in all.
COUNT_BITS = 8
MAX_POINTS = (1 << COUNT_BITS) - 1
#: Levels per call: 8 levels of 8 bits keep the packed constants within 64 bits.
MAX_LEVELS = 8


@dataclass(frozen=True, slots=True)
class RaggedPlan(Prepared):
    """The validated input's launch: the level sizes on the device and the kernels' constants;
    the launches made for it, by name (kept with the plan, which ``memo`` keeps; the
    deterministic backward's two are there too)."""

    shapes: torch.Tensor
    sizes: tuple[int, int, int]
    constants: dict
    fwd_grid: tuple[int, int, int]
    bwd_grid: tuple[int, int]
    discrete: bool
    zeroing: tuple | None  # common.forward_zeroing's answer
    launches: dict = field(default_factory=dict, compare=False, repr=False)


@functools.lru_cache(maxsize=64)
def _device_shapes(pairs: tuple[tuple[int, int], ...], device: torch.device) -> torch.Tensor:
    """The level sizes as a (levels, 2) int64 tensor on ``device``, made once per pairs."""
    return torch.tensor(pairs, dtype=torch.int64, device=device)


def _decline_tensors(value, sampling_locations, attention_weights) -> str | None:
    tensors = {"value": value, "sampling_locations": sampling_locations,
               "attention_weights": attention_weights}
    if not all(isinstance(t, torch.Tensor) for t in tensors.values()):
        return "value, sampling_locations and attention_weights must be tensors"
    if (interpreted := interpreter_decline(value.device)) is not None:
        return interpreted
    for name, tensor in tensors.items():
        if tensor.device != value.device:
            return f"{name} is on {tensor.device}, value on {value.device}"
    if value.dtype not in common.SUPPORTED_DTYPES:
        return f"value dtype {value.dtype} is not one of {common.SUPPORTED_DTYPES}"
    if sampling_locations.dtype != value.dtype or attention_weights.dtype != value.dtype:
        return "value, sampling_locations and attention_weights must share a dtype"
    return None


def _level_sizes(value, spatial_shapes, sampling_locations, attention_weights, points_per_level,
                 method):
    """(levels, the device tensor of sizes, the point counts) or why the kernels decline.

    Pairs: the portable path's own validation (its exceptions for bad input). A tensor: only its
    metadata and the layout's, since its values live on the device.
    """
    if not isinstance(spatial_shapes, torch.Tensor):
        pairs, points = validate_ragged_inputs(value, spatial_shapes, sampling_locations,
                                         attention_weights, points_per_level, method)
        return len(pairs), _device_shapes(tuple(pairs), value.device), points
    if (traced := traced_on(spatial_shapes, value.device)) is not None:
        spatial_shapes = traced
    if spatial_shapes.dtype != torch.int64 or spatial_shapes.dim() != 2 \
            or spatial_shapes.shape[1] != 2 or spatial_shapes.device != value.device:
        return "spatial_shapes must be a (levels, 2) int64 tensor on value's device"
    if not isinstance(method, str) or method not in SAMPLING_METHODS:
        return f"method must be one of {SAMPLING_METHODS}"
    points = check_points_per_level(points_per_level)  # the portable path's TypeError (a bool)
    if any(n < 0 for n in points) or len(points) != spatial_shapes.shape[0]:
        return "points_per_level must give a non-negative int for each level"
    layout = "value, sampling_locations and attention_weights do not have the ragged layout"
    if value.dim() != 4 or sampling_locations.dim() != 5:
        return layout
    batch, _, heads, _ = value.shape
    if tuple(sampling_locations.shape) != (batch, sampling_locations.shape[1], heads,
                                           sum(points), 2) \
            or tuple(attention_weights.shape) != tuple(sampling_locations.shape[:4]):
        return layout
    return len(points), spatial_shapes, points


def _pack(numbers: list[int]) -> int:
    return sum(n << (COUNT_BITS * i) for i, n in enumerate(numbers))


def prepare(value, spatial_shapes, sampling_locations, attention_weights, points_per_level,
            method="bilinear") -> RaggedPlan | str:
    """The plan for this input, or why the kernels decline it (no device reads).

    Raises the portable path's ``TypeError``/``ValueError`` for input it would reject, when the
    level sizes are host pairs; ``accepts`` and the implementation both call this.
    """
    plan_key = memo.key((value, sampling_locations, attention_weights), spatial_shapes,
                        points_per_level, method)
    if (plan := memo.recall(plan_key)) is not None:
        return plan
    plan = _plan(value, spatial_shapes, sampling_locations, attention_weights, points_per_level,
                 method)
    memo.remember(plan_key, plan)
    return plan


def _plan(value, spatial_shapes, sampling_locations, attention_weights, points_per_level,
          method) -> RaggedPlan | str:
    """``prepare``'s answer, worked out (see :mod:`.memo` for when it is remembered)."""
    if (reason := _decline_tensors(value, sampling_locations, attention_weights)) is not None:
        return reason
    levels = _level_sizes(value, spatial_shapes, sampling_locations, attention_weights,
                          points_per_level, method)
    if isinstance(levels, str):
        return levels
    n_levels, shapes, points = levels
    if n_levels > MAX_LEVELS or sum(points) > MAX_POINTS:
        return f"more than {MAX_LEVELS} levels or {MAX_POINTS} points (packed constants)"
    batch, len_in, heads, channels = value.shape
    len_q = sampling_locations.shape[1]
    if batch * heads > common.MAX_GRID_Y:
        return f"batch x heads = {batch * heads} exceeds the launch grid's {common.MAX_GRID_Y}"
    tensors = (value, sampling_locations, attention_weights)
    if max(t.numel() for t in tensors) > common.MAX_ELEMENTS \
            or batch * len_q * heads * channels > common.MAX_ELEMENTS:
        return f"more than {common.MAX_ELEMENTS} elements in one tensor (int32 offsets)"
    block_q, block_c = common.blocks(channels)
    firsts = [sum(points[:i]) for i in range(n_levels)]
    constants = {"C": channels, "LEVELS": n_levels, "COUNTS": _pack(points),
                 "FIRSTS": _pack(firsts), "COUNT_BITS": COUNT_BITS, "TOTAL": max(sum(points), 1),
                 "DISCRETE": method == "discrete", "DTYPE": int(FloatKind.of(value.dtype)),
                 "PTX": ptx.compiles_to_ptx(value.device), "BLOCK_Q": block_q,
                 "BLOCK_C": block_c}
    q_blocks = cdiv(len_q, block_q)
    fwd_grid = (q_blocks, batch * heads, cdiv(channels, block_c))
    return RaggedPlan(shapes, (len_in, len_q, heads), constants, fwd_grid,
                      (q_blocks, batch * heads), method == "discrete",
                      common.forward_zeroing(sampling_locations.numel() // 2, value.numel(),
                                             fwd_grid))


def accepts(value, spatial_shapes, sampling_locations, attention_weights, points_per_level,
            method="bilinear"):
    """A :class:`RaggedPlan` when the kernels take this input, else why not."""
    return prepare(value, spatial_shapes, sampling_locations, attention_weights,
                   points_per_level, method)


@functools.cache
def _kernels():
    from libreyolo.kernels.attention.ms_deform_attn import ragged_triton_kernels

    return ragged_triton_kernels


def _forward(plan: RaggedPlan, value, sampling_locations, attention_weights, grad_value=None):
    """The output; with ``grad_value`` the same launch zeroes it (as the classic provider's
    ``_forward``)."""
    batch, _, heads, channels = value.shape
    out = value.new_empty(batch, sampling_locations.shape[1], heads * channels)
    if out.numel() == 0:
        return out
    return common.launch_forward(plan, _kernels, "ms_deform_attn_ragged_fwd_kernel",
                                 plan.fwd_grid, out, value, sampling_locations,
                                 attention_weights, grad_value)


def _backward_launch(plan: RaggedPlan, tensors: tuple) -> Launcher:
    return common.backward_launch(plan, _kernels, "ms_deform_attn_ragged_bwd_kernel",
                                  plan.bwd_grid, tensors)


#: Discrete sampling has no location gradient (its pixel is a step function of the location): the
#: kernel leaves that buffer unwritten and the backward returns None for it, so it is never read.
_RaggedFunction = common.autograd_function("_RaggedFunction", sys.modules[__name__],
                                           lambda plan: not plan.discrete)

_apply = applier(_RaggedFunction)


def ms_deform_attn_ragged_triton(value, spatial_shapes, sampling_locations, attention_weights,
                                 points_per_level, method="bilinear", *, prepared=None):
    """The slot on the Triton kernels; differentiable in value, weights and (bilinear) locations.

    ``prepared`` is ``accepts``' plan for these arguments (``dispatch`` passes it); without it
    the call asks what the registry asks (``registry.plan_or_raise``: the declared capabilities,
    then ``accepts``), and raises the portable path's error for a bad input, or ValueError if the
    kernels decline a good one.
    """
    plan = prepared if prepared is not None else plan_or_raise(REGISTERED, (
        value, spatial_shapes, sampling_locations, attention_weights, points_per_level, method))
    return common.run(_apply, _forward, plan, value, sampling_locations, attention_weights)


def ms_deform_attn_ragged_triton_backward(grad, value, spatial_shapes, sampling_locations,
                                          attention_weights, points_per_level,
                                          method="bilinear", *, prepared=None):
    """The three gradients of :func:`ms_deform_attn_ragged_triton` for ``grad`` (discrete
    sampling's location gradient is never read: the slot declares it has none)."""
    plan = prepared if prepared is not None else prepare(
        value, spatial_shapes, sampling_locations, attention_weights, points_per_level, method)
    ctx = common.Recomputed(plan, value, sampling_locations, attention_weights)
    grads = common.gradients(_backward_launch, ctx, grad)
    if plan.discrete:  # the kernel leaves that buffer unwritten
        grads = (grads[0], torch.zeros_like(sampling_locations), grads[2])
    return grads


_HERE = Path(__file__).resolve().parent
#: The files this implementation's numbers depend on (its parity records' digest starts here):
#: its own, the classic kernels whose sampling helpers it reuses, and what the two providers share.
SOURCES = tuple(str(_HERE / f) for f in ("ragged_triton_provider.py", "ragged_triton_kernels.py",
                                         "triton_common.py", "triton_kernels.py")) + (
    launcher_source, autograd_source, ptx.ARITHMETIC_SOURCE) + deterministic.SOURCES

REGISTERED = register(SLOT, ms_deform_attn_ragged_triton, name="triton", predicate=triton_ready,
                      capabilities=CAPABILITIES, accepts=accepts, sources=SOURCES,
                      backward=ms_deform_attn_ragged_triton_backward, traceable=True)

"""The ``triton`` implementation of the ``ms_deform_attn`` slot: forward and backward.

Registered at import time with the Triton kit's predicate and capabilities
(``libreyolo.kernels.triton_kit``): it imports cleanly without triton (the predicate then names
what is missing), runs on CUDA tensors, and on CPU tensors under ``TRITON_INTERPRET=1`` (how CI
checks its logic), never while a graph is traced, compiled or exported. The kernels module is
imported only when the implementation first runs. Inputs in float32, float16 or bfloat16 are
computed in float32 and results returned in the input dtype.

``accepts`` validates and plans once (the portable core's validation, so bad input raises the
same errors on both paths) and hands the plan to the call. Device data is read on the host only
the first time a ``spatial_shapes`` tensor (at a given version) is seen; the level sizes, given as
pairs or read from a tensor, are copied to the device once, and the plan uses that copy. Buffers
have data-independent sizes. After a warm-up call (which compiles and reads or copies the level
sizes), forward and backward are CUDA-graph capturable.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import torch

from libreyolo.capture import no_host_reads
from libreyolo.deprecated import moved
from libreyolo.kernels import register
from libreyolo.kernels.autograd import SOURCE as autograd_source
from libreyolo.kernels.autograd import applier
from libreyolo.kernels.prepared import Prepared
from libreyolo.kernels.registry import plan_or_raise
from libreyolo.kernels.triton_kit import CAPABILITIES, cdiv, interpreter_decline, triton_ready
from libreyolo.kernels.triton_launch import SOURCE as launcher_source
from libreyolo.kernels.triton_launch import Launcher

from . import deterministic, memo
from . import triton_common as common
from .levels import device_shapes, remembered, traced_on
from .portable import validate_inputs

# A backward of fewer (query block, batch x head) programs than this gives each level its own
# programs (the kernel's SPLIT_LEVELS): a decoder's 300 queries make a few hundred programs of
# LEVELS x POINTS serial samples each, too little in flight for 132 SMs; split, LEVELS times as
# many programs each walk one level's points. The threshold lies between the decoders the split
# made faster and the larger calls it made slower (`sweep-msda --split`, graph replays:
# benchmarks/NOTES.md, "The MSDA backward's level split").
SPLIT_LEVELS_BELOW = 768


class LaunchPlan(Prepared):
    """An input :func:`accepts` validated: the kernels' arguments, ready to launch, and the
    launches made for it, by name (``launches``: kept with the plan, which ``memo`` keeps; the
    deterministic backward's two are there too)."""

    __slots__ = ("shapes", "sizes", "constants", "forward_grid", "backward_grid", "split_levels",
                 "out_shape", "out_empty", "zeroing", "launches")

    def __init__(self, shapes, value, sampling_locations):
        batch, len_in, heads, channels = value.shape
        len_q, levels, points = sampling_locations.shape[1], sampling_locations.shape[3], \
            sampling_locations.shape[4]
        block_q, block_c = common.blocks(channels)
        self.shapes = shapes
        self.sizes = (len_in, len_q, heads)
        self.constants = {"C": channels, "LEVELS": levels, "POINTS": points,
                          "BLOCK_Q": block_q, "BLOCK_C": block_c}
        query_blocks = cdiv(len_q, block_q)
        self.forward_grid = (query_blocks, batch * heads, cdiv(channels, block_c))
        self.split_levels = levels > 1 and query_blocks * batch * heads < SPLIT_LEVELS_BELOW
        self.backward_grid = (query_blocks, batch * heads, levels if self.split_levels else 1)
        self.out_shape = (batch, len_q, heads * channels)
        self.out_empty = batch * len_q * heads * channels == 0
        self.zeroing = common.forward_zeroing(sampling_locations.numel() // 2, value.numel(),
                                              self.forward_grid)
        self.launches = {}


def accepts(value, spatial_shapes, sampling_locations, attention_weights):
    """A :class:`LaunchPlan` when the kernels take this input, else why not.

    Bad input raises what the portable core raises (its own validation, the same function):
    ``TypeError``/``ValueError`` naming the argument. ``spatial_shapes`` may be ``(H, W)`` pairs
    or an int64 tensor on any device: a tensor is read on the host once per tensor version,
    pairs are copied to the device once (``levels.py``), so steady-state calls do not sync.
    """
    tensors = (value, sampling_locations, attention_weights)
    plan_key = _plan_key(tensors, spatial_shapes)
    if (plan := memo.recall(plan_key)) is not None:
        return plan
    plan = _plan(value, spatial_shapes, sampling_locations, attention_weights)
    if plan_key is None and isinstance(spatial_shapes, torch.Tensor):  # read by this plan
        plan_key = _plan_key(tensors, spatial_shapes)
    memo.remember(plan_key, plan)
    return plan


def _plan_key(tensors, spatial_shapes) -> tuple | None:
    """The memo's key. Level sizes as pairs key the plan as given (checked by ``memo.key``); a
    tensor keys it by the sizes read from it at its current version (None until read), which
    ``level_shapes`` checked when it read them. Plans hold their own device copy of the sizes,
    never the caller's tensor, so equal sizes mean an equal plan."""
    if isinstance(spatial_shapes, torch.Tensor):
        levels = remembered(spatial_shapes)
        return None if levels is None else memo.checked_levels_key(tensors, levels)
    return memo.key(tensors, spatial_shapes)


def _plan(value, spatial_shapes, sampling_locations, attention_weights) -> LaunchPlan | str:
    """``accepts``' answer, worked out (see :mod:`.memo` for when it is remembered)."""
    if (traced := traced_on(spatial_shapes, value.device)) is not None:
        return _captured_plan(value, traced, sampling_locations, attention_weights)
    if isinstance(spatial_shapes, torch.Tensor) and spatial_shapes.is_cuda \
            and torch.cuda.is_current_stream_capturing() and remembered(spatial_shapes) is None:
        return _captured_plan(value, spatial_shapes, sampling_locations, attention_weights)
    levels = validate_inputs(value, spatial_shapes, sampling_locations, attention_weights)
    if (reason := _kernels_decline(value, sampling_locations)) is not None:
        return reason
    shapes = device_shapes(levels, value.device)
    if shapes is None:
        return ("spatial_shapes first seen during a CUDA graph capture (copying the sizes to the "
                "device outside the stream would sync): warm up with them outside the capture")
    return LaunchPlan(shapes, value, sampling_locations)


def _kernels_decline(value, sampling_locations) -> str | None:
    """Why the kernels cannot take a validated input (None: they can)."""
    if (interpreted := interpreter_decline(value.device)) is not None:
        return interpreted
    if value.dtype not in common.SUPPORTED_DTYPES:
        return f"value dtype {value.dtype} is not one of {common.SUPPORTED_DTYPES}"
    batch, _, heads, channels = value.shape
    len_q, points = sampling_locations.shape[1], sampling_locations.shape[4]
    if points == 0:
        return "no points"
    if batch * heads > common.MAX_GRID_Y:
        return f"batch x heads = {batch * heads} exceeds the launch grid's {common.MAX_GRID_Y}"
    if max(value.numel(), sampling_locations.numel(), batch * len_q * heads * channels) \
            > common.MAX_ELEMENTS:
        return f"more than {common.MAX_ELEMENTS} elements in one tensor (int32 offsets)"
    return None


def _captured_plan(value, spatial_shapes, sampling_locations, attention_weights):
    """The plan for a ``spatial_shapes`` tensor first seen inside a CUDA graph capture (a
    ``torch.compile(mode="reduce-overhead")`` recording hands the graph its own copy of each
    input), where reading it would break the capture, or traced into a compiled graph
    (``libreyolo.kernels.traced``), where it has no values to read. The kernels read the sizes
    on the device, so the plan launches on the tensor itself, as the ragged plan does: only its
    metadata and the layout are checked, and the plan is not remembered (its key would need the
    values)."""
    with no_host_reads():
        validate_inputs(value, spatial_shapes, sampling_locations, attention_weights)
    if spatial_shapes.device != value.device:
        return "spatial_shapes tensor on another device than value, first seen in a CUDA graph"
    if (reason := _kernels_decline(value, sampling_locations)) is not None:
        return reason
    return LaunchPlan(spatial_shapes.contiguous(), value, sampling_locations)


@functools.cache
def _kernels():
    from libreyolo.kernels.attention.ms_deform_attn import triton_kernels

    return triton_kernels


def _forward(plan: LaunchPlan, value, sampling_locations, attention_weights, grad_value=None):
    """The output; with ``grad_value`` the same launch zeroes it for the backward."""
    out = value.new_empty(plan.out_shape)
    if plan.out_empty:
        return out
    return common.launch_forward(plan, _kernels, "ms_deform_attn_fwd_kernel", plan.forward_grid,
                                 out, value, sampling_locations, attention_weights, grad_value)


def _backward_launch(plan: LaunchPlan, tensors: tuple) -> Launcher:
    return common.backward_launch(plan, _kernels, "ms_deform_attn_bwd_kernel",
                                  plan.backward_grid, tensors, SPLIT_LEVELS=plan.split_levels)


_MSDeformAttnFunction = common.autograd_function("_MSDeformAttnFunction", sys.modules[__name__])

_apply = applier(_MSDeformAttnFunction)


def ms_deform_attn_triton(value, spatial_shapes, sampling_locations, attention_weights, *,
                          prepared: LaunchPlan | None = None):
    """The slot on the Triton kernels; differentiable in value, locations and weights.

    ``prepared`` is what :func:`accepts` returned for these arguments (the registry passes it);
    a direct call without it asks what the registry asks (``registry.plan_or_raise``: the declared
    capabilities, then :func:`accepts`) and raises the portable core's error for a bad input, or
    ``ValueError`` with the reason when the kernels decline a good one.
    """
    if prepared is None:
        prepared = plan_or_raise(REGISTERED, (value, spatial_shapes, sampling_locations,
                                              attention_weights))
    return common.run(_apply, _forward, prepared, value, sampling_locations, attention_weights)


def ms_deform_attn_triton_backward(grad, value, spatial_shapes, sampling_locations,
                                   attention_weights, *, prepared: LaunchPlan | None = None):
    """The three gradients of :func:`ms_deform_attn_triton` for ``grad``, from one launch of the
    backward kernel, as its autograd Function's backward computes them."""
    plan = prepared if prepared is not None else accepts(value, spatial_shapes,
                                                         sampling_locations, attention_weights)
    ctx = common.Recomputed(plan, value, sampling_locations, attention_weights)
    return common.gradients(_backward_launch, ctx, grad)


def _environment_ok() -> bool:
    """use libreyolo.kernels.triton_kit.triton_ready (True, or the missing piece)."""
    return triton_ready() is True


__getattr__ = moved(__name__, {
    "environment_ok": _environment_ok, "_blocks": f"{common.__name__}:blocks",
    **{name: f"{common.__name__}:{name}" for name in (
        "SUPPORTED_DTYPES", "MAX_ELEMENTS", "MAX_GRID_Y", "TILE_ELEMENTS", "NUM_WARPS",
        "BLOCK_C_MAX", "GRADIENTS_IN_FORWARD_BELOW", "ZEROS_PER_PROGRAM_MAX", "ZERO_BLOCK",
        "forward_zeroing", "gradient_buffers", "zeroed_by_forward", "stored_by_kernel",
        "keep_for_backward", "gradients", "run", "Recomputed")}})

_HERE = Path(__file__).resolve().parent
#: The files this implementation's numbers depend on (its parity records' digest starts here).
SOURCES = tuple(str(_HERE / f) for f in ("triton_provider.py", "triton_common.py",
                                         "triton_kernels.py")) + (
    launcher_source, autograd_source) + deterministic.SOURCES

REGISTERED = register("ms_deform_attn", ms_deform_attn_triton, name="triton",
                      predicate=triton_ready, capabilities=CAPABILITIES, accepts=accepts,
                      sources=SOURCES, backward=ms_deform_attn_triton_backward, traceable=True)

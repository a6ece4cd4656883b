"""The ``triton`` implementation of the ``ms_deform_attn`` slot: forward and backward.

Registered at import time. Imports cleanly without triton (the predicate is then false); the
kernels module is imported only when the implementation first runs. Runs on CUDA tensors, and on
CPU tensors under ``TRITON_INTERPRET=1`` (how CI checks its logic). Inputs in float32, float16 or
bfloat16 are computed in float32 and results returned in the input dtype.

``accepts`` validates and plans once (the portable core's validation, so bad input raises the
same errors on both paths) and hands the plan to the call. Device data is read on the host only
the first time a ``spatial_shapes`` tensor (at a given version) is seen; the level sizes, given as
pairs or read from a tensor, are copied to the device once, and the plan uses that copy. Buffers
have data-independent sizes. After a warm-up call (which compiles and reads or copies the level
sizes), forward and backward are CUDA-graph capturable.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import torch

from libreyolo.capture import capture_reason
from libreyolo.kernels import register
from libreyolo.kernels.autograd import SOURCE as autograd_source
from libreyolo.kernels.autograd import applier, once_differentiable
from libreyolo.kernels.prepared import Prepared
from libreyolo.kernels.settings import interpreting
from libreyolo.kernels.triton_launch import SOURCE as launcher_source
from libreyolo.kernels.triton_launch import Launcher

from . import deterministic, memo
from .levels import device_shapes, remembered
from .portable import validate_inputs

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Offsets inside the kernels are int32.
MAX_ELEMENTS = 2**31 - 1
# CUDA's limit on the second grid dimension, which is batch x heads here.
MAX_GRID_Y = 65535
# Elements per program (queries x channels), 4 per thread at 4 warps: ptxas (sm_90a) gives
# 96 registers forward and 128 backward at C=32, 4 levels x 4 points, no spills, so 5 and 4
# blocks fit an SM; twice the tile needed 167 and 255 registers, and the backward spilled.
# Channels beyond BLOCK_C_MAX take more channel tiles (forward) or a loop (backward).
TILE_ELEMENTS = 512
NUM_WARPS = 4
BLOCK_C_MAX = 64
# A backward of fewer (query block, batch x head) programs than this gives each level its own
# programs (the kernel's SPLIT_LEVELS): a decoder's 300 queries make a few hundred programs of
# LEVELS x POINTS serial samples each, too little in flight for 132 SMs; split, LEVELS times as
# many programs each walk one level's points. The threshold lies between the decoders the split
# made faster and the larger calls it made slower (`sweep-msda --split`, graph replays:
# benchmarks/NOTES.md, "The MSDA backward's level split").
SPLIT_LEVELS_BELOW = 768
# A call sampling fewer points than this (batch x queries x heads x levels x points) is host-bound
# in eager mode (a decoder: 9.6K-230K points; an encoder: millions), so its grad-mode forward
# allocates the backward's gradient buffers and its kernel zeroes the value gradient
# (``forward_zeroing``): the backward then allocates and fills nothing. A host-bound step pays
# for every torch call, and the value gradient's ``new_zeros`` (an allocation and a fill launch)
# was the largest of them (benchmarks/NOTES.md, "The MSDA backward's buffers made in the
# forward"). The buffers are held from the
# forward to the backward: a value-sized float32 buffer and the location and weight gradients.
GRADIENTS_IN_FORWARD_BELOW = 2**18
# ... and when each forward program zeroes at most this many float32 (a query or two over a large
# value would leave a handful of programs a long serial fill), ZERO_BLOCK at a time (4 warps: 8 a
# thread).
ZEROS_PER_PROGRAM_MAX = 2**16
ZERO_BLOCK = 1024


def forward_zeroing(points: int, value_elements: int, forward_grid: tuple) -> tuple | None:
    """``(zero_count, zero_share)`` of the forward kernel's ``zero_value_gradient`` (the value
    gradient's elements, and how many each program zeroes) when a grad-mode forward allocates
    the backward's buffers and zeroes the value gradient, else None (this provider's plans and
    the ragged one's): see ``GRADIENTS_IN_FORWARD_BELOW``."""
    programs = max(1, forward_grid[0] * forward_grid[1] * forward_grid[2])
    share = _cdiv(_cdiv(value_elements, programs), ZERO_BLOCK) * ZERO_BLOCK
    if points >= GRADIENTS_IN_FORWARD_BELOW or share > ZEROS_PER_PROGRAM_MAX:
        return None
    return value_elements, share


def environment_ok() -> bool:
    """triton is installed, and there is a GPU or the interpreter is on."""
    if importlib.util.find_spec("triton") is None:
        return False
    return interpreting() or torch.cuda.is_available()


class LaunchPlan(Prepared):
    """An input :func:`accepts` validated: the kernels' arguments, ready to launch, and the
    launches made for it (kept with the plan, which ``memo`` keeps)."""

    __slots__ = ("shapes", "sizes", "constants", "forward_grid", "backward_grid", "split_levels",
                 "out_shape", "out_empty", "zeroing", "forward_launch", "zeroing_launch",
                 "backward_launch", "fixed_point_launch")

    def __init__(self, shapes, value, sampling_locations):
        batch, len_in, heads, channels = value.shape
        len_q, levels, points = sampling_locations.shape[1], sampling_locations.shape[3], \
            sampling_locations.shape[4]
        block_q, block_c = _blocks(channels)
        self.shapes = shapes
        self.sizes = (len_in, len_q, heads)
        self.constants = {"C": channels, "LEVELS": levels, "POINTS": points,
                          "BLOCK_Q": block_q, "BLOCK_C": block_c}
        query_blocks = _cdiv(len_q, block_q)
        self.forward_grid = (query_blocks, batch * heads, _cdiv(channels, block_c))
        self.split_levels = levels > 1 and query_blocks * batch * heads < SPLIT_LEVELS_BELOW
        self.backward_grid = (query_blocks, batch * heads, levels if self.split_levels else 1)
        self.out_shape = (batch, len_q, heads * channels)
        self.out_empty = batch * len_q * heads * channels == 0
        self.zeroing = forward_zeroing(sampling_locations.numel() // 2, value.numel(),
                                       self.forward_grid)
        self.forward_launch = self.zeroing_launch = self.backward_launch = None
        self.fixed_point_launch = None  # the deterministic backward's (deterministic.py)


def accepts(value, spatial_shapes, sampling_locations, attention_weights):
    """A :class:`LaunchPlan` when the kernels take this input, else why not.

    Bad input raises what the portable core raises (its own validation, the same function):
    ``TypeError``/``ValueError`` naming the argument. ``spatial_shapes`` may be ``(H, W)`` pairs
    or an int64 tensor on any device: a tensor is read on the host once per tensor version,
    pairs are copied to the device once (``levels.py``), so steady-state calls do not sync.
    """
    if (capturing := capture_reason()) is not None:
        return capturing
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
    if isinstance(spatial_shapes, torch.Tensor) and spatial_shapes.is_cuda \
            and torch.cuda.is_current_stream_capturing() and remembered(spatial_shapes) is None:
        return ("spatial_shapes tensor not read before this CUDA graph capture (reading it "
                "would sync): warm up with it outside the capture")
    levels = validate_inputs(value, spatial_shapes, sampling_locations, attention_weights)
    wanted = "cpu" if interpreting() else "cuda"
    if value.device.type != wanted:
        return f"value is on {value.device}, the kernels run on {wanted}"
    if value.dtype not in SUPPORTED_DTYPES:
        return f"value dtype {value.dtype} is not one of {SUPPORTED_DTYPES}"
    batch, _, heads, channels = value.shape
    len_q, points = sampling_locations.shape[1], sampling_locations.shape[4]
    if points == 0:
        return "no points"
    if batch * heads > MAX_GRID_Y:
        return f"batch x heads = {batch * heads} exceeds the launch grid's {MAX_GRID_Y}"
    if max(value.numel(), sampling_locations.numel(), batch * len_q * heads * channels) \
            > MAX_ELEMENTS:
        return f"more than {MAX_ELEMENTS} elements in one tensor (int32 offsets)"
    shapes = device_shapes(levels, value.device)
    if shapes is None:
        return ("spatial_shapes first seen during a CUDA graph capture (copying the sizes to the "
                "device outside the stream would sync): warm up with them outside the capture")
    return LaunchPlan(shapes, value, sampling_locations)


@functools.cache
def _kernels():
    from libreyolo.kernels.attention.ms_deform_attn import triton_kernels

    return triton_kernels


def _blocks(channels: int) -> tuple[int, int]:
    """(BLOCK_Q, BLOCK_C): all channels in one vector when they fit, queries fill the tile."""
    block_c = min(max(16, 1 << (channels - 1).bit_length()), BLOCK_C_MAX)
    return max(8, TILE_ELEMENTS // block_c), block_c


def _cdiv(n: int, block: int) -> int:
    return -(-n // block)


def _forward(plan: LaunchPlan, value, sampling_locations, attention_weights, grad_value=None):
    """The output; with ``grad_value`` (a float32 buffer shaped like ``value``) the same launch
    zeroes it for the backward."""
    out = value.new_empty(plan.out_shape)
    if plan.out_empty:
        return out
    if grad_value is None:  # the sixth tensor is not touched: the kernel's ZERO_GRAD_VALUE is off
        tensors = (value, plan.shapes, sampling_locations, attention_weights, out, out)
        launch = plan.forward_launch or _forward_launch(plan, tensors, zero=False)
    else:
        tensors = (value, plan.shapes, sampling_locations, attention_weights, out, grad_value)
        launch = plan.zeroing_launch or _forward_launch(plan, tensors, zero=True)
    launch(*tensors)
    return out


def _forward_launch(plan: LaunchPlan, tensors: tuple, zero: bool) -> Launcher:
    launch = Launcher(_kernels().ms_deform_attn_fwd_kernel, plan.forward_grid, *tensors,
                      *plan.sizes, *(plan.zeroing if zero else (0, 0)), **plan.constants,
                      ZERO_GRAD_VALUE=zero, ZERO_BLOCK=ZERO_BLOCK, num_warps=NUM_WARPS)
    if zero:
        plan.zeroing_launch = launch
    else:
        plan.forward_launch = launch
    return launch


def _backward_launch(plan: LaunchPlan, tensors: tuple) -> Launcher:
    # An int64 value gradient is the deterministic backward's (deterministic.py), compiled apart:
    # a Launcher relaunches the dtypes it was made with, so each mode keeps its own.
    fixed_point = tensors[5].dtype is torch.int64
    launch = plan.fixed_point_launch if fixed_point else plan.backward_launch
    if launch is None:
        launch = Launcher(_kernels().ms_deform_attn_bwd_kernel, plan.backward_grid, *tensors,
                          *plan.sizes, **plan.constants, SPLIT_LEVELS=plan.split_levels,
                          num_warps=NUM_WARPS)
        if fixed_point:
            plan.fixed_point_launch = launch
        else:
            plan.backward_launch = launch
    return launch


def gradient_buffers(value, sampling_locations, attention_weights, *, zeroed: bool) -> tuple:
    """The backward kernel's three outputs. ``grad_value`` takes atomic adds (many queries sample
    one pixel), so it must start at zero, in float32: ``zeroed`` fills it here, else the forward
    kernel that gets it zeroes it (``zeroed_by_forward``). The kernel stores every location and
    weight gradient exactly once (each (query, head, level, point) belongs to one program, inside
    or outside the level), so those two start uninitialized: two fill launches fewer than
    ``zeros``."""
    grad_value = value.new_zeros(value.shape, dtype=torch.float32) if zeroed \
        else zeroed_by_forward(value)
    return grad_value, stored_by_kernel(sampling_locations), stored_by_kernel(attention_weights)


def zeroed_by_forward(value: torch.Tensor) -> torch.Tensor:
    """A float32 buffer shaped like ``value`` that the forward kernel zeroes (``ZERO_GRAD_VALUE``),
    allocated without a fill (the interpreter tests fill it with NaN instead, to prove it)."""
    return torch.empty_like(value, dtype=torch.float32)


def stored_by_kernel(like: torch.Tensor) -> torch.Tensor:
    """A contiguous buffer shaped like ``like`` whose every element the backward kernel stores:
    allocated without a fill (the interpreter tests fill it with NaN instead, to prove it)."""
    return torch.empty_like(like)


def keep_for_backward(ctx, plan, value, sampling_locations, attention_weights):
    """What an autograd Function's forward (this provider's and the ragged one's) keeps: the
    plan, the inputs and, for a host-bound call (``plan.zeroing``), the gradient buffers,
    allocated here. Returns the value gradient's buffer, which the forward's launch must zero,
    or None."""
    ctx.plan = plan
    ctx.save_for_backward(value, sampling_locations, attention_weights)
    # under deterministic mode the backward allocates (its float32 value gradient needs no zeros)
    if plan.zeroing is None or deterministic.requested():
        ctx.buffers = None
        return None
    ctx.buffers = gradient_buffers(value, sampling_locations, attention_weights, zeroed=False)
    return ctx.buffers[0]


def gradients(launch_for, ctx, grad_out) -> tuple:
    """The three gradients of the Function whose context is ``ctx``, from one launch of a
    backward kernel: ``launch_for(plan, tensors)`` is the plan's kept launch of it.

    Buffers the forward allocated serve one backward: a second one (``retain_graph``) allocates
    its own, since the first's gradients are the caller's and the value gradient must start at
    zero. Under ``torch.use_deterministic_algorithms`` the value gradient is summed in fixed point
    instead (``deterministic.py``: the same bits every run)."""
    value, sampling_locations, attention_weights = ctx.saved_tensors
    buffers, ctx.buffers = ctx.buffers, None
    if grad_out.numel() == 0:  # no channels (or nothing at all): no launch, nothing stored
        return (torch.zeros_like(value), torch.zeros_like(sampling_locations),
                torch.zeros_like(attention_weights))
    fixed_point = deterministic.requested()  # its float32 value gradient needs no zeros
    buffers = buffers or gradient_buffers(value, sampling_locations, attention_weights,
                                          zeroed=not fixed_point)
    if fixed_point:
        return deterministic.gradients(launch_for, ctx.plan, value, sampling_locations,
                                       attention_weights, grad_out.contiguous(), buffers)
    grad_value, grad_locations, grad_weights = buffers
    tensors = (value, ctx.plan.shapes, sampling_locations, attention_weights,
               grad_out.contiguous(), grad_value, grad_locations, grad_weights)
    launch_for(ctx.plan, tensors)(*tensors)
    if value.dtype is not torch.float32:
        grad_value = grad_value.to(value.dtype)
    return grad_value, grad_locations, grad_weights


class _MSDeformAttnFunction(torch.autograd.Function):
    """Autograd wiring: the backward kernel gives all three gradients in one pass."""

    @staticmethod
    def forward(ctx, plan, value, sampling_locations, attention_weights):
        grad_value = keep_for_backward(ctx, plan, value, sampling_locations, attention_weights)
        return _forward(plan, value, sampling_locations, attention_weights, grad_value)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):
        grad_value, grad_locations, grad_weights = gradients(_backward_launch, ctx, grad_out)
        needs = ctx.needs_input_grad
        return (None, grad_value if needs[1] else None,
                grad_locations if needs[2] else None, grad_weights if needs[3] else None)


_apply = applier(_MSDeformAttnFunction)


def run(apply, forward, plan, value, sampling_locations, attention_weights):
    """``forward(plan, ...)`` on contiguous tensors (this provider's and the ragged one's): through
    ``apply``, the provider's autograd Function, when a gradient is wanted, else with no autograd
    node (host time per call)."""
    value = value.contiguous()
    sampling_locations = sampling_locations.contiguous()
    attention_weights = attention_weights.contiguous()
    if torch.is_grad_enabled() and (value.requires_grad or sampling_locations.requires_grad
                                    or attention_weights.requires_grad):
        return apply(plan, value, sampling_locations, attention_weights)
    return forward(plan, value, sampling_locations, attention_weights)


def ms_deform_attn_triton(value, spatial_shapes, sampling_locations, attention_weights, *,
                          prepared: LaunchPlan | None = None):
    """The slot on the Triton kernels; differentiable in value, locations and weights.

    ``prepared`` is what :func:`accepts` returned for these arguments (the registry passes it);
    a direct call without it runs :func:`accepts` itself and raises ``ValueError`` with the
    reason when the kernels decline the input.
    """
    if prepared is None:
        prepared = accepts(value, spatial_shapes, sampling_locations, attention_weights)
        if isinstance(prepared, str):
            raise ValueError(f"ms_deform_attn triton implementation declines this input: "
                             f"{prepared}")
    return run(_apply, _forward, prepared, value, sampling_locations, attention_weights)


class Recomputed:
    """What ``gradients`` reads from an autograd context, for a backward with no recorded
    forward (the slot's operator under ``torch.compile``): the plan and contiguous inputs."""

    __slots__ = ("plan", "saved_tensors", "buffers")

    def __init__(self, plan, value, sampling_locations, attention_weights):
        self.plan, self.buffers = plan, None
        self.saved_tensors = (value.contiguous(), sampling_locations.contiguous(),
                              attention_weights.contiguous())


def ms_deform_attn_triton_backward(grad, value, spatial_shapes, sampling_locations,
                                   attention_weights, *, prepared: LaunchPlan | None = None):
    """The three gradients of :func:`ms_deform_attn_triton` for ``grad``, from one launch of the
    backward kernel, as its autograd Function's backward computes them."""
    plan = prepared if prepared is not None else accepts(value, spatial_shapes,
                                                         sampling_locations, attention_weights)
    ctx = Recomputed(plan, value, sampling_locations, attention_weights)
    return gradients(_backward_launch, ctx, grad)


_HERE = Path(__file__).resolve().parent
#: The files this implementation's numbers depend on (its parity records' digest starts here).
SOURCES = tuple(str(_HERE / f) for f in ("triton_provider.py", "triton_kernels.py")) + (
    launcher_source, autograd_source) + deterministic.SOURCES

register("ms_deform_attn", ms_deform_attn_triton, name="triton", predicate=environment_ok,
         accepts=accepts, sources=SOURCES, backward=ms_deform_attn_triton_backward)

"""What the classic and the ragged MSDA Triton providers share, each a user of it: the kernels'
limits and tile, the rule for when a forward zeroes the backward's value gradient, the gradient
buffers, the autograd context's keeping and the one backward launch, and the call itself.

A provider brings its kernels, its plan (which holds ``shapes``, ``zeroing`` and its kept
launches) and its forward and backward launches; ``autograd_function``, ``run`` and ``gradients``
do the rest.
"""

from __future__ import annotations

import torch

from libreyolo.kernels.autograd import once_differentiable
from libreyolo.kernels.triton_kit import cdiv
from libreyolo.kernels.triton_launch import Launcher

from . import deterministic

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


def launch_forward(plan, kernels, name: str, grid: tuple, out: torch.Tensor, value,
                   sampling_locations, attention_weights, grad_value=None, **options):
    """``out`` computed by the forward kernel ``name`` of module ``kernels()``, from the launch
    kept on ``plan``; with ``grad_value`` (a float32 buffer shaped like ``value``) the same
    launch zeroes it for the backward, a launch of its own."""
    zero = grad_value is not None
    # without grad_value the sixth tensor is not touched: the kernel's ZERO_GRAD_VALUE is off
    tensors = (value, plan.shapes, sampling_locations, attention_weights, out,
               grad_value if zero else out)
    key = "zeroing forward" if zero else "forward"
    launch = plan.launches.get(key) or plan.launches.setdefault(key, Launcher(
        getattr(kernels(), name), grid, *tensors, *plan.sizes,
        *(plan.zeroing if zero else (0, 0)), **plan.constants, ZERO_GRAD_VALUE=zero,
        ZERO_BLOCK=ZERO_BLOCK, num_warps=NUM_WARPS, **options))
    launch(*tensors)
    return out


def backward_launch(plan, kernels, name: str, grid: tuple, tensors: tuple,
                    **options) -> Launcher:
    """The backward kernel ``name``'s launch kept on ``plan``. An int64 value gradient is the
    deterministic backward's (deterministic.py), compiled apart: a Launcher relaunches the
    dtypes it was made with, so each mode keeps its own."""
    key = "fixed-point backward" if tensors[5].dtype is torch.int64 else "backward"
    return plan.launches.get(key) or plan.launches.setdefault(key, Launcher(
        getattr(kernels(), name), grid, *tensors, *plan.sizes, **plan.constants,
        num_warps=NUM_WARPS, **options))


def forward_zeroing(points: int, value_elements: int, forward_grid: tuple) -> tuple | None:
    """``(zero_count, zero_share)`` of the forward kernel's ``zero_value_gradient`` (the value
    gradient's elements, and how many each program zeroes) when a grad-mode forward allocates
    the backward's buffers and zeroes the value gradient, else None: see
    ``GRADIENTS_IN_FORWARD_BELOW``."""
    programs = max(1, forward_grid[0] * forward_grid[1] * forward_grid[2])
    share = cdiv(cdiv(value_elements, programs), ZERO_BLOCK) * ZERO_BLOCK
    if points >= GRADIENTS_IN_FORWARD_BELOW or share > ZEROS_PER_PROGRAM_MAX:
        return None
    return value_elements, share


def blocks(channels: int) -> tuple[int, int]:
    """(BLOCK_Q, BLOCK_C): all channels in one vector when they fit, queries fill the tile."""
    block_c = min(max(16, 1 << (channels - 1).bit_length()), BLOCK_C_MAX)
    return max(8, TILE_ELEMENTS // block_c), block_c


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


def autograd_function(name: str, provider, locations_differentiable=None):
    """A provider's autograd Function, called as ``(plan, value, sampling_locations,
    attention_weights)``: the forward keeps what its backward needs (``keep_for_backward``) and
    runs the provider module's ``_forward(plan, value, sampling_locations, attention_weights,
    grad_value)``; the backward's one kernel gives all three gradients (``gradients`` with the
    module's ``_backward_launch``). Both are read from the module at each call, as its own
    functions read them, so a test that replaces one sees it used.
    ``locations_differentiable(plan)`` False (the ragged slot's discrete sampling: its pixel is a
    step function of the location) returns None for the locations, whose buffer the kernel left
    unwritten."""

    class Function(torch.autograd.Function):
        @staticmethod
        def forward(ctx, plan, value, sampling_locations, attention_weights):
            grad_value = keep_for_backward(ctx, plan, value, sampling_locations,
                                           attention_weights)
            return provider._forward(plan, value, sampling_locations, attention_weights,
                                     grad_value)

        @staticmethod
        @once_differentiable
        def backward(ctx, grad_out):
            grad_value, grad_locations, grad_weights = gradients(provider._backward_launch, ctx,
                                                                 grad_out)
            needs = ctx.needs_input_grad
            locations = needs[2] and (locations_differentiable is None
                                      or locations_differentiable(ctx.plan))
            return (None, grad_value if needs[1] else None,
                    grad_locations if locations else None, grad_weights if needs[3] else None)

    Function.__name__ = Function.__qualname__ = name
    return Function


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


class Recomputed:
    """What ``gradients`` reads from an autograd context, for a backward with no recorded
    forward (the slot's operator under ``torch.compile``): the plan and contiguous inputs."""

    __slots__ = ("plan", "saved_tensors", "buffers")

    def __init__(self, plan, value, sampling_locations, attention_weights):
        self.plan, self.buffers = plan, None
        self.saved_tensors = (value.contiguous(), sampling_locations.contiguous(),
                              attention_weights.contiguous())

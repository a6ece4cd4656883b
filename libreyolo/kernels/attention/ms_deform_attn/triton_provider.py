"""The ``triton`` implementation of the ``ms_deform_attn`` slot: forward and backward.

Registered at import time. Imports cleanly without triton (the predicate is then false); the
kernels module is imported only when the implementation first runs. Runs on CUDA tensors, and on
CPU tensors under ``TRITON_INTERPRET=1`` (how CI checks its logic). Inputs in float32, float16 or
bfloat16 are computed in float32 and results returned in the input dtype.

Nothing here reads device data on the host: shapes come from tensor metadata, level sizes are
read inside the kernels, buffers have data-independent sizes. After a warm-up call (which
compiles), forward and backward are CUDA-graph capturable.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import torch

from libreyolo.capture import capture_reason
from libreyolo.kernels import register
from libreyolo.kernels.settings import interpreting

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


def environment_ok() -> bool:
    """triton is installed, and there is a GPU or the interpreter is on."""
    if importlib.util.find_spec("triton") is None:
        return False
    return interpreting() or torch.cuda.is_available()


def accepts(value, spatial_shapes, sampling_locations, attention_weights):
    """None when the kernels take this input, else why not (metadata only: no device reads)."""
    tensors = {"value": value, "spatial_shapes": spatial_shapes,
               "sampling_locations": sampling_locations, "attention_weights": attention_weights}
    if not all(isinstance(t, torch.Tensor) for t in tensors.values()):
        return "every argument must be a tensor (spatial_shapes as a (levels, 2) int64 tensor)"
    if (capturing := capture_reason()) is not None:
        return capturing
    wanted = "cpu" if interpreting() else "cuda"
    for name, tensor in tensors.items():
        if tensor.device.type != wanted:
            return f"{name} is on {tensor.device}, the kernels run on {wanted}"
        if tensor.device != value.device:
            return f"{name} is on {tensor.device}, value on {value.device}"
    if value.dtype not in SUPPORTED_DTYPES:
        return f"value dtype {value.dtype} is not one of {SUPPORTED_DTYPES}"
    if sampling_locations.dtype != value.dtype or attention_weights.dtype != value.dtype:
        return "value, sampling_locations and attention_weights must share a dtype"
    if spatial_shapes.dtype != torch.int64 or spatial_shapes.dim() != 2 \
            or spatial_shapes.shape[1] != 2:
        return "spatial_shapes must be a (levels, 2) int64 tensor"
    if value.dim() != 4 or sampling_locations.dim() != 6:
        return "value must be 4-D and sampling_locations 6-D (the slot's layout)"
    batch, _, heads, _ = value.shape
    _, len_q, _, levels, points, _ = sampling_locations.shape
    if tuple(sampling_locations.shape) != (batch, len_q, heads, spatial_shapes.shape[0], points, 2):
        return "sampling_locations does not match value and spatial_shapes"
    if tuple(attention_weights.shape) != (batch, len_q, heads, levels, points):
        return "attention_weights does not match sampling_locations"
    if levels == 0 or points == 0:
        return "no levels or no points"
    if batch * heads > MAX_GRID_Y:
        return f"batch x heads = {batch * heads} exceeds the launch grid's {MAX_GRID_Y}"
    if max(t.numel() for t in tensors.values()) > MAX_ELEMENTS or \
            batch * len_q * value.shape[2] * value.shape[3] > MAX_ELEMENTS:
        return f"more than {MAX_ELEMENTS} elements in one tensor (int32 offsets)"
    return None


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


def _launch_config(value, sampling_locations):
    batch, len_in, heads, channels = value.shape
    len_q, levels, points = sampling_locations.shape[1], sampling_locations.shape[3], \
        sampling_locations.shape[4]
    block_q, block_c = _blocks(channels)
    constants = {"C": channels, "LEVELS": levels, "POINTS": points,
                 "BLOCK_Q": block_q, "BLOCK_C": block_c}
    return (len_in, len_q, heads), constants


def _forward(value, spatial_shapes, sampling_locations, attention_weights):
    batch, _, heads, channels = value.shape
    len_q = sampling_locations.shape[1]
    out = value.new_empty(batch, len_q, heads * channels)
    if out.numel() == 0:
        return out
    sizes, constants = _launch_config(value, sampling_locations)
    grid = (_cdiv(len_q, constants["BLOCK_Q"]), batch * heads,
            _cdiv(channels, constants["BLOCK_C"]))
    _kernels().ms_deform_attn_fwd_kernel[grid](
        value, spatial_shapes, sampling_locations, attention_weights, out, *sizes, **constants,
        num_warps=NUM_WARPS)
    return out


def _backward(grad_out, value, spatial_shapes, sampling_locations, attention_weights):
    grad_value = torch.zeros(value.shape, dtype=torch.float32, device=value.device)
    grad_locations = torch.zeros_like(sampling_locations)
    grad_weights = torch.zeros_like(attention_weights)
    batch, _, heads, _ = value.shape
    len_q = sampling_locations.shape[1]
    if grad_out.numel() > 0:
        sizes, constants = _launch_config(value, sampling_locations)
        grid = (_cdiv(len_q, constants["BLOCK_Q"]), batch * heads)
        _kernels().ms_deform_attn_bwd_kernel[grid](
            value, spatial_shapes, sampling_locations, attention_weights, grad_out,
            grad_value, grad_locations, grad_weights, *sizes, **constants, num_warps=NUM_WARPS)
    return grad_value.to(value.dtype), grad_locations, grad_weights


class _MSDeformAttnFunction(torch.autograd.Function):
    """Autograd wiring: the backward kernel gives all three gradients in one pass."""

    @staticmethod
    def forward(ctx, value, spatial_shapes, sampling_locations, attention_weights):
        ctx.save_for_backward(value, spatial_shapes, sampling_locations, attention_weights)
        return _forward(value, spatial_shapes, sampling_locations, attention_weights)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        value, spatial_shapes, sampling_locations, attention_weights = ctx.saved_tensors
        grad_value, grad_locations, grad_weights = _backward(
            grad_out.contiguous(), value, spatial_shapes, sampling_locations, attention_weights)
        needs = ctx.needs_input_grad
        return (grad_value if needs[0] else None, None,
                grad_locations if needs[2] else None, grad_weights if needs[3] else None)


def ms_deform_attn_triton(value, spatial_shapes, sampling_locations, attention_weights):
    """The slot on the Triton kernels; differentiable in value, locations and weights."""
    reason = accepts(value, spatial_shapes, sampling_locations, attention_weights)
    if reason is not None:
        raise ValueError(f"ms_deform_attn triton implementation declines this input: {reason}")
    return _MSDeformAttnFunction.apply(value.contiguous(), spatial_shapes.contiguous(),
                                       sampling_locations.contiguous(),
                                       attention_weights.contiguous())


_HERE = Path(__file__).resolve().parent
#: The files this implementation's numbers depend on (its parity records' digest starts here).
SOURCES = tuple(str(_HERE / f) for f in ("triton_provider.py", "triton_kernels.py"))

register("ms_deform_attn", ms_deform_attn_triton, name="triton", predicate=environment_ok,
         accepts=accepts, sources=SOURCES)

"""Run an ``UnpackPlan``: one launch of ``unpack_kernel`` into a new contiguous output.

The host does no more than allocate the output and launch: no copy of the packed tensors (they
are read through their strides), no read of device data, so a call is safe under CUDA-graph
capture once its kernel is compiled.
"""

from __future__ import annotations

import torch
import triton

from .unpack_kernels import unpack_kernel
from .unpack_plan import OutKind, UnpackPlan

#: Output elements per program on the GPU (as the fake-quant kernel's measured tile: 16 per
#: thread at eight warps); tiles are at most ``MAX_BLOCK_C`` columns wide, so a ragged row end
#: wastes at most one partial tile per row block.
GPU_TILE = 4096
MAX_BLOCK_C = 1024
_BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def run(plan: UnpackPlan, tile: int = GPU_TILE) -> torch.Tensor:
    """The unpacked ``(rows, in_features)`` tensor of ``plan.dtype``."""
    out = torch.empty((plan.rows, plan.in_features), dtype=plan.dtype, device=plan.codes.device)
    if out.numel() == 0:
        return out
    block_c = min(triton.next_power_of_2(plan.in_features), MAX_BLOCK_C, tile)
    block_r = max(1, tile // block_c)
    grid = (triton.cdiv(plan.rows, block_r), triton.cdiv(plan.in_features, block_c))
    codes, scale = plan.codes, plan.scale
    unpack_kernel[grid](
        codes, scale, plan.tensor_scale if plan.tensor_scale is not None else scale,
        out.view(_BITS[plan.dtype]),
        plan.rows, plan.in_features, codes.stride(0), codes.stride(1),
        scale.stride(0), scale.stride(1),
        FORMAT=int(plan.fmt), BITS=plan.bits, GROUP=plan.group,
        OUT_KIND=int(OutKind.of(plan.dtype)), BLOCK_R=block_r, BLOCK_C=block_c,
        num_warps=8 if block_r * block_c >= 4096 else 4, enable_fp_fusion=False,
    )
    return out

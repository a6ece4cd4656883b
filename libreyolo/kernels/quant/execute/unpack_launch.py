"""Run an ``UnpackPlan``: one launch of ``unpack_kernel`` into a new contiguous output.

The host does no more than allocate the output and launch: no copy of the packed tensors (they
are read through their strides), no read of device data, so a call is safe under CUDA-graph
capture once its kernel is compiled.

The launch goes through ``libreyolo.kernels.triton_launch``, which relaunches the kernel
compiled for the same specialization without Triton's per-call bookkeeping.
"""

from __future__ import annotations

import torch

from ...triton_launch import launch
from .unpack_kernels import unpack_kernel
from .unpack_plan import NUM_WARPS, UnpackPlan


def run(plan: UnpackPlan) -> torch.Tensor:
    """The unpacked ``(rows, in_features)`` tensor of ``plan.work.dtype``."""
    work = plan.work
    out = torch.empty((work.rows, work.in_features), dtype=work.dtype, device=work.device)
    grid = work.grid
    if grid[0] == 0:
        return out
    codes, scale = plan.codes, plan.scale
    tensor_scale = plan.tensor_scale if plan.tensor_scale is not None else scale
    launch(unpack_kernel, grid, codes, scale, tensor_scale, out, *work.kernel_args,
           num_warps=NUM_WARPS, enable_fp_fusion=False)
    return out

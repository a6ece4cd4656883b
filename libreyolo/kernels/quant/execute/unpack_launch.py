"""Run an ``UnpackPlan``: one launch of ``unpack_kernel`` into a new contiguous output.

The host does no more than allocate the output and launch: no copy of the packed tensors (they
are read through their strides), no read of device data, so a call is safe under CUDA-graph
capture once its kernel is compiled.

The launch is made once per ``Work`` and kept in its ``launches`` (a
``triton_launch.Launcher``: sizes, strides and constants fixed), so a steady-state call allocates
its output and relaunches the compiled kernel.
"""

from __future__ import annotations

import torch

from ...triton_launch import Launcher
from .unpack_kernels import unpack_kernel
from .unpack_plan import UnpackPlan


def run(plan: UnpackPlan) -> torch.Tensor:
    """The unpacked ``(rows, in_features)`` tensor of ``plan.work.dtype``."""
    work = plan.work
    out = torch.empty_like(work.out_like)  # contiguous (see ``unpack_plan._output_like``)
    grid = work.grid
    if grid[0] == 0:
        return out
    codes, scale = plan.codes, plan.scale
    tensor_scale = plan.tensor_scale if plan.tensor_scale is not None else scale
    launch = work.launches.get("unpack") or work.launches.setdefault("unpack", Launcher(
        unpack_kernel, grid, codes, scale, tensor_scale, out, *work.kernel_args,
        num_warps=work.config.num_warps, enable_fp_fusion=False))
    launch(codes, scale, tensor_scale, out)
    return out

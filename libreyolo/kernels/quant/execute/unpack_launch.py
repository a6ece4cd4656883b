"""Run an ``UnpackPlan``: one launch of ``unpack_kernel`` into a new contiguous output.

The host does no more than allocate the output and launch: no copy of the packed tensors (they
are read through their strides), no read of device data, so a call is safe under CUDA-graph
capture once its kernel is compiled.

Triton's launcher (``JITFunction.run``: binding the arguments, computing their specialization
and the cache key) was about half of a call's host time (docs/performance.md). Everything it
decides is fixed by the plan's ``Work`` (dtypes, shapes, strides, constants) plus the pointers'
16-byte alignment, so the compiled kernel it returns is kept on the ``Work`` by alignment and
later calls launch it directly. Under the interpreter every call goes through Triton.
"""

from __future__ import annotations

import torch

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
    if work.interpreted:
        unpack_kernel[grid](codes, scale, tensor_scale, out, *work.kernel_args,
                            num_warps=NUM_WARPS, enable_fp_fusion=False)
        return out
    aligned = (codes.data_ptr() % 16, scale.data_ptr() % 16, tensor_scale.data_ptr() % 16,
               out.data_ptr() % 16)
    compiled = work.compiled.get(aligned)
    if compiled is None:
        work.compiled[aligned] = unpack_kernel[grid](
            codes, scale, tensor_scale, out, *work.kernel_args, num_warps=NUM_WARPS,
            enable_fp_fusion=False)
    else:
        compiled[grid](codes, scale, tensor_scale, out, *work.kernel_args)
    return out

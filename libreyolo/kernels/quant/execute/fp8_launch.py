"""Run the FP8 prologue and epilogue plans: allocate, launch once, return. No read of device data
on the host and no copy of the inputs, so every call is safe under CUDA-graph capture once its
kernel is compiled."""

from __future__ import annotations

import functools

import torch

from libreyolo.kernels import ptx
from libreyolo.kernels.settings import interpreting
from libreyolo.kernels.triton_kit import FloatKind, cdiv, next_power_of_2
from libreyolo.kernels.triton_launch import Launcher, launch

from .fp8_kernels import fp8_cast_kernel, fp8_epilogue_kernel
from .fp8_plan import CastPlan, EpiloguePlan

#: Elements per program on the GPU, at least one whole row for a dynamic prologue; the
#: interpreter costs ~0.7 ms per program (docs/architecture.md, "Facts for kernel authors"),
#: so CPU runs take bigger tiles. The prologue's 2048: two 1024-element rows (fc1's input) or a
#: static 2048-element slab at four warps run faster than 4096-element programs, and a
#: 4096-element dynamic row keeps its own program at four warps (``benchmarks/NOTES.md``, "The
#: FP8 prologue's tile and threads"). The epilogue keeps the fake-quant kernels' 4096.
CAST_TILE, EPILOGUE_TILE, INTERPRETER_TILE = 2048, 4096, 16384
MAX_BLOCK_C = 1024
#: The prologue divides by the FMA-corrected reciprocal on the GPU (``fp8_kernels._quotient``);
#: the interpreter, whose ``tl.fma`` rounds twice, divides with ``tl.div_rn``.
FMA_DIVISION = True
#: Elements a prologue thread holds: 32 (four warps on a 4096 tile) ran faster than 16 (eight
#: warps), with the software rounding and with the hardware E4M3 conversion
#: (``benchmarks/NOTES.md``, "The FP8 prologue's tile and threads"). Rows longer than the tile
#: take more warps (at most 16) rather than more registers.
CAST_ELEMENTS_PER_THREAD = 32
#: The prologue rounds and encodes with the E4M3 conversion instruction where the device has
#: it (``hardware_e4m3``); False forces the software rounding everywhere (the GPU tests and the
#: sweep compare the two).
HARDWARE_E4M3 = True
_BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def hardware_e4m3(device: torch.device) -> bool:
    """Whether the prologue on ``device`` takes the hardware E4M3 conversion: PTX
    ``cvt.rn.satfinite.e4m3x2.f32`` needs an NVIDIA GPU of compute capability 8.9 or later
    (Ada, Hopper, Blackwell). Never under the interpreter (it cannot run PTX), on ROCm or older
    GPUs: they take the software rounding, which equals it bit for bit."""
    if not HARDWARE_E4M3 or interpreting() or device.type != "cuda" or torch.version.hip:
        return False
    return _capability(device.index if device.index is not None else
                       torch.cuda.current_device()) >= (8, 9)


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def _tile(gpu_tile: int) -> int:
    return INTERPRETER_TILE if interpreting() else gpu_tile


def _loaded(t: torch.Tensor) -> torch.Tensor:
    """bfloat16 is read as int16 bits (the kernels widen them by a shift)."""
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


def cast_blocks(padded_cols: int, dynamic: bool) -> tuple[int, int, int]:
    """(rows, columns, warps) of a prologue program over rows of ``padded_cols`` codes: a dynamic
    program holds whole rows (their amax), a static one at most ``MAX_BLOCK_C`` columns."""
    block_c = next_power_of_2(padded_cols)
    if not dynamic:
        block_c = min(block_c, MAX_BLOCK_C)
    block_r = max(1, _tile(CAST_TILE) // block_c)
    warps = min(16, max(4, block_r * block_c // (32 * CAST_ELEMENTS_PER_THREAD)))
    return block_r, block_c, warps


def cast(plan: CastPlan, pad_to: int = 1, *, gelu: bool = False
         ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(codes, row_scale)``: contiguous E4M3 codes of shape (rows, cols rounded up to a multiple
    of ``pad_to``), zeros in the pad, and the float32 (rows, 1) scales of a dynamic plan (None
    for a static one). ``gelu``: quantize GELU(x) (``fused_fp8_mlp``'s fold; not exact)."""
    x2d = plan.x2d
    rows, cols = x2d.shape
    padded = -(-cols // pad_to) * pad_to
    codes = torch.empty((rows, padded), dtype=torch.uint8, device=x2d.device)
    dynamic = plan.scale is None
    launched = bool(rows and padded)
    # the kernel writes every row's scale; without a launch (no columns) each row's is 1
    row_scale = (torch.empty if launched else torch.ones)(
        (rows, 1), dtype=torch.float32, device=x2d.device) if dynamic else None
    if launched:
        tensors = (_loaded(x2d), row_scale if dynamic else plan.scale, codes,
                   row_scale if dynamic else codes)
        # the plan's description fixes the sizes, strides, dtypes and device; the rest is here
        options = (padded, gelu, FMA_DIVISION and not interpreting(), hardware_e4m3(x2d.device))
        run = plan.launches.get(options) or plan.launches.setdefault(
            options, _cast_launcher(tensors, rows, cols, x2d.stride(), dynamic, plan.kind,
                                    *options))
        run(*tensors)
    return codes.view(torch.float8_e4m3fn), row_scale


def _cast_launcher(tensors, rows, cols, strides, dynamic, kind, padded, gelu, fma_division,
                   hardware) -> Launcher:
    block_r, block_c, num_warps = cast_blocks(padded, dynamic)
    return Launcher(
        fp8_cast_kernel, (cdiv(rows, block_r), cdiv(padded, block_c)),
        *tensors, rows, cols, padded, *strides, IN_KIND=int(kind), DYNAMIC=dynamic,
        BLOCK_R=block_r, BLOCK_C=block_c, GELU=gelu, FMA_DIVISION=fma_division,
        HARDWARE_E4M3=hardware, num_warps=num_warps, enable_fp_fusion=False,
    )


def epilogue(plan: EpiloguePlan) -> torch.Tensor:
    """The (rows, cols) output of ``plan.out_dtype``, contiguous."""
    acc = plan.acc
    rows, cols = acc.shape
    out = torch.empty((rows, cols), dtype=plan.out_dtype, device=acc.device)
    if out.numel() == 0:
        return out
    block_c = min(next_power_of_2(cols), MAX_BLOCK_C)
    block_r = max(1, _tile(EPILOGUE_TILE) // block_c)
    grid = (cdiv(rows, block_r), cdiv(cols, block_c))
    bias = plan.bias
    launch(
        fp8_epilogue_kernel, grid,
        acc, plan.row_scale, plan.col_scale, _loaded(bias) if bias is not None else acc,
        out.view(_BITS[plan.out_dtype]), rows, cols, acc.stride(0), acc.stride(1),
        plan.row_scale.stride(0), plan.col_scale.stride(0),
        bias.stride(0) if bias is not None else 0,
        HAS_BIAS=bias is not None, RELU=plan.relu, OUT_KIND=int(FloatKind.of(plan.out_dtype)),
        PTX=ptx.compiles_to_ptx(acc.device), BLOCK_R=block_r, BLOCK_C=block_c,
        num_warps=8 if block_r * block_c >= 4096 else 4, enable_fp_fusion=False,
    )
    return out

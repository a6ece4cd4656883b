"""The FP8 prologue's hardware E4M3 conversion compiles for sm_89 and sm_90 on the CPU, without a
GPU: its inline PTX reaches ptxas, and only the ``HARDWARE_E4M3`` kernel holds the instruction.

Why a test: CI runs the prologue in the interpreter, which cannot run PTX, so the hardware
branch is never executed there; a typo in its assembly, or a Triton that packs the asm's
operands differently, would otherwise surface only on a GPU (tests/kernels/quant/
fp8_linear_checks.py checks its bits there).
"""

from __future__ import annotations

import pytest
import torch

triton = pytest.importorskip("triton")

from triton.backends import backends  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from libreyolo.kernels.quant.execute.fp8_kernels import fp8_cast_kernel  # noqa: E402
from libreyolo.kernels.settings import interpreting  # noqa: E402
from libreyolo.kernels.triton_kit import FloatKind  # noqa: E402

CONVERSION = "cvt.rn.satfinite.e4m3x2.f32"
POINTERS = {"x_ptr": "*i16", "scale_ptr": "*fp32", "codes_ptr": "*u8", "row_scale_ptr": "*fp32"}
pytestmark = [
    pytest.mark.skipif("nvidia" not in backends, reason="triton without its CUDA backend"),
    pytest.mark.skipif(interpreting(), reason="under TRITON_INTERPRET=1 nothing is compiled"),
]


def compiled(capability: int, hardware: bool, dynamic: bool):
    """The prologue as the launcher specializes it for bf16 16384x4096 (one 4096-element row a
    program, four warps; 16-byte aligned pointers, a unit column stride)."""
    signature, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(fp8_cast_kernel.arg_names):
        if i in fp8_cast_kernel.constexprs or name == "x_col_stride":
            signature[name] = "constexpr"
        else:
            signature[name] = POINTERS.get(name, "i32")
            attrs[(i,)] = [["tt.divisibility", 16]]
    constexprs.update(x_col_stride=1, IN_KIND=int(FloatKind.of(torch.bfloat16)),
                      DYNAMIC=dynamic, BLOCK_R=1, BLOCK_C=4096, GELU=False, FMA_DIVISION=True,
                      HARDWARE_E4M3=hardware)
    source = ASTSource(fn=fp8_cast_kernel, signature=signature, constexprs=constexprs,
                       attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", capability, 32),
                          options={"num_warps": 4, "enable_fp_fusion": False})


@pytest.mark.parametrize("dynamic", [True, False], ids=["dynamic", "static"])
@pytest.mark.parametrize("capability", [89, 90], ids=["sm_89", "sm_90"])
def test_only_the_hardware_prologue_holds_the_e4m3_conversion(capability, dynamic):
    hardware = compiled(capability, True, dynamic)
    assert hardware.asm["cubin"]  # ptxas accepted it
    # 4096 elements over 128 threads: 32 a thread, two conversions per four elements
    assert hardware.asm["ptx"].count(CONVERSION) == 16
    assert CONVERSION not in compiled(capability, False, dynamic).asm["ptx"]

"""Arithmetic that rounds the same however a Triton kernel is compiled. Imports triton.

Inductor compiles a traced kernel (``wrap_triton``) with its own options and drops the
``enable_fp_fusion=False`` a launch passes (torch's ``generate_ttir`` keeps only the warps and
stages), so with fusion on a multiply followed by an add may contract into one FMA that rounds
once. Where a kernel's bits must follow torch's two roundings (a discrete pixel pick, the FP8
epilogue's scale then bias), the multiply is one no compiler contracts; the kernel then runs the
same code eagerly and traced (``tests/kernels/test_traced_kernel_code.py`` checks it).
"""

import triton
import triton.language as tl


@triton.jit
def product_uncontracted(x, y, PTX: tl.constexpr):
    """``x * y`` in float32, rounded to nearest even on its own: PTX ``mul.rn.f32``, which
    neither LLVM nor ``ptxas`` fuses with an add, where ``PTX`` (the kernel is compiled for an
    NVIDIA GPU: ``ptx.compiles_to_ptx``); otherwise a plain multiply, which the interpreter
    (no PTX, no contraction) rounds on its own too."""
    if PTX:
        return tl.inline_asm_elementwise("mul.rn.f32 $0, $1, $2;", "=f,f,f", [x, y],
                                         dtype=tl.float32, is_pure=True, pack=1)
    else:
        return x * y

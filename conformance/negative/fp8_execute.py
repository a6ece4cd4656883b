"""Negative controls for the FP8 execute slots: the references and the portable GEMM, broken in
one narrow way each, as a prologue, epilogue or GEMM kernel could be."""

from __future__ import annotations

import torch

from conformance.negative import breaks
from libreyolo.quant import fp8_execute as ref
from libreyolo.quant.numerics import finite_amax, floor_log2, pow2


@breaks("fp8_cast_static")
def ties_away_from_zero(x, scale):
    """Rounds x / scale to the E4M3 grid with ties away from zero (``floor(|y| / step + 0.5)``,
    the naive rounding), not to even: only exact ties differ."""
    want = ref.fp8_cast_static(x, scale)
    y = x.float() / torch.where(scale == 0, 1.0, scale)
    finite = torch.isfinite(y)
    magnitude = torch.where(finite, y.abs(), 0.0)
    step = pow2(torch.clamp(floor_log2(magnitude), min=-6) - 3)
    level = torch.clamp(torch.floor(magnitude / step + 0.5) * step, max=448.0) * torch.sign(y)
    wrong = finite & (scale != 0) & (level != 0)
    return torch.where(wrong, level, want.float()).to(torch.float8_e4m3fn)


@breaks("fp8_cast_dynamic")
def nan_poisons_row_amax(x):
    """Takes the row amax with ``torch.amax`` of ``|x|``, which propagates NaN (and counts inf):
    a row holding a NaN or an inf gets a NaN or inf scale, so every code in it is wrong."""
    codes, scale = ref.fp8_cast_dynamic(x)
    raw = x.float().abs().amax(dim=-1, keepdim=True) if x.numel() else finite_amax(x.float(), -1)
    broken = ~torch.isfinite(raw)
    nan = torch.full((), float("nan"))
    return (torch.where(broken, nan, codes.float()).to(torch.float8_e4m3fn),
            torch.where(broken, raw, scale))


@breaks("fp8_perchannel_epilogue")
def gpu_nan(acc, row_scale, col_scale, bias=None, activation=None, out_dtype=torch.bfloat16):
    """Writes NaN outputs as the GPU's own NaN (all mantissa bits set, ``0x7FFF...``) instead
    of the canonical quiet NaN."""
    out = ref.fp8_perchannel_epilogue(acc, row_scale, col_scale, bias, activation, out_dtype)
    bits = {torch.float32: torch.int32}.get(out_dtype, torch.int16)
    gpu = torch.full((), 0x7FFFFFFF if bits == torch.int32 else 0x7FFF, dtype=bits)
    return torch.where(out.isnan(), gpu.view(out_dtype), out)


@breaks("fp8_perchannel_epilogue")
def relu_drops_negative_zero_and_nan(acc, row_scale, col_scale, bias=None, activation=None,
                                     out_dtype=torch.bfloat16):
    """ReLU as ``where(y > 0, y, 0)``: NaN becomes 0 and -0.0 becomes +0.0."""
    out = ref.fp8_perchannel_epilogue(acc, row_scale, col_scale, bias, activation, out_dtype)
    if activation != "relu":
        return out
    return torch.where(out > 0, out, torch.zeros((), dtype=out_dtype))


@breaks("fp8_gemm")
def weight_scales_reversed(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16):
    """Applies output channel n the weight scale of channel N-1-n (scales indexed along the wrong
    axis or order)."""
    return ref.fp8_gemm_portable(a, b, scale_a, scale_b.flip(0), bias, out_dtype)


@breaks("fp8_gemm")
def transposed_weight(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16):
    """Reads the (N, K) weight's bytes as a (K, N) matrix, transposed (a column-major operand
    taken for a row-major one)."""
    n, k = b.shape
    return ref.fp8_gemm_portable(a, b.contiguous().reshape(k, n).T, scale_a, scale_b, bias,
                                 out_dtype)


@breaks("fp8_gemm")
def bfloat16_accumulation(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16):
    """Dequantizes the operands to bfloat16 and accumulates the products in bfloat16, one
    rounding per addition, over K (an accumulator declared in the output's dtype instead of
    float32). Float16 accumulation is no control here: at these K its error stays inside the
    bound of float16 and bfloat16 outputs (docs/fp8_execute.md, "The GEMM's bound")."""
    a16 = (a.float() * scale_a).bfloat16()
    b16 = (b.float() * scale_b[:, None]).bfloat16()
    acc = torch.zeros((a.shape[0], b.shape[0]), dtype=torch.bfloat16, device=a.device)
    for i in range(a.shape[1]):
        acc = acc + a16[:, i:i + 1] * b16[:, i][None, :]
    y = acc.float() + (bias.float() if bias is not None else 0.0)
    return y.to(out_dtype)


@breaks("fp8_gemm")
def bias_dropped_on_empty_reduction(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16):
    """Returns zeros when K is 0, the bias dropped, as torch 2.11's CUDA ``_scaled_mm`` does
    (it returns early with ``out.zero_()`` before its bias epilogue)."""
    if a.shape[1] == 0:
        return torch.zeros((a.shape[0], b.shape[0]), dtype=out_dtype, device=a.device)
    return ref.fp8_gemm_portable(a, b, scale_a, scale_b, bias, out_dtype)


CONTROLS = [
    ("fp8-cast-ties-away", ties_away_from_zero,
     "exact: a tie between two E4M3 codes goes to the even one (rule 3 of docs/quantization.md)"),
    ("fp8-cast-nan-amax", nan_poisons_row_amax,
     "exact: the dynamic scale is the *finite* row amax (rule 6); rows with NaN/inf are built in"),
    ("fp8-epilogue-gpu-nan", gpu_nan,
     "exact: NaN outputs are the canonical quiet NaN; the accumulators hold a NaN"),
    ("fp8-epilogue-relu-where", relu_drops_negative_zero_and_nan,
     "exact: ReLU keeps NaN and -0.0 (where(y < 0, +0, y)); ReLU cases hold both"),
    ("fp8-gemm-scale-axis", weight_scales_reversed,
     "bounded: per-channel scales differ by channel, so a permuted one is far off"),
    ("fp8-gemm-transposed-operand", transposed_weight,
     "bounded: a transposed weight computes another product"),
    ("fp8-gemm-bf16-accumulation", bfloat16_accumulation,
     "bounded: bfloat16 accumulation's error grows with K past the bound of either output "
     "dtype (benchmarks/sweeps/control_margins.py measures by how much, per case and device)"),
    ("fp8-gemm-empty-reduction-bias", bias_dropped_on_empty_reduction,
     "bounded: with K = 0 the output is the bias alone (case empty_reduction_with_bias)"),
]

"""The FP8 GEMM on tensor cores through ``torch._scaled_mm``, for every shape the slots take.

``_scaled_mm`` on CUDA wants K and N multiples of 16, a row-major first operand and a
column-major second one (the weight as stored, (N, K) row-major, transposed is exactly that), and
takes per-row x per-column scales only with a bfloat16 output. So:

- K or N not a multiple of 16 (ragged K, N % 16 != 0) or an operand in another layout: the codes
  are copied once into zero-padded contiguous buffers (zeros add nothing to a dot product) and the
  output is sliced back to N. The finalized module pads its weight once at load and its prologue
  writes the activation codes padded, so its calls copy nothing (``fp8_linear``);
- rowwise scales with a bfloat16 output: one ``_scaled_mm`` with the scales and the bias;
- anything else (tensorwise scales, float16 or float32 outputs): ``_scaled_mm`` with unit scales
  into float32, then the epilogue kernel applies the scales and the bias (``fp8_perchannel_
  epilogue``, exact against its reference);
- K = 0: no product to compute, and ``_scaled_mm`` returns zeros there without adding the bias
  (torch 2.11 on CUDA), so the output is the reference's: the bias alone, scaled zeros beside it.

On CPU, ``_scaled_mm`` (torch 2.13) takes every shape, scale mode and output dtype directly, which
is what the suite's CPU cells run (per-tensor scales passed as rowwise ones: ``_cpu``). Nothing
here reads device data: graph capture is safe.
"""

from __future__ import annotations

import functools

import torch

from libreyolo.kernels.prepared import Prepared
from libreyolo.quant import fp8_execute as ref

_ALIGN = 16


class GemmPlan(Prepared):
    """The checked arguments of one GEMM (``rowwise``: (M, 1) and (N,) scales, else 0-dim)."""

    __slots__ = ("a", "b", "scale_a", "scale_b", "bias", "out_dtype", "rowwise")

    def __init__(self, a, b, scale_a, scale_b, bias, out_dtype, rowwise):
        self.a, self.b, self.scale_a, self.scale_b = a, b, scale_a, scale_b
        self.bias, self.out_dtype, self.rowwise = bias, out_dtype, rowwise


@functools.cache
def fp8_tensor_cores(device_index: int) -> bool:
    """FP8 MMA needs compute capability 8.9 (Ada) or 9.0+ (Hopper)."""
    return torch.cuda.get_device_capability(device_index) >= (8, 9)


def padded_codes(codes: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """Row-major E4M3 codes with K (and, given ``rows``, the row count) rounded up to a multiple
    of 16, zeros in the pad; ``codes`` itself when it already is that."""
    n, k = codes.shape
    rows = n if rows is None else rows
    if k % _ALIGN == 0 and rows == n and codes.stride() == (k, 1):
        return codes
    out = torch.zeros((rows, -(-k // _ALIGN) * _ALIGN), dtype=torch.uint8, device=codes.device)
    out[:n, :k] = codes.view(torch.uint8) if codes.is_contiguous() else \
        codes.contiguous().view(torch.uint8)
    return out.view(torch.float8_e4m3fn)


def aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def run(plan: GemmPlan) -> torch.Tensor:
    a, b = plan.a, plan.b
    if a.shape[1] == 0:
        return ref.fp8_gemm_portable(a, b, plan.scale_a, plan.scale_b, plan.bias, plan.out_dtype)
    if a.device.type == "cpu":
        return _cpu(plan)
    n = b.shape[0]
    return scaled_mm_cuda(padded_codes(a), padded_codes(b, aligned(n)), plan.scale_a.contiguous(),
                          plan.scale_b.contiguous(), plan.bias, plan.out_dtype, plan.rowwise, n)


def scaled_mm_cuda(a_p, b_p, scale_a, scale_b, bias, out_dtype, rowwise, n, *,
                   fast_accumulation: bool = False):
    """``a_p`` (M, Kp) and ``b_p`` (Np, Kp) padded row-major codes; scales and bias unpadded;
    returns the (M, n) output. ``fast_accumulation``: ``_scaled_mm``'s ``use_fast_accum`` (the
    fused linear's opt-in, never the slot's: docs/fp8_execute.md, "Accumulation")."""
    m, n_p = a_p.shape[0], b_p.shape[0]
    if rowwise and out_dtype == torch.bfloat16:
        scale_b_p, bias_p = scale_b, bias
        if n_p != n:
            scale_b_p = torch.ones(n_p, dtype=torch.float32, device=a_p.device)
            scale_b_p[:n] = scale_b
            if bias is not None:
                bias_p = torch.zeros(n_p, dtype=bias.dtype, device=a_p.device)
                bias_p[:n] = bias
        out = torch._scaled_mm(a_p, b_p.t(), scale_a=scale_a, scale_b=scale_b_p.reshape(1, n_p),
                               bias=bias_p, out_dtype=torch.bfloat16,
                               use_fast_accum=fast_accumulation)
        return out[:, :n]
    one = torch.ones((), dtype=torch.float32, device=a_p.device)
    acc = torch._scaled_mm(a_p, b_p.t(), scale_a=one, scale_b=one, out_dtype=torch.float32,
                           use_fast_accum=fast_accumulation)
    from .fp8_launch import epilogue
    from .fp8_plan import EpiloguePlan

    row = scale_a if rowwise else scale_a.expand(m, 1)
    col = scale_b if rowwise else scale_b.expand(n)
    return epilogue(EpiloguePlan(acc[:, :n], row, col, bias, False, out_dtype))


def _cpu(plan: GemmPlan) -> torch.Tensor:
    """On CPU per-tensor scales go in as rowwise ones, the scale repeated per row and column:
    torch 2.13's CPU ``_scaled_mm`` takes 0-dim scales down a path about 1,000x slower than
    (M, 1) and (1, N) ones (benchmarks/NOTES.md, "The CPU tensorwise GEMM")."""
    m, n = plan.a.shape[0], plan.b.shape[0]
    if plan.rowwise:
        scale_a, scale_b = plan.scale_a, plan.scale_b.view(1, n)
    else:
        scale_a = plan.scale_a.reshape(1, 1).expand(m, 1).contiguous()
        scale_b = plan.scale_b.reshape(1, 1).expand(1, n).contiguous()
    return torch._scaled_mm(plan.a, plan.b.t(), scale_a=scale_a, scale_b=scale_b,
                            bias=plan.bias, out_dtype=plan.out_dtype)

"""Checks of ``ms_deform_attn_ragged`` implementations shared by the interpreter checks and the
CUDA tests: which pixel discrete sampling reads, and the discrete sum's proven bound."""

import torch

from conformance.catalogue.ms_deform_attn_ragged import draw_inputs
from conformance.inputs.layouts import bits
from libreyolo.kernels.attention.ms_deform_attn import ms_deform_attn_ragged_portable


def one_point_per_query(args):
    """The same call with each query's weight on one point only (query j on point j mod P), so
    every output row is exactly one pixel's value: which pixel was read shows bit for bit."""
    value, shapes, locations, weights, points, method = args
    hot = torch.arange(weights.shape[1], device=weights.device).remainder(
        max(weights.shape[-1], 1))
    one_hot = torch.nn.functional.one_hot(hot, weights.shape[-1]).to(weights.dtype)
    return value, shapes, locations, one_hot[None, :, None, :].expand_as(weights), points, method


def pixel_mismatches(fn, case, dtype, device="cpu") -> int:
    """Output elements where ``fn`` read another pixel than the portable path in ``dtype``,
    on the case's raw locations (near-ties left where they fall)."""
    args = one_point_per_query(draw_inputs(case.params, dtype, seed=11, device=device,
                                           unambiguous=False))
    want = ms_deform_attn_ragged_portable(*args)
    got = fn(*args)
    return int((bits(got) != bits(want)).sum())


def discrete_sum_excess(fn, case, dtype, device="cpu") -> float:
    """How far ``fn`` is beyond the discrete contract's proven bound, as a multiple of it (<= 1:
    within). The float64 portable path on the same pixels is the exact sum E; the kernel's
    float32 sum of P rounded products is within gamma_P * S of it (S = sum |w * v|, Higham's
    dot-product bound, gamma_n = n u / (1 - n u), u = 2**-24), plus one rounding to the output
    dtype: |out - E| <= gamma_P * S + u_out * (|E| + gamma_P * S)."""
    args = draw_inputs(case.params, dtype, seed=12, device=device)
    value, shapes, locations, weights, points, method = args
    wide = [t.double() for t in (value, locations, weights)]
    exact = ms_deform_attn_ragged_portable(wide[0], shapes, wide[1], wide[2], points, method)
    magnitude = ms_deform_attn_ragged_portable(wide[0].abs(), shapes, wide[1], wide[2].abs(),
                                               points, method)
    n_u = sum(points) * 2.0**-24
    summed = n_u / (1 - n_u) * magnitude
    bound = summed + torch.finfo(dtype).eps / 2 * (exact.abs() + summed)
    error = (fn(*args).double() - exact).abs()
    return float((error / bound.clamp_min(torch.finfo(torch.float64).tiny)).max()) \
        if error.numel() else 0.0

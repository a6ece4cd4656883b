"""The fused attention path's bounded contract, and the broken SDPAs it must reject.

A call site's fused output (the module with ``fused_attn`` on) is compared with its manual path
run in float64 on the same weights and inputs (the oracle). Its largest error must be at most
``K`` times the manual path's own error in the same dtype, plus ``FLOOR_ULPS`` units of the dtype's
epsilon times the oracle's largest magnitude (``conformance.schema.bounds.bounded_limit``, the
rule every bounded check uses).

Why these numbers (measured on CPU, torch 2.13, every call site at the evidence sizes, seed 0):
the fused error over the manual error was 0.84-1.24 in float32 and 0.52-1.14 in bfloat16, and the
manual error was never zero (4e-8 to 5e-7 in float32), so every site passed with a margin of 4.0x
or more. ``K = 4`` leaves room for CUDA's fused kernels, which accumulate in another order;
``FLOOR_ULPS = 4`` only matters if the manual error is ever zero. The broken controls exceeded the
bound by 2.5e4x to 8e8x (or produced NaN, which fails): moving the scale past a bias changes the
logits by the bias times (1 - s), an O(1) change.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from conformance.reporting.attention_evidence import prepared
from conformance.schema.bounds import bounded_limit

K = 4.0
FLOOR_ULPS = 4.0


@dataclass(frozen=True)
class Verdict:
    site: str
    dtype: torch.dtype
    error: float
    manual_error: float
    bound: float

    @property
    def passed(self) -> bool:
        return self.error <= self.bound  # NaN fails

    def __str__(self) -> str:
        return (f"{self.site} {self.dtype}: fused error {self.error:.3g}, manual error "
                f"{self.manual_error:.3g}, bound {self.bound:.3g}")


def _run(site, dtype, device, fused: bool, seed: int) -> torch.Tensor:
    module, args, kwargs = prepared(site, dtype=dtype, device=device, seed=seed, fused_attn=fused)
    with torch.no_grad():
        return module(*args, **kwargs).double()


def oracle(site, device, seed: int = 0) -> torch.Tensor:
    """The manual path in float64: the numbers the fused path is judged against."""
    return _run(site, torch.float64, device, False, seed)


def bounded_check(site, dtype, device, expected: torch.Tensor, seed: int = 0) -> Verdict:
    """Judge the fused path of ``site`` in ``dtype`` against ``expected`` (``oracle``)."""
    manual_error = (_run(site, dtype, device, False, seed) - expected).abs().max().item()
    error = (_run(site, dtype, device, True, seed) - expected).abs().max().item()
    limit = bounded_limit(manual_error, expected.abs().max().item(), torch.finfo(dtype).eps, K,
                          FLOOR_ULPS)
    return Verdict(site.id, dtype, error, manual_error, limit)


def _additive(mask, like):
    if mask is None:
        return torch.zeros((), dtype=like.dtype, device=like.device)
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=like.dtype, device=like.device).masked_fill(
            ~mask, float("-inf"))
    return mask


def scale_after_bias(q, k, v, attn_mask=None, scale=None):
    """The scale applied to the logits after the bias is added: softmax((qk^T + b) * s) v."""
    return (((q @ k.transpose(-2, -1)) + _additive(attn_mask, q)) * scale).softmax(-1) @ v


def scale_on_values(q, k, v, attn_mask=None, scale=None):
    """The scale applied to the values instead of the logits: softmax(qk^T + b) (v * s)."""
    return ((q @ k.transpose(-2, -1)) + _additive(attn_mask, q)).softmax(-1) @ (v * scale)


def mask_after_softmax(q, k, v, attn_mask=None, scale=None):
    """The mask applied to the probabilities: (softmax(qk^T s) + b) v, a boolean mask zeroing
    them without renormalizing."""
    probs = ((q @ k.transpose(-2, -1)) * scale).softmax(-1)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        return probs.masked_fill(~attn_mask, 0.0) @ v
    return (probs + _additive(attn_mask, q)) @ v


def _has_finite_bias(site) -> bool:
    return site.module in ("window", "tinyvit")


def _has_mask(site) -> bool:
    return _has_finite_bias(site) or site.mask != "none"


# (name, broken sdpa, the call sites where the break changes the result, why)
CONTROLS = (
    ("scale_after_bias", scale_after_bias, _has_finite_bias,
     "bounded: a finite bias (relative position, TinyViT offsets, Swin's -100) is scaled too"),
    ("scale_on_values", scale_on_values, lambda site: True,
     "bounded: the logits are unscaled and the output is scaled by s"),
    ("mask_after_softmax", mask_after_softmax, _has_mask,
     "bounded: masked keys keep their probability mass"),
)

"""The slot's ``bounded`` parity check, forward and all three gradients.

An implementation's error against the float64 portable core must be at most ``K`` times the
error of the portable core run in the implementation's input dtype, plus a floor at the
output's rounding magnitude (``FLOOR_ULPS`` units of the dtype's epsilon times the reference's
largest magnitude): flash-attention's criterion, with the numbers written down.

Why these numbers (measured with ``TRITON_INTERPRET=1`` on the shape set's 10 small cases x 3
seeds): the Triton kernels' error over the portable float32 error was at most 2.75 for the output
and each gradient (float16 inputs: at most 1.0, the kernels compute in float32). ``K = 8`` leaves
about 3x margin for the GPU's different summation orders (fma contraction, atomic adds in the
backward). The portable error was never zero there, but can be on a lucky input (a 1x1 level read
at its centre is exact); ``FLOOR_ULPS = 8`` dtype epsilons of the largest reference magnitude
covers that, far below what a broken control makes: bf16 accumulation errs by ~2^-9 relative
(~2^14 float32 epsilons), the geometric breaks (align_corners, H/W swap, a dropped point) by O(1).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from conformance.schema.bounds import bounded_limit
from libreyolo.kernels.attention.ms_deform_attn.portable import ms_deform_attn_portable
from libreyolo.kernels.slots import MSDA_BOUND

K, FLOOR_ULPS = MSDA_BOUND.k, MSDA_BOUND.floor  # declared with the slot
QUANTITIES = ("output", "grad_value", "grad_sampling_locations", "grad_attention_weights")


@dataclass(frozen=True)
class Verdict:
    """One quantity's errors against float64 and the bound the implementation had to meet."""

    quantity: str
    error: float
    portable_error: float
    bound: float

    @property
    def passed(self) -> bool:
        return self.error <= self.bound


def _run(fn, value, spatial_shapes, sampling_locations, attention_weights, grad_output, dtype):
    """Output and the three input gradients of ``fn`` on inputs cast to ``dtype``."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in
              (value, sampling_locations, attention_weights)]
    out = fn(leaves[0], spatial_shapes, leaves[1], leaves[2])
    if out.numel():
        out.backward(grad_output.to(out.dtype))
    grads = [leaf.grad if leaf.grad is not None else torch.zeros_like(leaf) for leaf in leaves]
    return [t.detach().double() for t in (out, *grads)]


def _max_abs(t: torch.Tensor) -> float:
    return t.abs().max().item() if t.numel() else 0.0


def bounded_check(fn, value, spatial_shapes, sampling_locations, attention_weights, *,
                  k: float = K, floor_ulps: float = FLOOR_ULPS, seed: int = 0):
    """Compare ``fn`` (the slot's signature, differentiable) with the portable core.

    Inputs are taken in their own dtype; the reference is the portable core in float64 on the
    same values. Returns one :class:`Verdict` per quantity in :data:`QUANTITIES`.
    """
    dtype = value.dtype
    generator = torch.Generator().manual_seed(seed)
    batch, _, heads, channels = value.shape
    grad_output = torch.randn(batch, sampling_locations.shape[1], heads * channels,
                              generator=generator, dtype=torch.float64).to(value.device)
    reference = _run(ms_deform_attn_portable, value, spatial_shapes, sampling_locations,
                     attention_weights, grad_output, torch.float64)
    portable = _run(ms_deform_attn_portable, value, spatial_shapes, sampling_locations,
                    attention_weights, grad_output, dtype)
    candidate = _run(fn, value, spatial_shapes, sampling_locations, attention_weights,
                     grad_output, dtype)
    eps = torch.finfo(dtype).eps
    verdicts = []
    for name, ref, port, cand in zip(QUANTITIES, reference, portable, candidate, strict=True):
        if cand.shape != ref.shape:
            raise ValueError(f"{name}: implementation gave shape {tuple(cand.shape)}, "
                             f"expected {tuple(ref.shape)}")
        portable_error = _max_abs(port - ref)
        bound = bounded_limit(portable_error, _max_abs(ref), eps, k, floor_ulps)
        verdicts.append(Verdict(name, _max_abs(cand - ref), portable_error, bound))
    return verdicts

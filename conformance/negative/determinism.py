"""Negative controls for the repeatability check (`conformance/test_determinism.py`): backwards
whose gradients change from run to run under ``torch.use_deterministic_algorithms(True)``.

Judged by that test, not by the matrix (their numbers are within every bounded contract): the
list is ``DETERMINISM_CONTROLS``. Each wraps a repeatable implementation (the Triton one on
CUDA, the portable path on CPU, where the check is demonstrated) and breaks only its backward.
"""

from __future__ import annotations

import itertools

import torch

from conformance.negative import breaks
from conformance.running.determinism import deterministic_algorithms
from libreyolo.kernels.attention.ms_deform_attn.portable import (
    ms_deform_attn_portable,
    ms_deform_attn_ragged_portable,
)

_runs = itertools.count()


def _repeatable(slot: str, on_cuda: bool):
    """The implementation a control breaks: the Triton one on CUDA, the portable path on CPU."""
    if not on_cuda:
        return ms_deform_attn_portable if slot == "ms_deform_attn" else \
            ms_deform_attn_ragged_portable
    if slot == "ms_deform_attn":
        from libreyolo.kernels.attention.ms_deform_attn import triton_provider

        return triton_provider.ms_deform_attn_triton
    from libreyolo.kernels.attention.ms_deform_attn import ragged_triton_provider

    return ragged_triton_provider.ms_deform_attn_ragged_triton


def _rewired(slot: str, backward):
    """The slot's repeatable implementation with its backward replaced by ``backward(grads)``,
    ``grads()`` computing the three gradients as it would."""

    def control(value, spatial_shapes, sampling_locations, attention_weights, *rest):
        base = _repeatable(slot, value.is_cuda)

        class Rewired(torch.autograd.Function):
            @staticmethod
            def forward(ctx, v, loc, w):
                with torch.enable_grad():
                    leaves = [t.detach().requires_grad_() for t in (v, loc, w)]
                    out = base(leaves[0], spatial_shapes, leaves[1], leaves[2], *rest)
                ctx.inner = out, leaves
                return out.detach()

            @staticmethod
            def backward(ctx, grad):
                out, leaves = ctx.inner
                return tuple(backward(lambda: list(torch.autograd.grad(
                    out, leaves, grad, allow_unused=True))))

        return Rewired.apply(value, sampling_locations, attention_weights)

    return control


def _nudged(grads):
    """The value gradient with one element moved by one ulp, a different element each run."""
    value_grad = grads()
    flat = value_grad[0].contiguous().clone().view(-1)
    if flat.numel():
        i = next(_runs) % flat.numel()
        flat[i] = torch.nextafter(flat[i], torch.tensor(float("inf"), dtype=flat.dtype,
                                                        device=flat.device))
    return [flat.view_as(value_grad[0]), *value_grad[1:]]


def _atomic(grads):
    """The gradients as the atomic backward gives them, whatever the mode."""
    with deterministic_algorithms(False):
        return grads()


value_gradient_nudged = breaks("ms_deform_attn")(_rewired("ms_deform_attn", _nudged))
ragged_value_gradient_nudged = breaks("ms_deform_attn_ragged")(
    _rewired("ms_deform_attn_ragged", _nudged))
atomic_backward_in_deterministic_mode = breaks("ms_deform_attn")(
    _rewired("ms_deform_attn", _atomic))
ragged_atomic_backward_in_deterministic_mode = breaks("ms_deform_attn_ragged")(
    _rewired("ms_deform_attn_ragged", _atomic))
# float32 atomic adds repeat on CPU and in the interpreter (one order): GPU-only controls
atomic_backward_in_deterministic_mode.gpu_only = True
ragged_atomic_backward_in_deterministic_mode.gpu_only = True

DETERMINISM_CONTROLS = [
    ("value_gradient_nudged", value_gradient_nudged,
     "repeatable: the value gradient moved by one ulp at a run-dependent element"),
    ("ragged_value_gradient_nudged", ragged_value_gradient_nudged,
     "repeatable: the value gradient moved by one ulp at a run-dependent element"),
    ("atomic_backward_in_deterministic_mode", atomic_backward_in_deterministic_mode,
     "repeatable: float32 atomic adds into the value gradient (their order varies on a GPU)"),
    ("ragged_atomic_backward_in_deterministic_mode",
     ragged_atomic_backward_in_deterministic_mode,
     "repeatable: float32 atomic adds into the value gradient (their order varies on a GPU)"),
]

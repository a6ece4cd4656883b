"""Reference fake-quantization ops: the definition every accelerated implementation must match.

Each op quantizes and dequantizes in float32 (see `docs/quantization.md` for the rules), returns a
tensor of the input's dtype and shape, and has the straight-through backward: the gradient is
`torch.where(mask, grad, 0)`, with the op's mask stated in its docstring. `ste_mask` computes
that mask without autograd, for building expected gradients. Scales get no gradient.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from libreyolo.quant import quantizers
from libreyolo.quant.numerics import canonical_nan_like
from libreyolo.quant.straight_through import StraightThrough


def _forward_values(x: torch.Tensor, result: quantizers.Quantized) -> torch.Tensor:
    """The quantizer's values cast back to x's dtype, NaN inputs as the canonical NaN."""
    out = result.values.to(x.dtype)
    return torch.where(torch.isnan(x), canonical_nan_like(x.dtype, x.device), out)


class _QuantizerStep:
    """The straight-through step of a reference: forward ``_forward_values``, backward the
    gradient where the quantizer's mask is set, else 0."""

    @staticmethod
    def forward(x, quantizer, args, kwargs):
        result = quantizer(x, *args, **kwargs)
        return _forward_values(x, result), (result.mask,), None

    @staticmethod
    def backward(saved, state, grad, *extra):
        (mask,) = saved
        return torch.where(mask, grad, 0.0)


_QUANTIZER_STEP = _QuantizerStep()


def _fake_quant(quantizer: Callable[..., quantizers.Quantized], x, *args, **kwargs):
    """The autograd function only where a gradient can flow: it is a Python callback that
    ``torch.jit.trace`` records as an opaque ``prim::PythonOp`` and the ONNX exporters cannot
    translate, so an inference input (finalized models, exports) gets the plain tensor math."""
    if isinstance(x, torch.Tensor) and x.requires_grad and torch.is_grad_enabled():
        return StraightThrough.apply(x, _QUANTIZER_STEP, quantizer, args, kwargs)
    return _forward_values(x, quantizer(x, *args, **kwargs))


def fake_quant_int8_per_channel(x: torch.Tensor, scale: torch.Tensor, axis: int = 0):
    """Symmetric int8 per channel: clamp(round(x / scale), -127, 127) * scale.

    `scale`: 1-D float32 of length x.shape[axis]. Mask: -127 <= round(x / scale) <= 127, False
    for NaN/inf inputs and zero-scale channels. A zero code is +0.0 (integers have no -0).
    """
    return _fake_quant(quantizers.int8_per_channel, x, scale, axis)


def fake_quant_int8_affine(x: torch.Tensor, scale: torch.Tensor, zero_point):
    """Affine int8 per tensor: (clamp(round(x / scale) + zp, -128, 127) - zp) * scale.

    `scale`: 0-dim float32; `zero_point`: int in [-128, 127]. Mask: -128 <= round(x / scale) + zp
    <= 127, False for NaN/inf inputs and a zero scale.
    """
    return _fake_quant(quantizers.int8_affine, x, scale, zero_point)


def fake_quant_fp8(x: torch.Tensor, scale=None, *, fmt: str = "e4m3", axis=None):
    """FP8 (E4M3 or E5M2, both saturating): clamp(round_fp8(x / scale), -max, max) * scale.

    `scale` 0-dim: per tensor; 1-D with `axis`: per channel; None: per row along the last dim,
    scale = finite row amax / max (1 when that amax is 0). Mask: |round_fp8(x / scale)| <= max
    (rounded on the unbounded grid), False for NaN/inf inputs and a zero scale.
    """
    return _fake_quant(quantizers.fp8, x, scale, fmt=fmt, axis=axis)


def fake_quant_int_grouped(w: torch.Tensor, bits: int, group_size: int):
    """Symmetric intN (N = 2, 4, 8) per group of `group_size` along dim 1 of a 2-D weight.

    scale = finite group amax / (2^(N-1) - 1) (1 when that amax is 0), ragged last group. Mask:
    |round(w / scale)| <= 2^(N-1) - 1, False for NaN/inf and zero (underflowed) scales.
    """
    return _fake_quant(quantizers.int_grouped, w, bits, group_size)


def fake_quant_nvfp4_weight(w: torch.Tensor, global_amax=None):
    """NVFP4 on a 2-D weight: E2M1 values in blocks of 16 along dim 1, E4M3 block scales.

    s_t = amax / 2688 (amax = `global_amax` or the finite amax of w; 1 when 0), s_b =
    E4M3(block amax / (6 s_t)) saturated at 448 (1 for an all-zero block), scale s_b * s_t.
    Mask: |round_e2m1(w / scale)| <= 6, False for NaN/inf and zero (underflowed) scales.
    """
    return _fake_quant(quantizers.nvfp4_weight, w, global_amax)


def fake_quant_nvfp4_dynamic(x: torch.Tensor):
    """NVFP4 on activations: as the weight op, blocks of 16 along the last dim, s_t from x.

    Mask: |round_e2m1(x / scale)| <= 6, False for NaN/inf and zero (underflowed) scales.
    """
    return _fake_quant(quantizers.nvfp4_dynamic, x)


def fake_quant_mxfp4_weight(w: torch.Tensor):
    """MXFP4 on a 2-D weight: E2M1 values in blocks of 32 along dim 1, E8M0 scales.

    scale = 2^clamp(floor(log2(finite block amax)) - 2, -127, 127) (1 for amax 0).
    Mask: |round_e2m1(w / scale)| <= 6, False for NaN/inf inputs.
    """
    return _fake_quant(quantizers.mxfp4_weight, w)


def fake_quant_mxfp4_dynamic(x: torch.Tensor):
    """MXFP4 on activations: as the weight op, blocks of 32 along the last dim of any rank.

    Mask: |round_e2m1(x / scale)| <= 6, False for NaN/inf inputs.
    """
    return _fake_quant(quantizers.mxfp4_dynamic, x)


def fake_quant_mxfp8_weight(w: torch.Tensor):
    """MXFP8 on a 2-D weight: E4M3 values in blocks of 32 along dim 1, E8M0 scales.

    scale = 2^clamp(floor(log2(finite block amax)) - 8, -127, 127) (1 for amax 0).
    Mask: |round_e4m3(w / scale)| <= 448, False for NaN/inf inputs.
    """
    return _fake_quant(quantizers.mxfp8_weight, w)


def fake_quant_mxfp8_dynamic(x: torch.Tensor):
    """MXFP8 on activations: as the weight op, blocks of 32 along the last dim of any rank.

    Mask: |round_e4m3(x / scale)| <= 448, False for NaN/inf inputs.
    """
    return _fake_quant(quantizers.mxfp8_dynamic, x)


_QUANTIZER_OF_OP = {
    "fake_quant_int8_per_channel": quantizers.int8_per_channel,
    "fake_quant_int8_affine": quantizers.int8_affine,
    "fake_quant_fp8": quantizers.fp8,
    "fake_quant_int_grouped": quantizers.int_grouped,
    "fake_quant_nvfp4_weight": quantizers.nvfp4_weight,
    "fake_quant_nvfp4_dynamic": quantizers.nvfp4_dynamic,
    "fake_quant_mxfp4_weight": quantizers.mxfp4_weight,
    "fake_quant_mxfp4_dynamic": quantizers.mxfp4_dynamic,
    "fake_quant_mxfp8_weight": quantizers.mxfp8_weight,
    "fake_quant_mxfp8_dynamic": quantizers.mxfp8_dynamic,
}
FAKE_QUANT_OPS = tuple(_QUANTIZER_OF_OP)


def ste_mask(op: str, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """The straight-through mask of fake-quant op `op` (by name) for these arguments, no autograd.

    The expected gradient of `op(x, *args, **kwargs)` for an upstream gradient g is
    `torch.where(ste_mask(op, x, *args, **kwargs), g, 0)`.
    """
    if op not in _QUANTIZER_OF_OP:
        raise ValueError(f"op must be one of {FAKE_QUANT_OPS}, got {op!r}")
    return _QUANTIZER_OF_OP[op](x, *args, **kwargs).mask

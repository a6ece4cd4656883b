"""Argument checks, written from the rules in LibreYOLO's docs/quantization.md (rules 1, 7, 13):
the same exception types as the reference, each message naming the argument. The conformance
suite's error cells hold every implementation to them."""

from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_x(x) -> None:
    if not isinstance(x, torch.Tensor) or x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"x must be a float32, float16 or bfloat16 tensor, got "
                        f"{getattr(x, 'dtype', type(x).__name__)}")


def check_scale(scale, shape: tuple, device: torch.device) -> None:
    """A float32 tensor of exactly `shape` on `device`, finite and non-negative."""
    if not isinstance(scale, torch.Tensor):
        raise TypeError(f"scale must be a tensor, got {type(scale).__name__}")
    if scale.dtype != torch.float32:
        raise TypeError(f"scale must be float32, got {scale.dtype}")
    if tuple(scale.shape) != shape:
        raise ValueError(f"scale must have shape {shape}, got {tuple(scale.shape)}")
    if scale.device != device:
        raise ValueError(f"scale must be on x's device {device}, got {scale.device}")
    if not bool((torch.isfinite(scale) & (scale >= 0)).all()):
        raise ValueError("scale must be finite and non-negative")

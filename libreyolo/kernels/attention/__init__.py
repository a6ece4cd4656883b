"""Attention kernels: the ``ms_deform_attn`` slot (``ms_deform_attn/``) and the fused-SDPA policy.

Fused scaled-dot-product attention needs only stock PyTorch, so it is a policy, not a registry
slot. Modules that can use it carry a boolean ``fused_attn`` flag (timm's convention, so timm
modules are flipped too); ``set_fused_attention`` flips it and ``fused_attention_modules`` lists
it. Each family's default is generated evidence (``families.py``). Whatever the flag says, a graph
captured for ONNX or TorchScript keeps the manual equation (``manual_attention_required``).
Importing this package imports no triton.
"""

from __future__ import annotations

import torch
from torch import nn

from .families import family, fused_attention_default

__all__ = [
    "family",
    "fused_attention_default",
    "fused_attention_modules",
    "manual_attention_required",
    "set_fused_attention",
]

FLAG = "fused_attn"


def manual_attention_required() -> bool:
    """True while a graph is captured for ONNX export (either exporter) or by ``torch.jit.trace``.

    Not the registry's capture check (``libreyolo.capture.is_capturing``), which is also true under
    ``torch.compile`` and ``torch.export``: those lower SDPA themselves, so flagged modules keep
    their fused path there. ``torch.onnx.export(..., dynamo=True)`` runs ``torch.export`` with
    ``torch.onnx.is_in_onnx_export()`` true (measured with torch 2.13 and checked by
    ``tests/attention/test_fused_export.py``), so it falls on the manual side like the TorchScript
    exporter: the ONNX graph holds the family's own equation, not the exporter's decomposition of
    SDPA, which scales q and k by sqrt(scale) each.
    """
    return torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()


def _root(model) -> nn.Module:
    if isinstance(model, nn.Module):
        return model
    inner = getattr(model, "model", None)
    if isinstance(inner, nn.Module):
        return inner
    raise TypeError(f"model: expected a torch.nn.Module or an object whose .model is one, got "
                    f"{type(model).__name__}")


def fused_attention_modules(model) -> list[tuple[str, bool]]:
    """``(qualified name, fused_attn)`` for every module under ``model`` that carries the flag."""
    return [(name, getattr(module, FLAG)) for name, module in _root(model).named_modules()
            if isinstance(getattr(module, FLAG, None), bool)]


def set_fused_attention(model, enabled: bool = True) -> int:
    """Set ``fused_attn`` to ``enabled`` on every flagged module of ``model`` (a module, or an
    object with a ``.model`` module); return how many modules changed state."""
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled: expected a bool, got {type(enabled).__name__}")
    switched = 0
    for _, module in _root(model).named_modules():
        if isinstance(getattr(module, FLAG, None), bool) and getattr(module, FLAG) != enabled:
            setattr(module, FLAG, enabled)
            switched += 1
    return switched

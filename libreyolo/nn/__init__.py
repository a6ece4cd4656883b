"""Modules that call kernel slots and keep their portable path."""

from .attention import (
    QKVAttention,
    SeparateProjAttention,
    SpatialReductionAttention,
    TinyViTAttention,
    WindowAttention,
)
from .finalized import FinalizedConv2d, FinalizedLinear, FinalizedMLP
from .ms_deform_attn import MSDeformAttn

__all__ = [
    "FinalizedConv2d",
    "FinalizedLinear",
    "FinalizedMLP",
    "MSDeformAttn",
    "QKVAttention",
    "SeparateProjAttention",
    "SpatialReductionAttention",
    "TinyViTAttention",
    "WindowAttention",
]

"""Modules that call kernel slots and keep their portable path."""

from .ms_deform_attn import MSDeformAttn

__all__ = ["MSDeformAttn"]
from .attention import QKVAttention, SeparateProjAttention, SpatialReductionAttention, TinyViTAttention, WindowAttention  # noqa: E402, E501, I001
__all__ += ["QKVAttention", "SeparateProjAttention", "SpatialReductionAttention", "TinyViTAttention", "WindowAttention"]  # noqa: E501

"""Modules that call kernel slots and keep their portable path."""

from .ms_deform_attn import MSDeformAttn

__all__ = ["MSDeformAttn"]

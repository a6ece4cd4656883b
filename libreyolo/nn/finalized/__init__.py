"""Finalized layers: packed low-precision weights, a portable forward (docs/finalized_models.md).

Importing this package imports neither triton nor anything that needs CUDA: a finalized
checkpoint loads and runs anywhere.
"""

from .formats import ACTIVATION_FORMATS, WEIGHT_FORMATS
from .mlp import FinalizedMLP
from .modules import FinalizedConv2d, FinalizedLinear

__all__ = ["ACTIVATION_FORMATS", "WEIGHT_FORMATS", "FinalizedConv2d", "FinalizedLinear",
           "FinalizedMLP"]

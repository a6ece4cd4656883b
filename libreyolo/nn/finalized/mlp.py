"""``FinalizedMLP``: a transformer block's MLP, ``fc2(act(fc1(x)))``, over two finalized linears.

A module of its own because, on CUDA, two FP8 layers around GELU run faster as one path than as
two: GELU folded into fc2's prologue (``fp8_mlp``), fc1's output read once for GELU, the row amax
and fc2's codes, where two fused layers need a GELU pass between them (the ViT-L MLP at 1024 px:
docs/performance.md, "FP8 MLP, prologue and epilogue"). Everywhere else it is
exactly its two layers' forwards with the activation between them.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from libreyolo.capture import EXPORT, graph_capture

from .modules import FinalizedLinear

ACTIVATIONS = {"gelu": F.gelu, "relu": F.relu, "silu": F.silu}


class FinalizedMLP(nn.Module):
    """``FinalizedMLP(fc1, fc2, activation="gelu")``: ``fc2(activation(fc1(x)))`` for two
    ``FinalizedLinear`` layers, fc1's ``out_features`` being fc2's ``in_features``;
    ``activation``: 'gelu' (the exact, erf form), 'relu' or 'silu'. Its state dict is the two
    layers' under ``fc1.`` and ``fc2.``.

    Eager on CUDA, with 'gelu' between two layers of weight 'fp8' with dynamic activation scales
    ('fp8_dynamic'), the folded path runs where the FP8 policy engages both layers
    (``_fused``). fc2's codes then come from the fold's own GELU (within 1e-5 relative of
    exact), quantized from float32 where the layers' path rounds GELU's output to bf16 first, so
    that output is not the layers' bit for bit; it is at least as close to the float64 MLP
    (docs/fp8_execute.md, "Fusing the ViT MLP's GELU"). Otherwise (CPU, any capture or export,
    other formats or activations, the policy's other shapes): ``fc2(act(fc1(x)))``, each layer
    taking its own path.
    """

    def __init__(self, fc1: FinalizedLinear, fc2: FinalizedLinear, activation: str = "gelu"):
        super().__init__()
        for name, layer in (("fc1", fc1), ("fc2", fc2)):
            if not isinstance(layer, FinalizedLinear):
                raise TypeError(f"{name} must be a FinalizedLinear, got {type(layer).__name__}")
        if fc1.out_features != fc2.in_features:
            raise ValueError(f"fc1.out_features ({fc1.out_features}) must equal "
                             f"fc2.in_features ({fc2.in_features})")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got "
                             f"{activation!r}")
        self.fc1, self.fc2, self.activation = fc1, fc2, activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # eager, or the fused operator under torch.compile; never in an export
        on_cuda = isinstance(x, torch.Tensor) and x.is_cuda and graph_capture() != EXPORT
        fused = self._fused(x) if on_cuda else None
        if fused is not None:
            return fused
        return self.fc2(ACTIVATIONS[self.activation](self.fc1(x)))

    def _fused(self, x: torch.Tensor) -> torch.Tensor | None:
        """The folded FP8 path (``fp8_mlp``) for 'gelu' between two 'fp8'/'fp8_dynamic' layers;
        None where it does not engage."""
        if self.activation != "gelu" or not all(
                layer.weight_format == "fp8" and layer.activation_format == "fp8_dynamic"
                for layer in (self.fc1, self.fc2)):
            return None
        self.fc1._check_input(x)
        return _fp8_mlp()(x, *((layer.codes, layer.scale, layer.bias)
                               for layer in (self.fc1, self.fc2)))

    def extra_repr(self) -> str:
        return f"activation={self.activation!r}"


@functools.cache
def _fp8_mlp():
    """The folded FP8 MLP, imported on the first eager CUDA call (loading needs neither triton
    nor CUDA)."""
    from libreyolo.kernels.quant.execute.fp8_linear import fp8_mlp

    return fp8_mlp

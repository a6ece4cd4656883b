"""Which Triton launches compile to PTX, and so may take ``triton_arithmetic``'s PTX arithmetic.
Imports no triton: a provider asks this at plan time and names ``triton_arithmetic``'s source
(which imports triton) in its digested sources without importing it."""

from __future__ import annotations

from pathlib import Path

import torch

#: ``triton_arithmetic``'s source: a provider whose kernels use it lists it in its sources.
ARITHMETIC_SOURCE = str(Path(__file__).resolve().with_name("triton_arithmetic.py"))


def compiles_to_ptx(device: torch.device) -> bool:
    """Whether kernels launched on ``device`` are compiled to PTX (an NVIDIA GPU): never on CPU
    tensors (the interpreter) or under ROCm."""
    return device.type == "cuda" and not torch.version.hip

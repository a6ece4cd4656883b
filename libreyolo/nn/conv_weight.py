"""A convolution's weight as the matrix the quantizers see, and back: one layout for the quantized
(QAT) and the finalized (packed) layers, so a round trip between them is op for op the same."""

from __future__ import annotations

import torch


def conv_weight_as_matrix(weight: torch.Tensor) -> torch.Tensor:
    """(out, in/groups, kh, kw) -> (out * kh * kw, in/groups): input channels last, so a block
    or group of a weight format runs along input channels, as a linear layer's does."""
    return weight.permute(0, 2, 3, 1).reshape(-1, weight.shape[1])


def matrix_as_conv_weight(matrix: torch.Tensor, out_channels: int,
                          kernel_size: tuple[int, int]) -> torch.Tensor:
    """The inverse of :func:`conv_weight_as_matrix`, with the standard strides: ``.contiguous()``
    keeps a 1x1 kernel's permuted strides (size-1 dims pass as contiguous), and the CPU
    convolution reads them as channels-last, choosing another algorithm with other bits than an
    ``nn.Conv2d`` weight gets."""
    kh, kw = kernel_size
    weight = matrix.reshape(out_channels, kh, kw, matrix.shape[1]).permute(0, 3, 1, 2)
    return weight.clone(memory_format=torch.contiguous_format)

"""A layer's input fake-quantized on the view of it that needs no layout copy.

The fake-quant slots work on contiguous rows: a slot handed a strided view copies it first, and
a convolution then wants its input back in the input's own memory format, a second copy. Both
the quantized layers (QAT, simulated PTQ) and the finalized layers quantize their input here, so
the two compute op for op the same thing (the round trip's bits).

- A **per-pixel** format (per row, per block) quantizes each pixel's channels, so it needs the
  channels last: a convolution's input is quantized as ``x.movedim(channels, -1)`` (a free view
  of a channels-last input; for a contiguous one the slot copies it) and handed back in ``x``'s
  memory format.
- A **per-tensor** format quantizes each element alone, so every view of ``x`` gives the same
  bits: it quantizes ``x`` in memory order, the channels-last view for a channels-last input.

On a YOLO-like stack in channels-last memory this takes the layout copies out of a QAT step
(benchmarks/NOTES.md, "QAT steps under CUDA graphs").
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def quantize_input(x: torch.Tensor, quantize: Callable[[torch.Tensor], torch.Tensor], *,
                   per_pixel: bool, channels_last: bool) -> torch.Tensor:
    """``quantize`` applied to layer input ``x`` (module docstring). ``channels_last``: the
    layer's input already has its channels last (a Linear); else ``x`` is a convolution's
    ``(C, H, W)`` or ``(N, C, H, W)`` input."""
    if channels_last or not (per_pixel or _pixels_major(x)):
        return quantize(x)
    # dims counted from the front: the TorchScript ONNX exporter mistranslates a negative
    # movedim (a Transpose with perm -3)
    channels, last = x.dim() - 3, x.dim() - 1
    quantized = quantize(x.movedim(channels, last)).movedim(last, channels)
    return quantized.contiguous() if x.is_contiguous() else quantized


def _pixels_major(x: torch.Tensor) -> bool:
    """Whether ``x`` lies in channels-last memory and not in contiguous memory (a tensor with
    one channel or one pixel is both, and is quantized as it is)."""
    return x.dim() == 4 and not x.is_contiguous() and \
        x.is_contiguous(memory_format=torch.channels_last)

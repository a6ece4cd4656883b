"""What callers use: may the slot run here, and run it if an implementation takes the input.

The slot has no reference; a caller keeps its portable path and takes it whenever
:func:`maybe_ms_deform_attn` returns ``None``. Each helper asks its slot through one
``BoundSlot`` (``libreyolo.kernels.bound``): a decoder calls with the same description every
step, and the selection is worked out once per description.
"""

from __future__ import annotations

from libreyolo.capture import EXPORT, graph_capture
from libreyolo.kernels.bound import BoundSlot

SLOT = "ms_deform_attn"
_SLOT = BoundSlot(SLOT)


def can_use_slot() -> bool:
    """False while a graph is captured for export (trace, export, ONNX export): exported graphs
    must contain the portable math, never a Triton or runtime-fetched kernel. Under
    ``torch.compile`` the slot is its operator (``libreyolo.kernels.operators``)."""
    return graph_capture() != EXPORT


def maybe_ms_deform_attn(value, spatial_shapes, sampling_locations, attention_weights):
    """The slot's output from the first eligible implementation that takes this input, or None.

    Arguments are the slot's: value ``(B, len_in, heads, C)``, spatial_shapes ``(H, W)`` pairs
    of ints or a ``(levels, 2)`` int64 tensor (either reaches the kernels),
    sampling_locations ``(B, len_q, heads, levels, points, 2)``, attention_weights
    ``(B, len_q, heads, levels, points)``. Bad input raises the portable core's errors.
    """
    if not can_use_slot():
        return None
    return _SLOT(value, spatial_shapes, sampling_locations, attention_weights)


RAGGED_SLOT = "ms_deform_attn_ragged"
_RAGGED_SLOT = BoundSlot(RAGGED_SLOT)


def maybe_ms_deform_attn_ragged(value, spatial_shapes, sampling_locations, attention_weights,
                                points_per_level, method="bilinear"):
    """The ragged slot's output from the first eligible implementation that takes this input, or
    None (then the caller runs ``ms_deform_attn_ragged_portable``). Arguments as
    :func:`~libreyolo.kernels.attention.ms_deform_attn.portable.ms_deform_attn_ragged`."""
    if not can_use_slot():
        return None
    return _RAGGED_SLOT(value, spatial_shapes, sampling_locations, attention_weights,
                        points_per_level, method)

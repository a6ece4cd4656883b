"""``MSDeformAttn``: Deformable-DETR's multi-scale deformable attention module.

Its eager forward consults the ``ms_deform_attn`` slot on every call (the consult is not hidden
behind any condition of the module's own) and runs the portable core when no implementation takes
the input or a graph is being captured, so exported graphs hold only portable ops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from libreyolo.capture import is_capturing
from libreyolo.kernels.attention.ms_deform_attn import (
    maybe_ms_deform_attn,
    ms_deform_attn_portable,
)
from libreyolo.kernels.attention.ms_deform_attn.levels import (
    device_shapes,
    known_levels,
    level_shapes,
    offset_normalizer,
)


class MSDeformAttn(nn.Module):
    """Each query attends to ``n_points`` learned locations per head and level around its
    reference point, with learned weights (softmax over levels x points).

    Args:
        d_model: query and value width; divisible by ``n_heads``.
        n_levels: feature levels in the flattened value.
        n_heads: attention heads.
        n_points: sampling points per head and level.
    """

    def __init__(self, d_model: int = 256, n_levels: int = 4, n_heads: int = 8,
                 n_points: int = 4):
        super().__init__()
        for name, n in {"d_model": d_model, "n_levels": n_levels, "n_heads": n_heads,
                        "n_points": n_points}.items():
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"{name} must be a positive int, got {n!r}")
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.d_model, self.n_levels, self.n_heads, self.n_points = (
            d_model, n_levels, n_heads, n_points)
        self.sampling_offsets = nn.Linear(d_model, n_heads * n_levels * n_points * 2)
        self.attention_weights = nn.Linear(d_model, n_heads * n_levels * n_points)
        self.value_proj = nn.Linear(d_model, d_model)
        self.output_proj = nn.Linear(d_model, d_model)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Deformable DETR's init: offsets start as a ring of points, one direction per head,
        the k-th point k times further out; uniform attention; Xavier projections."""
        nn.init.zeros_(self.sampling_offsets.weight)
        angles = torch.arange(self.n_heads, dtype=torch.float32) * (2 * math.pi / self.n_heads)
        ring = torch.stack([angles.cos(), angles.sin()], -1)
        ring = ring / ring.abs().max(-1, keepdim=True).values
        ring = ring.view(self.n_heads, 1, 1, 2).repeat(1, self.n_levels, self.n_points, 1)
        ring = ring * torch.arange(1, self.n_points + 1, dtype=torch.float32).view(1, 1, -1, 1)
        with torch.no_grad():
            self.sampling_offsets.bias.copy_(ring.flatten())
        nn.init.zeros_(self.attention_weights.weight)
        nn.init.zeros_(self.attention_weights.bias)
        for proj in (self.value_proj, self.output_proj):
            nn.init.xavier_uniform_(proj.weight)
            nn.init.zeros_(proj.bias)

    def forward(self, query, reference_points, value, spatial_shapes, level_start_index=None,
                value_padding_mask=None):
        """
        Args:
            query: ``(B, len_q, d_model)``.
            reference_points: ``(B, len_q, n_levels, 2)`` normalized ``(x, y)`` in ``[0, 1]``,
                or ``(B, len_q, n_levels, 4)`` boxes ``(cx, cy, w, h)``.
            value: ``(B, len_in, d_model)``, the levels flattened and concatenated.
            spatial_shapes: ``(n_levels, 2)`` int64 tensor of ``(H, W)`` (or a sequence of pairs,
                which keeps the level sizes static in exported graphs).
            level_start_index: accepted for call compatibility with the Deformable-DETR
                families; the offsets follow from ``spatial_shapes``, so it is not read.
            value_padding_mask: ``(B, len_in)`` bool, True where value is padding (zeroed).
        Returns:
            ``(B, len_q, d_model)``.
        """
        del level_start_index  # derivable from spatial_shapes; accepted for family call sites
        self._check_arguments(query, reference_points, value, spatial_shapes, value_padding_mask)
        batch, len_q, _ = query.shape
        len_in = value.shape[1]
        heads, levels, points = self.n_heads, self.n_levels, self.n_points
        value = self.value_proj(value)
        if value_padding_mask is not None:
            value = value.masked_fill(value_padding_mask[..., None], 0.0)
        value = value.view(batch, len_in, heads, self.d_model // heads)
        offsets = self.sampling_offsets(query).view(batch, len_q, heads, levels, points, 2)
        weights = self.attention_weights(query).view(batch, len_q, heads, levels * points)
        weights = weights.softmax(-1).view(batch, len_q, heads, levels, points)
        locations = self._sampling_locations(reference_points, offsets, spatial_shapes)
        # Under autocast the projections give float16/bfloat16 while softmax and the reference
        # points stay float32; the slot takes one dtype, so all three take the widest.
        dtype = torch.promote_types(torch.promote_types(value.dtype, locations.dtype),
                                    weights.dtype)
        value, locations, weights = value.to(dtype), locations.to(dtype), weights.to(dtype)
        out = maybe_ms_deform_attn(value, spatial_shapes, locations, weights)
        if out is None:
            out = ms_deform_attn_portable(value, spatial_shapes, locations, weights)
        return self.output_proj(out)

    def _check_arguments(self, query, reference_points, value, spatial_shapes,
                         value_padding_mask) -> None:
        """Shapes and dtypes from metadata only (no host sync), each error naming its argument."""
        named = {"query": query, "reference_points": reference_points, "value": value}
        for name, tensor in named.items():
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
            if tensor.layout != torch.strided or not tensor.is_floating_point():
                raise TypeError(f"{name} must be a dense floating-point tensor, got a "
                                f"{str(tensor.dtype).removeprefix('torch.')} tensor of layout "
                                f"{str(tensor.layout).removeprefix('torch.')}")
        self._check_dtypes(query, reference_points, value)
        for name, tensor in (("query", query), ("value", value)):
            if tensor.dim() != 3 or tensor.shape[2] != self.d_model:
                raise ValueError(f"{name} must have shape (batch, length, d_model={self.d_model}),"
                                 f" got {tuple(tensor.shape)}")
        batch, len_q, len_in = query.shape[0], query.shape[1], value.shape[1]
        if value.shape[0] != batch:
            raise ValueError(f"value has batch {value.shape[0]}, query has batch {batch}")
        if reference_points.dim() != 4 or reference_points.shape[-1] not in (2, 4) or \
                tuple(reference_points.shape[:3]) != (batch, len_q, self.n_levels):
            raise ValueError(
                "reference_points must have shape (batch, len_q, n_levels, 2) points (x, y) or "
                f"(batch, len_q, n_levels, 4) boxes (cx, cy, w, h) = ({batch}, {len_q}, "
                f"{self.n_levels}, 2 or 4), got {tuple(reference_points.shape)}")
        if isinstance(spatial_shapes, torch.Tensor):
            if spatial_shapes.dim() != 2 or spatial_shapes.shape[1] != 2:
                raise ValueError("spatial_shapes must have shape (levels, 2), got "
                                 f"{tuple(spatial_shapes.shape)}")
            levels = spatial_shapes.shape[0]
        elif isinstance(spatial_shapes, Sequence) and not isinstance(spatial_shapes, str):
            levels = len(spatial_shapes)
        else:
            raise TypeError("spatial_shapes must be a (levels, 2) int64 tensor or (H, W) pairs "
                            f"of ints, got {type(spatial_shapes).__name__}")
        if levels != self.n_levels:
            raise ValueError(f"spatial_shapes describes {levels} levels, the module was built "
                             f"for n_levels={self.n_levels}")
        if value_padding_mask is None:
            return
        if not isinstance(value_padding_mask, torch.Tensor) or \
                value_padding_mask.dtype != torch.bool:
            got = getattr(value_padding_mask, "dtype", type(value_padding_mask).__name__)
            raise TypeError("value_padding_mask must be a bool tensor (True where value is "
                            f"padding), got {got}")
        if tuple(value_padding_mask.shape) != (batch, len_in):
            raise ValueError(f"value_padding_mask must have shape (batch, len_in) = ({batch}, "
                             f"{len_in}), got {tuple(value_padding_mask.shape)}")

    def _check_dtypes(self, query, reference_points, value) -> None:
        """Outside autocast the projections need their input in the parameters' dtype, and the
        result must come back in it (``output_proj``): a float64 query into a float32 module is
        the caller's error, named here rather than inside ``F.linear``."""
        dtype = self.value_proj.weight.dtype
        if torch.is_autocast_enabled(query.device.type):
            return
        for name, tensor in (("query", query), ("value", value)):
            if tensor.dtype != dtype:
                raise TypeError(f"{name} has dtype {str(tensor.dtype).removeprefix('torch.')}, "
                                f"the module's parameters {str(dtype).removeprefix('torch.')}: "
                                "convert one of them (or run under torch.autocast)")
        if torch.promote_types(reference_points.dtype, dtype) != dtype:
            raise TypeError(f"reference_points has dtype "
                            f"{str(reference_points.dtype).removeprefix('torch.')}, wider than "
                            f"the module's parameters ({str(dtype).removeprefix('torch.')})")

    def _sampling_locations(self, reference_points, offsets, spatial_shapes):
        """Offsets are in pixels of each level (points) or in fractions of the box (boxes)."""
        reference = reference_points[:, :, None, :, None, :]
        if reference_points.shape[-1] == 4:
            return reference[..., :2] + offsets / self.n_points * reference[..., 2:] * 0.5
        if is_capturing():  # no memo: the graph computes the normalizer from its own sizes
            if not isinstance(spatial_shapes, torch.Tensor):
                spatial_shapes = torch.tensor(level_shapes(spatial_shapes), dtype=torch.int64)
            return reference + offsets / _normalizer(spatial_shapes, offsets)
        levels = known_levels(spatial_shapes)
        if levels is not None and (normalizer := offset_normalizer(
                levels, offsets.device, offsets.dtype)) is not None:
            return reference + offsets / normalizer
        if not isinstance(spatial_shapes, torch.Tensor) or spatial_shapes.device != offsets.device:
            # pairs (or a tensor elsewhere): the copy on the device made once, where a fresh
            # copy would sync every call
            spatial_shapes = device_shapes(level_shapes(spatial_shapes), offsets.device)
            if spatial_shapes is None:
                raise RuntimeError("spatial_shapes pairs first seen during a CUDA graph capture "
                                   "(copying them would sync): warm up outside the capture")
        return reference + offsets / _normalizer(spatial_shapes, offsets)


def _normalizer(spatial_shapes: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Each level's ``(W, H)`` (x offsets are divided by widths), shaped to divide the offsets."""
    normalizer = spatial_shapes.to(device=offsets.device, dtype=offsets.dtype).flip(-1)
    return normalizer[None, None, None, :, None, :]

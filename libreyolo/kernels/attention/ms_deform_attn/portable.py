"""Portable multi-scale deformable attention: the parity oracle and every caller's fallback.

Plain PyTorch (``grid_sample``, bilinear, zero padding, ``align_corners=False``), so it runs on any
device and dtype (float64 included), traces, scripts and exports. The slot's layout is the classic
Deformable-DETR one; :func:`ms_deform_attn_ragged` adds what families need and the slot does not
take (a different point count per level, discrete nearest-pixel sampling): its own slot,
``ms_deform_attn_ragged``, whose portable path is :func:`ms_deform_attn_ragged_portable`.

Coordinate convention (the one ``grid_sample(align_corners=False)`` uses): a location ``u`` in
``[0, 1]`` on a level of width ``W`` samples pixel coordinate ``u * W - 0.5``, so ``u = 0`` and
``u = 1`` are the outer edges of the border pixels and ``(i + 0.5) / W`` is the centre of pixel
``i``. Locations outside ``[0, 1]`` are legal and read zeros beyond the border; so does a
location with a non-finite coordinate.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .dispatch import maybe_ms_deform_attn_ragged
from .levels import level_shapes

SpatialShapes = torch.Tensor | Sequence[Sequence[int]]

SAMPLING_METHODS = ("bilinear", "discrete")


def _check_tensors(value, sampling_locations, attention_weights) -> None:
    """Types, dtypes and devices shared by both layouts."""
    named = {
        "value": value,
        "sampling_locations": sampling_locations,
        "attention_weights": attention_weights,
    }
    for name, tensor in named.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.layout != torch.strided:
            raise TypeError(f"{name} must be a dense (strided) tensor, got layout "
                            f"{str(tensor.layout).removeprefix('torch.')}")
        if not tensor.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {tensor.dtype}")
    for name, tensor in named.items():
        if tensor.dtype != value.dtype:
            raise TypeError(f"{name} has dtype {tensor.dtype}, value has {value.dtype}: "
                            "value, sampling_locations and attention_weights must share a dtype")
        if tensor.device != value.device:
            raise ValueError(f"{name} is on {tensor.device}, value is on {value.device}: "
                             "all tensors must be on one device")
    if value.dim() != 4:
        raise ValueError(
            f"value must have shape (batch, len_in, heads, channels), got {tuple(value.shape)}"
        )


def _check_len_in(value: torch.Tensor, shapes: list[tuple[int, int]] | None) -> None:
    if shapes is None:  # sizes not readable here (a fake tensor): the real call checks them
        return
    total = sum(h * w for h, w in shapes)
    if value.shape[1] != total:
        raise ValueError(f"value has len_in={value.shape[1]} but spatial_shapes {shapes} sum to "
                         f"sum(H*W)={total}")


def _has_layout(tensor: torch.Tensor, sizes: dict[int, int], ndim: int) -> bool:
    """Whether ``tensor`` has ``ndim`` dimensions and the given size at each listed dimension."""
    return tensor.dim() == ndim and all(tensor.shape[d] == n for d, n in sizes.items())


def validate_inputs(value, spatial_shapes, sampling_locations, attention_weights):
    """Check the slot's layout; return the levels' ``(H, W)`` pairs.

    Raises ``TypeError`` for wrong types and dtypes and ``ValueError`` for wrong shapes, a
    ``len_in`` that is not ``sum(H*W)``, or tensors on different devices, naming the argument.
    """
    _check_tensors(value, sampling_locations, attention_weights)
    shapes = level_shapes(spatial_shapes)
    _check_len_in(value, shapes)
    batch, _, heads, _ = value.shape
    levels = len(shapes) if shapes is not None else spatial_shapes.shape[0]
    if not _has_layout(sampling_locations, {0: batch, 2: heads, 3: levels, 5: 2}, ndim=6):
        raise ValueError(
            "sampling_locations must have shape (batch, len_q, heads, levels, points, 2) = "
            f"({batch}, len_q, {heads}, {levels}, points, 2), "
            f"got {tuple(sampling_locations.shape)}"
        )
    if tuple(attention_weights.shape) != tuple(sampling_locations.shape[:5]):
        raise ValueError(
            "attention_weights must have shape (batch, len_q, heads, levels, points) = "
            f"{tuple(sampling_locations.shape[:5])}, got {tuple(attention_weights.shape)}"
        )
    return shapes


def validate_ragged_inputs(value, spatial_shapes, sampling_locations, attention_weights,
                           points_per_level, method="bilinear"):
    """Check the ragged slot's layout; return the levels' ``(H, W)`` pairs and point counts.

    The errors of :func:`validate_inputs`, and for ``points_per_level`` (a count per level, each
    an int, not a bool) and ``method`` (one of ``SAMPLING_METHODS``).
    """
    _check_tensors(value, sampling_locations, attention_weights)
    shapes = level_shapes(spatial_shapes)
    _check_len_in(value, shapes)
    if not isinstance(method, str) or method not in SAMPLING_METHODS:
        raise ValueError(f"method must be one of {SAMPLING_METHODS}, got {method!r}")
    points = check_points_per_level(points_per_level)
    levels = len(shapes) if shapes is not None else spatial_shapes.shape[0]
    if len(points) != levels or any(n < 0 for n in points):
        raise ValueError(f"points_per_level must give a non-negative count for each of the "
                         f"{levels} levels, got {list(points_per_level)}")
    batch, _, heads, _ = value.shape
    if not _has_layout(sampling_locations, {0: batch, 2: heads, 3: sum(points), 4: 2}, ndim=5):
        raise ValueError(
            "sampling_locations must have shape (batch, len_q, heads, sum(points_per_level), 2) "
            f"= ({batch}, len_q, {heads}, {sum(points)}, 2), got {tuple(sampling_locations.shape)}"
        )
    if tuple(attention_weights.shape) != tuple(sampling_locations.shape[:4]):
        raise ValueError(
            "attention_weights must have shape (batch, len_q, heads, sum(points_per_level)) = "
            f"{tuple(sampling_locations.shape[:4])}, got {tuple(attention_weights.shape)}"
        )
    return shapes, points


def check_points_per_level(points_per_level) -> list[int]:
    """``points_per_level`` as a list of ints; a TypeError for anything that is not a sequence
    of ints (a float would be truncated, a bool counted as 0 or 1)."""
    if isinstance(points_per_level, (str, bytes, torch.Tensor)) or \
            not isinstance(points_per_level, Sequence):
        raise TypeError("points_per_level must be a sequence of ints, got "
                        f"{type(points_per_level).__name__}")
    for n in points_per_level:
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"points_per_level must hold ints, got {n!r} "
                            f"({type(n).__name__}) in {list(points_per_level)}")
    return [int(n) for n in points_per_level]


# Where a coordinate is not finite, the location moves here: a whole level outside, where every
# bilinear corner reads zero.
OUTSIDE = -1.0


def _sample_bilinear(level: torch.Tensor, locations: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) x (N, Q, P, 2) in [0, 1] -> (N, C, Q, P), zeros outside the level.

    A non-finite coordinate (NaN, +-inf) reads zero and gets a zero gradient, like a location
    outside the level (``grid_sample`` alone would give NaN). Deformable DETR's compiled op does
    the same (its bounds test is false for NaN and inf), and so does the Triton implementation.
    """
    locations = torch.where(torch.isfinite(locations), locations, OUTSIDE)
    return F.grid_sample(level, 2 * locations - 1, mode="bilinear", padding_mode="zeros",
                         align_corners=False)


def _sample_discrete(level: torch.Tensor, locations: torch.Tensor) -> torch.Tensor:
    """Nearest-pixel gather, clamped to the border: RT-DETRv2's ``method="discrete"``.

    The index is ``floor(u * size + 0.5)`` clamped to ``[0, size - 1]`` per axis; this is the
    convention of RT-DETRv2's ``deformable_attention_core_func_v2`` (a format fact, cited so that
    checkpoints trained with it keep their meaning).
    """
    n, c, h, w = level.shape
    size = torch.tensor([w, h], dtype=locations.dtype, device=locations.device)
    index = torch.floor(locations * size + 0.5).to(torch.int64)
    x = index[..., 0].clamp(0, max(w - 1, 0))
    y = index[..., 1].clamp(0, max(h - 1, 0))
    flat = (y * w + x).reshape(n, 1, -1).expand(n, c, -1)
    return level.reshape(n, c, h * w).gather(2, flat).reshape(n, c, *locations.shape[1:3])


_SAMPLERS = {"bilinear": _sample_bilinear, "discrete": _sample_discrete}


def _attend(value, shapes, points, sampling_locations, attention_weights, method):
    """The shared core over the ragged layout: sample each level, weight, sum over all points."""
    batch, _, heads, channels = value.shape
    len_q = sampling_locations.shape[1]
    sample = _SAMPLERS[method]
    # (batch, len_in, heads, C) -> per level (batch * heads, C, H, W), contiguous: with batch 1
    # and one level the reshape below is a strided view, which torch's CPU grid_sample reads
    # wrongly in float16 and bfloat16 (NaN; torch 2.11 and 2.13)
    levels = value.split([h * w for h, w in shapes], dim=1)
    # (batch, len_q, heads, points, 2) -> (batch * heads, len_q, points, 2)
    locations = sampling_locations.transpose(1, 2).flatten(0, 1).split(points, dim=2)
    sampled = torch.cat([
        sample(level.permute(0, 2, 3, 1).reshape(batch * heads, channels, h, w).contiguous(),
               loc)
        for level, (h, w), loc in zip(levels, shapes, locations, strict=True)
    ], dim=3)
    weights = attention_weights.transpose(1, 2).reshape(batch * heads, 1, len_q, sum(points))
    out = (sampled * weights).sum(dim=3)
    # (batch * heads, C, len_q) -> (batch, len_q, heads * C)
    return out.reshape(batch, heads * channels, len_q).transpose(1, 2).contiguous()


def ms_deform_attn_portable(value, spatial_shapes, sampling_locations, attention_weights):
    """The slot in plain PyTorch.

    value ``(batch, len_in, heads, C)``; spatial_shapes ``(levels, 2)`` int64 ``(H, W)`` (a
    sequence of pairs also works, which keeps exported graphs free of a tensor-to-int read);
    sampling_locations ``(batch, len_q, heads, levels, points, 2)`` as ``(x, y)`` in ``[0, 1]``;
    attention_weights ``(batch, len_q, heads, levels, points)``. Returns ``(batch, len_q, heads*C)``
    in value's dtype.
    """
    shapes = validate_inputs(value, spatial_shapes, sampling_locations, attention_weights)
    n_points = sampling_locations.shape[4]
    return _attend(value, shapes, [n_points] * len(shapes), sampling_locations.flatten(3, 4),
                   attention_weights.flatten(3, 4), "bilinear")


def ms_deform_attn_ragged_portable(value, spatial_shapes, sampling_locations, attention_weights,
                                   points_per_level, method="bilinear"):
    """Deformable attention with a point count per level, bilinear or discrete sampling, in plain
    PyTorch: the ``ms_deform_attn_ragged`` slot's portable path (the numbers' definition).

    The layout RT-DETRv2 uses: sampling_locations ``(batch, len_q, heads, sum(points), 2)`` and
    attention_weights ``(batch, len_q, heads, sum(points))``, level 0's points first.
    """
    shapes, points = validate_ragged_inputs(value, spatial_shapes, sampling_locations,
                                      attention_weights, points_per_level, method)
    return _attend(value, shapes, points, sampling_locations, attention_weights, method)


def ms_deform_attn_ragged(value, spatial_shapes, sampling_locations, attention_weights,
                          points_per_level, method="bilinear"):
    """What families call: the ``ms_deform_attn_ragged`` slot when an implementation takes the
    input (never while a graph is captured), else :func:`ms_deform_attn_ragged_portable`."""
    out = maybe_ms_deform_attn_ragged(value, spatial_shapes, sampling_locations,
                                      attention_weights, points_per_level, method)
    if out is not None:
        return out
    return ms_deform_attn_ragged_portable(value, spatial_shapes, sampling_locations,
                                          attention_weights, points_per_level, method)

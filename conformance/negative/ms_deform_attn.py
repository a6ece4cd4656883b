"""Negative controls for the ms_deform_attn slot's bounded contract.

Each is the portable core broken in exactly one way, with the slot's signature (and autograd,
so the gradient checks see them too). The suite must reject every one: a check that passes a
control is too weak to trust.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from libreyolo.kernels.attention.ms_deform_attn.portable import (
    level_shapes,
    ms_deform_attn_portable,
)


def align_corners_flipped(value, spatial_shapes, sampling_locations, attention_weights):
    """Samples with ``align_corners=True``: locations map to ``u * (W - 1)``, not ``u * W - 0.5``.
    On a 1x1 level the two agree only at its centre."""
    shapes = level_shapes(spatial_shapes)
    batch, _, heads, channels = value.shape
    len_q, levels, points = sampling_locations.shape[1], len(shapes), sampling_locations.shape[4]
    sampled = []
    for level, ((h, w), chunk) in enumerate(zip(shapes, value.split([h * w for h, w in shapes], 1),
                                                strict=True)):
        grid = 2 * sampling_locations[:, :, :, level].transpose(1, 2).flatten(0, 1) - 1
        image = chunk.permute(0, 2, 3, 1).reshape(batch * heads, channels, h, w)
        sampled.append(F.grid_sample(image, grid, mode="bilinear", padding_mode="zeros",
                                     align_corners=True))
    weights = attention_weights.transpose(1, 2).reshape(batch * heads, 1, len_q, levels * points)
    out = (torch.cat(sampled, dim=3) * weights).sum(3)
    return out.reshape(batch, heads * channels, len_q).transpose(1, 2)


def height_width_swapped(value, spatial_shapes, sampling_locations, attention_weights):
    """Reads each level as (W, H): invisible on square levels, wrong everywhere else."""
    swapped = [(w, h) for h, w in level_shapes(spatial_shapes)]
    return ms_deform_attn_portable(value, swapped, sampling_locations, attention_weights)


def accumulates_in_bf16(value, spatial_shapes, sampling_locations, attention_weights):
    """Sums the weighted samples point by point in a bfloat16 accumulator."""
    levels, points = sampling_locations.shape[3:5]
    acc = torch.zeros(1, dtype=torch.bfloat16, device=value.device)
    for k in range(levels * points):
        level, point = divmod(k, points)
        only = torch.zeros_like(attention_weights)
        only[:, :, :, level, point] = 1
        term = ms_deform_attn_portable(value, spatial_shapes, sampling_locations,
                                       attention_weights * only)
        acc = acc + term.to(torch.bfloat16)
    return acc.to(value.dtype)


def drops_last_point(value, spatial_shapes, sampling_locations, attention_weights):
    """Ignores the last sampling point of the last level."""
    keep = torch.ones_like(attention_weights)
    keep[..., -1, -1] = 0
    return ms_deform_attn_portable(value, spatial_shapes, sampling_locations,
                                   attention_weights * keep)


CONTROLS = [
    ("align_corners_flipped", align_corners_flipped,
     "bounded: output vs float64 portable (geometry differs by up to half a pixel)"),
    ("height_width_swapped", height_width_swapped,
     "bounded: output vs float64 portable on a non-square level"),
    ("accumulates_in_bf16", accumulates_in_bf16,
     "bounded: output error vs k x portable float32 error + floor (bf16 rounding ~2^-9)"),
    ("drops_last_point", drops_last_point,
     "bounded: output and grad_attention_weights vs float64 portable"),
]

"""Negative controls for the ms_deform_attn_ragged slot's bounded contract.

Each is the portable helper broken in exactly one way, with the slot's signature (and autograd,
so the gradient checks see them too). The suite must reject every one.
"""

from __future__ import annotations

import torch

from libreyolo.kernels.attention.ms_deform_attn.portable import (
    level_shapes,
    ms_deform_attn_ragged_portable,
)


def points_on_wrong_level(value, spatial_shapes, sampling_locations, attention_weights,
                          points_per_level, method="bilinear"):
    """Counts one point of the last sampled level as its predecessor's: a boundary between
    levels' points off by one, which samples that point on the wrong level."""
    points = list(points_per_level)
    last = max((i for i, n in enumerate(points) if n), default=0)
    if last > 0:
        points[last - 1] += 1
        points[last] -= 1
    return ms_deform_attn_ragged_portable(value, spatial_shapes, sampling_locations,
                                          attention_weights, points, method)


def nearest_rounding_off_by_one(value, spatial_shapes, sampling_locations, attention_weights,
                                points_per_level, method="bilinear"):
    """Discrete sampling rounded down instead of to the nearest pixel: ``floor(u * W)`` where
    the rule is ``floor(u * W + 0.5)`` (by sampling half a pixel to the left and above);
    bilinear sampling is untouched."""
    if method != "discrete":
        return ms_deform_attn_ragged_portable(value, spatial_shapes, sampling_locations,
                                              attention_weights, points_per_level, method)
    half_pixel = torch.tensor([[0.5 / w, 0.5 / h] for (h, w), n in
                               zip(level_shapes(spatial_shapes), points_per_level, strict=True)
                               for _ in range(n)], dtype=sampling_locations.dtype,
                              device=sampling_locations.device)
    return ms_deform_attn_ragged_portable(value, spatial_shapes, sampling_locations - half_pixel,
                                          attention_weights, points_per_level, method)


def drops_last_level(value, spatial_shapes, sampling_locations, attention_weights,
                     points_per_level, method="bilinear"):
    """Ignores every point of the last level."""
    keep = torch.ones_like(attention_weights)
    keep[..., sum(points_per_level) - points_per_level[-1]:] = 0
    return ms_deform_attn_ragged_portable(value, spatial_shapes, sampling_locations,
                                          attention_weights * keep, points_per_level, method)


CONTROLS = [
    ("points_on_wrong_level", points_on_wrong_level,
     "bounded: output vs float64 portable (the moved point reads a level of another size)"),
    ("nearest_rounding_off_by_one", nearest_rounding_off_by_one,
     "bounded: output of discrete cases vs float64 portable (about half the points read the "
     "neighbouring pixel)"),
    ("drops_last_level", drops_last_level,
     "bounded: output and grad_attention_weights vs float64 portable"),
]

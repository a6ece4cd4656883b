"""An independent float64 deformable attention: explicit bilinear loops, one sample at a time.

Written from the definition, not from grid_sample: pixel coordinate ``u * size - 0.5``, the four
neighbours weighted by the fractional parts, neighbours outside the level read zero. Slow, so
only for tiny inputs.
"""

import math

import torch


def _pixel(level, y, x):
    """level[y, x] as a (C,) vector, or zeros outside the level (zero padding)."""
    height, width, _ = level.shape
    if 0 <= y < height and 0 <= x < width:
        return level[y, x]
    return torch.zeros(level.shape[2], dtype=level.dtype)


def bilinear(level, u, v):
    """Sample a (H, W, C) float64 level at normalized (u, v) with align_corners=False."""
    height, width, _ = level.shape
    x, y = u * width - 0.5, v * height - 0.5
    x0, y0 = math.floor(x), math.floor(y)
    fx, fy = x - x0, y - y0
    return ((1 - fx) * (1 - fy) * _pixel(level, y0, x0) + fx * (1 - fy) * _pixel(level, y0, x0 + 1)
            + (1 - fx) * fy * _pixel(level, y0 + 1, x0) + fx * fy * _pixel(level, y0 + 1, x0 + 1))


def nearest_clamped(level, u, v):
    """RT-DETRv2's discrete sampling: pixel floor(u * size + 0.5), clamped to the level."""
    height, width, _ = level.shape
    x = min(max(math.floor(u * width + 0.5), 0), width - 1)
    y = min(max(math.floor(v * height + 0.5), 0), height - 1)
    return level[y, x]


def deform_attn_loops(value, shapes, locations, weights, points_per_level, sample=bilinear):
    """value (B, len_in, heads, C); locations (B, Q, heads, sum(points), 2); weights (B, Q, heads,
    sum(points)) -> (B, Q, heads * C), all float64."""
    batch, _, heads, channels = value.shape
    queries = locations.shape[1]
    out = torch.zeros(batch, queries, heads, channels, dtype=torch.float64)
    starts = [0]
    for h, w in shapes:
        starts.append(starts[-1] + h * w)
    for b in range(batch):
        for q in range(queries):
            for m in range(heads):
                k = 0
                for level, ((h, w), count) in enumerate(zip(shapes, points_per_level, strict=True)):
                    grid = value[b, starts[level]:starts[level + 1], m].reshape(h, w, channels)
                    for _ in range(count):
                        u, v = locations[b, q, m, k].tolist()
                        out[b, q, m] += weights[b, q, m, k] * sample(grid, u, v)
                        k += 1
    return out.reshape(batch, queries, heads * channels)

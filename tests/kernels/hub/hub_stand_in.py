"""A stand-in for the Hub's ``deformable-detr`` build, made inside the tests: a tiny Python
package in the Hub layout (``build/torch-universal/``) whose ops have the compiled op's signature
and run in torch on CPU. It uses ``level_start_index`` and ``im2col_step`` as the compiled op does
(each level's rows start there; the batch must divide into steps), so a wrong adapter shows in
the numbers, and it records each call so a test can see it engaged.
"""

from __future__ import annotations

import json

from conformance.evidence.hub_cache import local_revision, write_variant

REPO = "kernels-community/deformable-detr"
NAME = "deformable-detr"
# the kernels package's noarch pure-Python variant: accepted on CPU and on CUDA machines
VARIANT = "torch-universal"

PACKAGE = '''
import torch
import torch.nn.functional as F

CALLS = []


def _check_step(batch, im2col_step):
    step = min(batch, im2col_step)
    if step < 1 or batch % step:
        raise RuntimeError(f"batch({batch}) must divide im2col_step({step})")


def ms_deform_attn_forward(value, spatial_shapes, level_start_index, sampling_loc, attn_weight,
                           im2col_step):
    CALLS.append(("forward", im2col_step))
    _check_step(value.shape[0], im2col_step)
    batch, _, heads, channels = value.shape
    _, queries, _, levels, points, _ = sampling_loc.shape
    total = 0
    for level in range(levels):
        height, width = spatial_shapes[level].tolist()
        start = int(level_start_index[level])
        rows = value[:, start:start + height * width]
        grid = rows.permute(0, 2, 3, 1).reshape(batch * heads, channels, height, width)
        where = sampling_loc[:, :, :, level].transpose(1, 2).reshape(batch * heads, queries,
                                                                     points, 2)
        sampled = F.grid_sample(grid, 2 * where - 1, mode="bilinear", padding_mode="zeros",
                                align_corners=False)
        weight = attn_weight[:, :, :, level].transpose(1, 2).reshape(batch * heads, 1, queries,
                                                                     points)
        total = total + (sampled * weight).sum(-1)
    return total.reshape(batch, heads, channels, queries).permute(0, 3, 1, 2).reshape(
        batch, queries, heads * channels)


def ms_deform_attn_backward(value, spatial_shapes, level_start_index, sampling_loc, attn_weight,
                            grad_output, im2col_step):
    CALLS.append(("backward", im2col_step))
    leaves = [t.detach().requires_grad_() for t in (value, sampling_loc, attn_weight)]
    with torch.enable_grad():
        out = ms_deform_attn_forward(leaves[0], spatial_shapes, level_start_index, leaves[1],
                                     leaves[2], im2col_step)
    CALLS.pop()
    return list(torch.autograd.grad(out, leaves, grad_output))
'''


def files(marker: str = "") -> dict[str, bytes]:
    """The variant's files; ``marker`` adds a line, making another (still valid) build."""
    metadata = {"id": "_deformable_detr_stand_in", "name": NAME, "version": 1,
                "license": "Apache-2.0", "python-depends": [], "backend": {"type": "cpu"}}
    return {"metadata.json": json.dumps(metadata).encode(),
            "deformable_detr/__init__.py": (PACKAGE + marker).encode()}


def build(cache, marker: str = "", revision: str | None = None):
    """(revision, variant folder) of the stand-in written into ``cache``; metadata.json gets a
    git SHA-1 blob name and the package a SHA-256 one, as on the Hub."""
    content = files(marker)
    revision = revision or local_revision(content, "stand-in")
    folder = write_variant(cache, REPO, revision, VARIANT, content,
                           git_addressed=("metadata.json",))
    return revision, folder

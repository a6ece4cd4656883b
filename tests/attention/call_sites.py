"""How each family of the lineage hands deformable attention over, and our documented call.

Each entry rebuilds one family's own tensors (the layout its public source builds, read for
docs/ms_deform_attn.md, "The lineage") from a shape-set case, and calls the public helper the way
that page tells the family to. Tests run every entry on CPU with a stand-in implementation, in
the interpreter and on the GPU with the Triton implementation, and check which one ran.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from conformance.inputs.ms_deform_attn_cases import load_cases, make_inputs
from libreyolo.kernels.attention.ms_deform_attn import (
    maybe_ms_deform_attn,
    ms_deform_attn_portable,
    ms_deform_attn_ragged,
)

CASES = {case.name: case for case in load_cases()}


@dataclass(frozen=True)
class CallSite:
    """One layout: who uses it, which shape-set case has it, their tensors and our call."""

    name: str
    families: str
    case: str
    to_native: Callable  # (case, value, locations, weights) -> the family's arguments
    call: Callable  # the family's arguments -> the output, through the public helpers


def _pairs(case, as_lists=False):
    return [list(level) if as_lists else tuple(level) for level in case.levels]


def _tensor(case, device):
    return torch.tensor(case.levels, dtype=torch.int64, device=device)


def _or_portable(out, value, shapes, locations, weights):
    return out if out is not None else ms_deform_attn_portable(value, shapes, locations, weights)


def _slot_call(value, shapes, locations, weights):
    return _or_portable(maybe_ms_deform_attn(value, shapes, locations, weights),
                        value, shapes, locations, weights)


def _flat_points_call(value, pairs, locations, weights, points_per_level, method="default"):
    """RT-DETRv2's core takes (B, Q, heads, sum(points), 2): the slot takes it when every level
    has the same point count and sampling is bilinear; otherwise the ragged core runs."""
    levels = len(points_per_level)
    if method == "default" and len(set(points_per_level)) == 1:
        shape = (levels, points_per_level[0])
        return _slot_call(value, pairs, locations.unflatten(3, shape), weights.unflatten(3, shape))
    return ms_deform_attn_ragged(value, pairs, locations, weights, points_per_level,
                                 "bilinear" if method == "default" else method)


CALL_SITES = [
    CallSite(
        "classic_tensor", "Deformable DETR, DINO, Grounding DINO, LW-DETR (CUDA-op path)",
        "detr_4level_mini",
        lambda case, v, loc, w: (v.contiguous(), _tensor(case, v.device), loc, w),
        _slot_call),
    CallSite(
        "channel_major_tensor", "RF-DETR, LW-DETR (export / half path)",
        "rf_detr_channel_major_mini",
        # value (B, heads, C, len_in), weights (B, Q, heads, levels * points)
        lambda case, v, loc, w: (v.permute(0, 2, 3, 1).contiguous(), _tensor(case, v.device),
                                 loc, w.flatten(3)),
        lambda v, shapes, loc, w: _slot_call(v.permute(0, 3, 1, 2), shapes, loc,
                                             w.unflatten(3, loc.shape[3:5]))),
    CallSite(
        "classic_pairs", "RT-DETR", "rt_detr_pairs_mini",
        lambda case, v, loc, w: (v.contiguous(), _pairs(case, as_lists=True), loc, w),
        _slot_call),
    CallSite(
        "flat_points_pairs", "RT-DETRv2, OV-DEIM (equal points per level)", "rt_detr_pairs_mini",
        lambda case, v, loc, w: (v.contiguous(), _pairs(case, as_lists=True), loc.flatten(3, 4),
                                 w.flatten(3), [case.points] * len(case.levels)),
        _flat_points_call),
    CallSite(
        "split_channel_major_pairs", "D-FINE, DEIM, DEIMv2, RT-DETRv4 (equal points per level)",
        "dfine_mini",
        # value split per level, each (B, heads, C, H*W); locations and weights flat
        lambda case, v, loc, w: (
            v.permute(0, 2, 3, 1).split([h * w_ for h, w_ in case.levels], dim=-1),
            _pairs(case, as_lists=True), loc.flatten(3, 4), w.flatten(3),
            [case.points] * len(case.levels)),
        lambda values, pairs, loc, w, points: _flat_points_call(
            torch.cat(values, -1).permute(0, 3, 1, 2), pairs, loc, w, points)),
]


def native_inputs(site: CallSite, dtype=torch.float32, device="cpu", seed=0):
    """The family's arguments for ``site``'s case, and the slot-layout inputs they came from."""
    case = CASES[site.case]
    value, shapes, locations, weights = make_inputs(case, dtype=dtype, device=device, seed=seed)
    return site.to_native(case, value, locations, weights), (value, shapes, locations, weights)

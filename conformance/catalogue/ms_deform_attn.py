"""Deformable-attention profiles (not SDPA, `libreyolo/nn/attention.py`, which is no slot):
bounded contracts against the caller's portable path run in float64.

The one kind, `deformable`, is multi-scale deformable attention in Deformable DETR's layout
(one point count for every level): it has no reference, its portable core is the slot's declared
portable path, its cases `conformance.inputs.ms_deform_attn_cases` and its bounded check (k and
floor justified) `conformance.running.ms_deform_attn_parity`.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from hypothesis import strategies as st

from conformance.inputs import ms_deform_attn_cases as msda_cases
from conformance.schema.spec import (
    TRITON_EXPECTATION,
    Case,
    Expectation,
    Inputs,
    SlotSpec,
    error_input,
    tensor,
)
from libreyolo.kernels.slots import get_slot


def _msda_inputs(case: Case, dtype: torch.dtype, layout: str, gen: torch.Generator) -> Inputs:
    msda_case = msda_cases.Case(case.name, case.source, case.size, **{
        **case.params, "levels": tuple(tuple(level) for level in case.params["levels"])})
    if layout == "gapped":
        msda_case = replace(msda_case, contiguous=False)
    seed = int(torch.randint(0, 2**31 - 1, (), generator=gen))
    return Inputs(msda_cases.make_inputs(msda_case, dtype=dtype, seed=seed), grad_args=(0, 2, 3))


def _msda_strategy():
    level = st.tuples(st.integers(1, 9), st.integers(1, 9)).map(list)
    return st.builds(
        lambda batch, levels, heads, channels, points, queries, locations, shapes, value: Case(
            "hypothesis", "hypothesis", "small",
            {"batch": batch, "levels": levels, "heads": heads, "channels": channels,
             "points": points, "queries": queries, "locations": locations,
             "spatial_shapes": shapes, "value": value}),
        st.integers(1, 3), st.lists(level, min_size=1, max_size=4), st.integers(1, 4),
        st.integers(1, 40), st.integers(1, 4), st.integers(0, 33),
        st.sampled_from(msda_cases.LOCATIONS), st.sampled_from(msda_cases.SPATIAL_SHAPES),
        st.sampled_from(msda_cases.VALUES))


# Error inputs: docs/ms_deform_attn.md ("Bad input raises from the portable core, naming the
# argument"), worded as the portable core's validate_inputs words them. The slot has no reference:
# an implementation raises, or declines so that the caller's portable path (after
# maybe_ms_deform_attn returns None) raises. A valid call: batch 1, levels (2, 3) and (1, 2)
# (len_in 8), 2 heads of 4 channels, 5 queries, 3 points.
MSDA_RULE = "docs/ms_deform_attn.md: the slot's layout; bad input raises naming the argument"
_MSDA_VALID = {"value": tensor((1, 8, 2, 4)),
               "spatial_shapes": tensor((2, 2), torch.int64, values=[2, 3, 1, 2]),
               "sampling_locations": tensor((1, 5, 2, 2, 3, 2)),
               "attention_weights": tensor((1, 5, 2, 2, 3))}


def _msda_error(name, error, match, failing=None, **bad):
    """The valid call with the arguments in `bad` replaced."""
    spec = error_input(name, error, match, MSDA_RULE, *{**_MSDA_VALID, **bad}.values())
    return replace(spec, failing=failing or {})


MSDA_ERRORS = (
    _msda_error("integer-value", TypeError, "value", value=tensor((1, 8, 2, 4), torch.int32)),
    _msda_error("3-d-value", ValueError, "value", value=tensor((8, 2, 4))),
    _msda_error("float64-attention-weights", TypeError, "attention_weights",
                attention_weights=tensor((1, 5, 2, 2, 3), torch.float64)),
    _msda_error("sampling-locations-on-another-device", ValueError, "sampling_locations",
                sampling_locations=tensor((1, 5, 2, 2, 3, 2), on="other")),
    _msda_error("float-spatial-shapes", TypeError, "spatial_shapes",
                spatial_shapes=tensor((2, 2), values=[2, 3, 1, 2])),
    _msda_error("spatial-shapes-of-three-columns", ValueError, "spatial_shapes",
                spatial_shapes=tensor((2, 3), torch.int64, values=[2, 3, 1, 1, 2, 1])),
    _msda_error("zero-height-level", ValueError, "spatial_shapes",
                spatial_shapes=tensor((2, 2), torch.int64, values=[0, 3, 1, 2])),
    _msda_error("len-in-not-the-levels-sum", ValueError, "len_in",
                value=tensor((1, 9, 2, 4))),
    _msda_error("sampling-locations-of-three-levels", ValueError, "sampling_locations",
                sampling_locations=tensor((1, 5, 2, 3, 3, 2))),
    _msda_error("attention-weights-of-four-points", ValueError, "attention_weights",
                attention_weights=tensor((1, 5, 2, 2, 4))),
)


def deformable(slot: str) -> SlotSpec:
    """Deformable DETR's layout (cases: `conformance/inputs/ms_deform_attn_cases.py`'s fields)."""
    layouts = frozenset(get_slot(slot).layouts)
    return SlotSpec(
        name=slot,
        make_inputs=_msda_inputs,
        strategy=_msda_strategy,
        # the Hub kernel (Deformable DETR's compiled op) is taken on CUDA, float32 only
        expects={"triton": TRITON_EXPECTATION,
                 "hub": Expectation(modes=frozenset({"cuda", "cuda-graph"}),
                                    dtypes=frozenset({torch.float32}), layouts=layouts),
                 "*": Expectation(modes=frozenset({"cpu", "cuda", "cuda-graph"}),
                                  layouts=layouts)},
        error_inputs=MSDA_ERRORS,
    )


PROFILES = {"deformable": deformable}

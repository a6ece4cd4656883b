"""Attention slots: bounded contracts against the caller's portable path run in float64.

`ms_deform_attn` has no reference; its portable core is `libreyolo.kernels.attention.
ms_deform_attn`, its cases and bounded check (k and floor justified) `conformance.ms_deform_attn`.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from hypothesis import strategies as st

from conformance.catalogue.spec import (
    FLOAT_DTYPES,
    TRITON_EXPECTATION,
    Case,
    Contract,
    Expectation,
    Inputs,
    SlotSpec,
)
from conformance.ms_deform_attn import cases as msda_cases
from conformance.ms_deform_attn import parity
from libreyolo.kernels.attention.ms_deform_attn.portable import ms_deform_attn_portable

MSDA_LAYOUTS = ("contiguous", "gapped")


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


SLOTS = [
    SlotSpec(
        name="ms_deform_attn",
        family="attention",
        signature="(value, spatial_shapes, sampling_locations, attention_weights)",
        reference=None,
        contract=Contract("bounded", k=parity.K, floor=parity.FLOOR_ULPS),
        shapes="ms_deform_attn.toml",
        make_inputs=_msda_inputs,
        strategy=_msda_strategy,
        portable=ms_deform_attn_portable,
        dtypes=FLOAT_DTYPES,
        layouts=MSDA_LAYOUTS,
        expects={"triton": TRITON_EXPECTATION,
                 "*": Expectation(modes=frozenset({"cpu", "cuda", "cuda-graph"}),
                                  layouts=frozenset(MSDA_LAYOUTS))},
    ),
]

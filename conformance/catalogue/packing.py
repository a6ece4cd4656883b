"""Unpack slots: packed checkpoint bytes to floats, exact (docs/checkpoint_format.md).

Inputs are real packed weights (packed by the reference packers from the fake-quant generators'
values) whose code bytes are then replaced by uniform random bytes, so every code point appears.
The case's dtype is the output dtype; there is no gradient.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

from conformance import generators as gen_
from conformance import strategies as layouts_st
from conformance.catalogue.spec import (
    FLOAT_DTYPES,
    TRITON_EXPECTATION,
    Case,
    Contract,
    Inputs,
    SlotSpec,
)
from conformance.layouts import apply_layout
from conformance.numerics import E2M1, E4M3, INT_BITS

EXACT = Contract("exact")


def _finite_weight(case: Case, grid, size: int, gen: torch.Generator) -> torch.Tensor:
    w = gen_.blocked_values(tuple(case.params["shape"]), grid, gen, dim=1, size=size)
    return torch.where(torch.isfinite(w), w, 0.0)


def _random_codes(like: torch.Tensor, layout: str, gen: torch.Generator) -> torch.Tensor:
    codes = torch.randint(0, 256, like.shape, generator=gen, dtype=torch.int32).to(torch.uint8)
    return apply_layout(codes, layout)


def _int_grouped(case, dtype, layout, gen):
    from libreyolo.quant.packing import pack_int_grouped

    bits, group = case.params["bits"], case.params["group_size"]
    packed = pack_int_grouped(_finite_weight(case, INT_BITS[bits], group, gen), bits, group)
    return Inputs((_random_codes(packed.codes, layout, gen), packed.scale, bits, group,
                   packed.in_features), {"dtype": dtype}, grad_args=())


def _nvfp4(case, dtype, layout, gen):
    from libreyolo.quant.packing import pack_nvfp4

    packed = pack_nvfp4(_finite_weight(case, E2M1, 16, gen))
    return Inputs((_random_codes(packed.codes, layout, gen), packed.block_scale,
                   packed.tensor_scale, packed.in_features), {"dtype": dtype}, grad_args=())


def _mxfp4(case, dtype, layout, gen):
    from libreyolo.quant.packing import pack_mxfp4

    packed = pack_mxfp4(_finite_weight(case, E2M1, 32, gen))
    return Inputs((_random_codes(packed.codes, layout, gen), packed.scale,
                   packed.in_features), {"dtype": dtype}, grad_args=())


def _mxfp8(case, dtype, layout, gen):
    from libreyolo.quant.packing import pack_mxfp8

    packed = pack_mxfp8(_finite_weight(case, E4M3, 32, gen))
    # random bytes seen as E4M3: both NaN codes (0x7F, 0xFF) and -0.0 (0x80) appear; gaps hold
    # 0xFF (NaN), 0x00 and 0x5A
    codes = _random_codes(packed.codes.view(torch.uint8), layout, gen)
    return Inputs((codes.view(torch.float8_e4m3fn), packed.scale), {"dtype": dtype},
                  grad_args=())


def _weights(**fixed):
    return lambda: layouts_st.shapes(min_dims=2, max_dims=2).map(
        lambda shape: Case("hypothesis", "hypothesis", "small", {"shape": list(shape), **fixed}))


def _grouped_strategy():
    return st.builds(lambda shape, bits, group: Case(
        "hypothesis", "hypothesis", "small",
        {"shape": list(shape), "bits": bits, "group_size": group}),
        layouts_st.shapes(min_dims=2, max_dims=2), st.sampled_from([2, 4, 8]),
        layouts_st.group_sizes())


def _spec(name, signature, make_inputs, shapes, strategy):
    return SlotSpec(name=name, family="packing", signature=signature,
                    reference=f"libreyolo.quant.packing:{name}", contract=EXACT, shapes=shapes,
                    make_inputs=make_inputs, strategy=strategy, dtypes=FLOAT_DTYPES,
                    expects={"triton": TRITON_EXPECTATION})


SLOTS = [
    _spec("unpack_int_grouped", "(codes, scale, bits, group_size, in_features, dtype=float32)",
          _int_grouped, "unpack_int_grouped.toml", _grouped_strategy),
    _spec("unpack_nvfp4", "(codes, block_scale, tensor_scale, in_features, dtype=float32)",
          _nvfp4, "unpack_nvfp4.toml", _weights()),
    _spec("unpack_mxfp4", "(codes, scale, in_features, dtype=float32)", _mxfp4,
          "unpack_mxfp4.toml", _weights()),
    _spec("unpack_mxfp8", "(codes, scale, dtype=float32)", _mxfp8, "unpack_mxfp8.toml",
          _weights()),
]

"""Unpack profiles: packed checkpoint bytes to floats, exact (docs/checkpoint_format.md). One
kind per packed format, in `PROFILES`; a slot's shape set names its kind in `[profile]`.

Inputs are real packed weights (packed by the reference packers from the fake-quant generators'
values) whose code bytes are then replaced by uniform random bytes, so every code point appears.
The case's dtype is the output dtype; there is no gradient.
"""

from __future__ import annotations

import math

import torch
from hypothesis import strategies as st

from conformance.inputs import generators as gen_
from conformance.inputs import strategies as layouts_st
from conformance.inputs.layouts import apply_layout
from conformance.inputs.numerics import E2M1, E4M3, INT_BITS
from conformance.schema.spec import (
    TRITON_EXPECTATION,
    Case,
    Inputs,
    SlotSpec,
    error_input,
    tensor,
)


def _finite_weight(case: Case, grid, size: int, gen: torch.Generator) -> torch.Tensor:
    w = gen_.blocked_values(tuple(case.params["shape"]), grid, gen, dim=1, size=size)
    return torch.where(torch.isfinite(w), w, 0.0)


def _random_codes(like: torch.Tensor, layout: str, gen: torch.Generator) -> torch.Tensor:
    codes = torch.randint(0, 256, like.shape, generator=gen, dtype=torch.int32).to(torch.uint8)
    return apply_layout(codes, layout)


def _int_grouped_inputs(case, dtype, layout, gen):
    from libreyolo.quant.packing import pack_int_grouped

    bits, group = case.params["bits"], case.params["group_size"]
    packed = pack_int_grouped(_finite_weight(case, INT_BITS[bits], group, gen), bits, group)
    return Inputs((_random_codes(packed.codes, layout, gen), packed.scale, bits, group,
                   packed.in_features), {"dtype": dtype}, grad_args=())


def _nvfp4_inputs(case, dtype, layout, gen):
    from libreyolo.quant.packing import pack_nvfp4

    packed = pack_nvfp4(_finite_weight(case, E2M1, 16, gen))
    return Inputs((_random_codes(packed.codes, layout, gen), packed.block_scale,
                   packed.tensor_scale, packed.in_features), {"dtype": dtype}, grad_args=())


def _mxfp4_inputs(case, dtype, layout, gen):
    from libreyolo.quant.packing import pack_mxfp4

    packed = pack_mxfp4(_finite_weight(case, E2M1, 32, gen))
    return Inputs((_random_codes(packed.codes, layout, gen), packed.scale,
                   packed.in_features), {"dtype": dtype}, grad_args=())


def _mxfp8_inputs(case, dtype, layout, gen):
    from libreyolo.quant.packing import pack_mxfp8

    packed = pack_mxfp8(_finite_weight(case, E4M3, 32, gen))
    # random bytes seen as E4M3: both NaN codes (0x7F, 0xFF) and -0.0 (0x80) appear; gaps hold
    # 0xFF (NaN), 0x00 and 0x5A
    codes = _random_codes(packed.codes.view(torch.uint8), layout, gen)
    return Inputs((codes.view(torch.float8_e4m3fn), packed.scale), {"dtype": dtype},
                  grad_args=())


def _weights():
    return lambda: layouts_st.shapes(min_dims=2, max_dims=2).map(
        lambda shape: Case("hypothesis", "hypothesis", "small", {"shape": list(shape)}))


def _grouped_strategy():
    return st.builds(lambda shape, bits, group: Case(
        "hypothesis", "hypothesis", "small",
        {"shape": list(shape), "bits": bits, "group_size": group}),
        layouts_st.shapes(min_dims=2, max_dims=2), st.sampled_from([2, 4, 8]),
        layouts_st.group_sizes())


# Error inputs: docs/checkpoint_format.md ("unpack ... raise TypeError/ValueError naming the
# argument"), worded as libreyolo/quant/packing.py words them. A valid call unpacks 4 rows of 6
# features: codes (4, 3) uint8 (two 4-bit codes a byte), one scale per group or block.
RULE = "docs/checkpoint_format.md: the packed tensors' dtypes and shapes, the output dtype"
CODES = tensor((4, 3), torch.uint8, values=list(range(12)))


def _ones(shape, dtype=torch.float32):
    return tensor(shape, dtype, values=[1.0] * math.prod(shape))


def _bad(name, error, match, *args, **kwargs):
    return error_input(name, error, match, RULE, *args, **kwargs)


INT_GROUPED_ERRORS = (  # bits 4, group_size 4: scale (4, 2)
    _bad("int8-codes", TypeError, "codes", tensor((4, 3), torch.int8), _ones((4, 2)), 4, 4, 6),
    _bad("1-d-codes", ValueError, "codes", tensor((12,), torch.uint8, values=list(range(12))),
         _ones((4, 2)), 4, 4, 6),
    _bad("short-codes", ValueError, "codes", tensor((4, 2), torch.uint8, values=[1] * 8),
         _ones((4, 2)), 4, 4, 6),
    _bad("wrong-shape-scale", ValueError, "scale", CODES, _ones((4, 3)), 4, 4, 6),
    _bad("float16-scale", TypeError, "scale", CODES, _ones((4, 2), torch.float16), 4, 4, 6),
    _bad("3-bits", ValueError, "bits", CODES, _ones((4, 2)), 3, 4, 6),
    _bad("zero-group-size", ValueError, "group_size", CODES, _ones((4, 2)), 4, 0, 6),
    _bad("negative-in-features", ValueError, "in_features", CODES, _ones((4, 2)), 4, 4, -1),
    _bad("float64-output", TypeError, "dtype", CODES, _ones((4, 2)), 4, 4, 6,
         dtype=torch.float64),
)
E4M3_DTYPE = torch.float8_e4m3fn
NVFP4_ERRORS = (  # blocks of 16: block_scale (4, 1) E4M3, tensor_scale 0-dim float32
    _bad("int8-codes", TypeError, "codes", tensor((4, 3), torch.int8),
         _ones((4, 1), E4M3_DTYPE), _ones(()), 6),
    _bad("float32-block-scale", TypeError, "block_scale", CODES, _ones((4, 1)), _ones(()), 6),
    _bad("wrong-shape-block-scale", ValueError, "block_scale", CODES,
         _ones((4, 2), E4M3_DTYPE), _ones(()), 6),
    _bad("1-d-tensor-scale", ValueError, "tensor_scale", CODES, _ones((4, 1), E4M3_DTYPE),
         _ones((1,)), 6),
    _bad("float-in-features", TypeError, "in_features", CODES, _ones((4, 1), E4M3_DTYPE),
         _ones(()), 6.0),
    _bad("int32-output", TypeError, "dtype", CODES, _ones((4, 1), E4M3_DTYPE), _ones(()), 6,
         dtype=torch.int32),
)
MXFP4_ERRORS = (  # blocks of 32: scale (4, 1) uint8 E8M0 codes
    _bad("3-d-codes", ValueError, "codes", tensor((4, 3, 1), torch.uint8, values=[1] * 12),
         _ones((4, 1), torch.uint8), 6),
    _bad("float32-scale", TypeError, "scale", CODES, _ones((4, 1)), 6),
    _bad("wrong-shape-scale", ValueError, "scale", CODES, _ones((4, 2), torch.uint8), 6),
    _bad("negative-in-features", ValueError, "in_features", CODES, _ones((4, 1), torch.uint8),
         -1),
    _bad("float64-output", TypeError, "dtype", CODES, _ones((4, 1), torch.uint8), 6,
         dtype=torch.float64),
)

E4M3_CODES = tensor((4, 3), E4M3_DTYPE, values=[1.0] * 12)
MXFP8_ERRORS = (  # blocks of 32: codes E4M3 (4, 3), scale (4, 1) uint8 E8M0 codes
    _bad("uint8-codes", TypeError, "codes", CODES, _ones((4, 1), torch.uint8)),
    _bad("1-d-codes", ValueError, "codes", tensor((12,), E4M3_DTYPE, values=[1.0] * 12),
         _ones((4, 1), torch.uint8)),
    _bad("float32-scale", TypeError, "scale", E4M3_CODES, _ones((4, 1))),
    _bad("wrong-shape-scale", ValueError, "scale", E4M3_CODES, _ones((4, 2), torch.uint8)),
    _bad("float64-output", TypeError, "dtype", E4M3_CODES, _ones((4, 1), torch.uint8),
         dtype=torch.float64),
)


def _applied(per_byte: int, scales: dict):
    """What produced output element (row, col): its code byte and its scales; `scales` maps an
    argument position to (name, columns per scale), columns None for a 0-dim scale."""

    def applied(inputs: Inputs, index: tuple) -> dict:
        row, col = index
        found = {"code byte": inputs.args[0][row, col // per_byte(inputs)]}
        for position, (name, columns) in scales.items():
            scale = inputs.args[position]
            found[name] = scale if columns is None else scale[row, col // columns(inputs)]
        return found

    return applied


def _fixed(n):
    return lambda inputs: n


def _spec(slot, make_inputs, strategy, error_inputs, applied):
    return SlotSpec(name=slot, make_inputs=make_inputs, strategy=strategy,
                    expects={"triton": TRITON_EXPECTATION}, error_inputs=error_inputs,
                    applied=applied)


def int_grouped(slot: str) -> SlotSpec:
    """Grouped int2/int4/int8 codes, two's complement, packed into bytes, with a float32 scale
    per group (cases: `shape`, `bits`, `group_size`)."""
    return _spec(slot, _int_grouped_inputs, _grouped_strategy, INT_GROUPED_ERRORS,
                 _applied(lambda inputs: 8 // inputs.args[2],
                          {1: ("scale", lambda inputs: inputs.args[3])}))


def nvfp4(slot: str) -> SlotSpec:
    """NVFP4: E2M1 nibbles, an E4M3 scale per 16 inputs and a float32 tensor scale."""
    return _spec(slot, _nvfp4_inputs, _weights(), NVFP4_ERRORS,
                 _applied(_fixed(2), {1: ("block_scale", _fixed(16)), 2: ("tensor_scale", None)}))


def mxfp4(slot: str) -> SlotSpec:
    """MXFP4: E2M1 nibbles and an E8M0 scale code per 32 inputs."""
    return _spec(slot, _mxfp4_inputs, _weights(), MXFP4_ERRORS,
                 _applied(_fixed(2), {1: ("scale (E8M0 code)", _fixed(32))}))


def mxfp8(slot: str) -> SlotSpec:
    """MXFP8: E4M3 bytes and an E8M0 scale code per 32 inputs."""
    return _spec(slot, _mxfp8_inputs, _weights(), MXFP8_ERRORS,
                 _applied(_fixed(1), {1: ("scale (E8M0 code)", _fixed(32))}))


PROFILES = {"int_grouped": int_grouped, "nvfp4": nvfp4, "mxfp4": mxfp4, "mxfp8": mxfp8}

"""Packing is the checkpoint contract: unpack(pack(w)) == fake_quant(w) bit for bit, fixed bytes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from quant_helpers import DEVICES, FLOAT_DTYPES, assert_same_bits

from libreyolo.quant import fake_quant as fq
from libreyolo.quant import packing as pk


def _per_channel(w):
    return (torch.linspace(1e-3, 1.0, w.shape[0], device=w.device),), {}


# name -> (pack, unpack, fake quant, params builder taking w)
FORMATS = {
    "int8": (pk.pack_int8, pk.unpack_int8, fq.fake_quant_int8_per_channel, _per_channel),
    "fp8_e4m3_tensor": (
        pk.pack_fp8, pk.unpack_fp8, fq.fake_quant_fp8,
        lambda w: ((torch.tensor(0.01, device=w.device),), {}),
    ),
    "fp8_e5m2_channel": (
        pk.pack_fp8, pk.unpack_fp8, fq.fake_quant_fp8,
        lambda w: (
            (torch.linspace(1e-4, 1.0, w.shape[1], device=w.device),), {"fmt": "e5m2", "axis": 1}
        ),
    ),
    "fp8_e4m3_row": (pk.pack_fp8, pk.unpack_fp8, fq.fake_quant_fp8, lambda w: ((), {})),
    "int2_grouped": (
        pk.pack_int_grouped, pk.unpack_int_grouped, fq.fake_quant_int_grouped,
        lambda w: ((2, 5), {}),
    ),
    "int4_grouped": (
        pk.pack_int_grouped, pk.unpack_int_grouped, fq.fake_quant_int_grouped,
        lambda w: ((4, 16), {}),
    ),
    "int8_grouped": (
        pk.pack_int_grouped, pk.unpack_int_grouped, fq.fake_quant_int_grouped,
        lambda w: ((8, 32), {}),
    ),
    "nvfp4": (pk.pack_nvfp4, pk.unpack_nvfp4, fq.fake_quant_nvfp4_weight, lambda w: ((), {})),
    "nvfp4_global": (
        pk.pack_nvfp4, pk.unpack_nvfp4, fq.fake_quant_nvfp4_weight,
        lambda w: ((torch.tensor(1.0, device=w.device),), {}),
    ),
    "mxfp4": (pk.pack_mxfp4, pk.unpack_mxfp4, fq.fake_quant_mxfp4_weight, lambda w: ((), {})),
    "mxfp8": (pk.pack_mxfp8, pk.unpack_mxfp8, fq.fake_quant_mxfp8_weight, lambda w: ((), {})),
}

finite_weights = st.tuples(st.integers(1, 5), st.integers(0, 70)).flatmap(
    lambda shape: arrays(
        np.float32, shape, elements=st.floats(allow_nan=False, allow_infinity=False, width=32)
    )
)


def _as(w: np.ndarray, dtype: torch.dtype, device: str) -> torch.Tensor:
    limit = torch.finfo(dtype).max
    return torch.from_numpy(w.copy()).clamp(-limit, limit).to(dtype).to(device)


def _roundtrip(name, w):
    pack, unpack, fake_quant, params = FORMATS[name]
    args, kwargs = params(w)
    packed = pack(w, *args, **kwargs)
    return unpack(**packed._asdict(), dtype=w.dtype), fake_quant(w, *args, **kwargs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("name", FORMATS)
@settings(max_examples=40, deadline=None)
@given(w=finite_weights)
def test_unpack_of_pack_is_fake_quant_bit_for_bit(name, dtype, device, w):
    unpacked, expected = _roundtrip(name, _as(w, dtype, device))
    assert_same_bits(unpacked, expected)


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_pack_rejects_non_finite_weights(name, bad):
    w = torch.ones(3, 40)
    w[1, 7] = bad
    pack, _, _, params = FORMATS[name]
    args, kwargs = params(w)
    message = rf"w must be finite to be packed, got {bad} at index \(1, 7\)"
    with pytest.raises(ValueError, match=message):
        pack(w, *args, **kwargs)


def test_int4_codes_are_twos_complement_nibbles_first_element_low():
    packed = pk.pack_int_grouped(torch.tensor([[1.0, -1.0, 7.0, -7.0, 3.0]]), 4, 8)
    assert packed.codes.tolist() == [[0xF1, 0x97, 0x03]]
    assert packed.scale.tolist() == [[1.0]]


def test_int2_codes_are_packed_four_per_byte_first_element_lowest():
    packed = pk.pack_int_grouped(torch.tensor([[1.0, -1.0, 0.0, 1.0, -1.0]]), 2, 5)
    assert packed.codes.tolist() == [[0b01_00_11_01, 0b11]]


def test_int8_grouped_codes_are_twos_complement_bytes():
    packed = pk.pack_int_grouped(torch.tensor([[127.0, -127.0, -1.0]]), 8, 3)
    assert packed.codes.tolist() == [[0x7F, 0x81, 0xFF]]


def test_mxfp4_codes_are_e2m1_nibbles_and_e8m0_biased_exponents():
    w = torch.tensor([[6.0, -0.5, -0.0, 1.5] + [0.0] * 28 + [16.0]])
    packed = pk.pack_mxfp4(w)
    # 6 = 0.111, -0.5 = 1.001 (subnormal), -0.0 = 1.000, 1.5 = 0.011; block 1: 16 = 4 * 2^2 = 0.110
    assert packed.codes[0, :2].tolist() == [0x97, 0x38]
    assert packed.codes[0, 16].item() == 0x06
    assert packed.scale.tolist() == [[127, 129]]
    assert packed.in_features == 33


def test_nvfp4_stores_e4m3_block_scales_and_the_float32_tensor_scale():
    w = torch.tensor([[2688.0, -1344.0] + [0.0] * 14 + [6.0]])
    packed = pk.pack_nvfp4(w)
    assert packed.tensor_scale.item() == 1.0
    assert packed.block_scale.float().tolist() == [[448.0, 1.0]]
    assert packed.block_scale.dtype == torch.float8_e4m3fn
    assert packed.codes[0, 0].item() == 0xD7  # 6 = 0.111 low, -3 = 1.101 high
    assert packed.codes[0, 8].item() == 0x07


def test_fp8_row_scales_broadcast_over_the_last_dim():
    packed = pk.pack_fp8(torch.tensor([[448.0, 1.0], [0.0, -896.0]]))
    assert packed.scale.tolist() == [[1.0], [2.0]]
    assert packed.codes.dtype == torch.float8_e4m3fn and packed.axis is None


BAD_UNPACK = [
    ("codes-dtype", pk.unpack_mxfp4, (torch.zeros(2, 4, dtype=torch.int8), torch.zeros(2, 1,
     dtype=torch.uint8), 8), TypeError, "codes must be uint8, got int8"),
    ("codes-rank", pk.unpack_nvfp4, (torch.zeros(8, dtype=torch.uint8),
     torch.zeros(1, 1, dtype=torch.float8_e4m3fn), torch.tensor(1.0), 16), ValueError,
     r"codes must be 2-D, got shape \(8,\)"),
    ("codes-width", pk.unpack_int_grouped, (torch.zeros(2, 3, dtype=torch.uint8),
     torch.ones(2, 1), 4, 8, 8), ValueError, r"codes must have shape \(2, 4\), got \(2, 3\)"),
    ("scale-groups", pk.unpack_int_grouped, (torch.zeros(2, 4, dtype=torch.uint8),
     torch.ones(2, 2), 4, 8, 8), ValueError, r"scale must have shape \(2, 1\), got \(2, 2\)"),
    ("block-scale-dtype", pk.unpack_nvfp4, (torch.zeros(1, 8, dtype=torch.uint8),
     torch.ones(1, 1), torch.tensor(1.0), 16), TypeError,
     "block_scale must be float8_e4m3fn, got float32"),
    ("in-features", pk.unpack_mxfp4, (torch.zeros(1, 4, dtype=torch.uint8),
     torch.zeros(1, 1, dtype=torch.uint8), -1), ValueError,
     "in_features must be non-negative, got -1"),
    ("out-dtype", pk.unpack_mxfp8, (torch.zeros(1, 4, dtype=torch.float8_e4m3fn),
     torch.zeros(1, 1, dtype=torch.uint8), torch.int8), TypeError,
     "dtype must be float32, float16 or bfloat16, got torch.int8"),
    ("fp8-scale", pk.unpack_fp8, (torch.zeros(2, 4, dtype=torch.float8_e5m2), torch.ones(4)),
     ValueError, r"scale must have shape \(2, 1\), got \(4,\)"),
]


@pytest.mark.parametrize(
    "unpack, args, error, message", [c[1:] for c in BAD_UNPACK], ids=[c[0] for c in BAD_UNPACK]
)
def test_unpack_rejects_inconsistent_packed_tensors(unpack, args, error, message):
    with pytest.raises(error, match=message):
        unpack(*args)


@pytest.mark.parametrize("pack, unpack, op, kwargs", [
    (pk.pack_int8, pk.unpack_int8, fq.fake_quant_int8_per_channel, {}),
    (pk.pack_fp8, pk.unpack_fp8, fq.fake_quant_fp8, {"axis": 0}),
])
def test_a_negative_zero_scale_unpacks_to_positive_zero_like_fake_quant(pack, unpack, op, kwargs):
    w = torch.randn(4, 8)
    scale = torch.tensor([0.1, -0.0, 0.2, 0.0])
    packed = pack(w, scale, **kwargs)
    assert_same_bits(unpack(*packed), op(w, scale, **kwargs))

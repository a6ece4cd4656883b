"""Negative controls for the unpack slots: the reference unpack, broken in one narrow way each.

Each mimics a bug an unpack kernel can have in its tail or edge handling (nibble order, the scale
of a ragged last block or group, NaN payloads, signed zeros, the bfloat16 rounding), so only the
cases built for it catch it and the suite is shown to look there.
"""

from __future__ import annotations

import torch

from conformance.negative import breaks
from libreyolo.quant import packing as ref

MX_BLOCK = 32
_NAN_CODES = (0x7F, 0xFF)  # E4M3 (e4m3fn): S.1111.111 is NaN, there is no inf (OCP FP8 rev 1.0)


@breaks("unpack_mxfp4")
def nibble_order_swapped(codes, scale, in_features, dtype=torch.float32):
    """Reads each row's last byte high nibble first (a tail path with its own nibble order): its
    two elements trade places, or with an odd row length the last element decodes the padding."""
    if codes.shape[0] == 0 or codes.shape[1] == 0:
        return ref.unpack_mxfp4(codes, scale, in_features, dtype)
    swapped = codes.clone()
    last = swapped[:, -1].to(torch.int32)
    swapped[:, -1] = (((last & 0x0F) << 4) | (last >> 4)).to(torch.uint8)
    return ref.unpack_mxfp4(swapped, scale, in_features, dtype)


@breaks("unpack_mxfp8")
def ragged_block_takes_previous_scale(codes, scale, dtype=torch.float32):
    """Multiplies a ragged last block (row length not a multiple of 32) by the scale of the block
    before it: a scale applied to the wrong block."""
    if codes.shape[1] % MX_BLOCK == 0 or scale.shape[1] < 2:
        return ref.unpack_mxfp8(codes, scale, dtype)
    shifted = scale.clone()
    shifted[:, -1] = scale[:, -2]
    return ref.unpack_mxfp8(codes, shifted, dtype)


@breaks("unpack_int_grouped")
def ragged_last_group_dropped(codes, scale, bits, group_size, in_features, dtype=torch.float32):
    """Writes zeros for a ragged last group (row length not a multiple of the group size): a
    grid of whole groups only."""
    out = ref.unpack_int_grouped(codes, scale, bits, group_size, in_features, dtype)
    ragged = in_features % group_size
    if ragged:
        out[:, in_features - ragged:] = 0.0
    return out


@breaks("unpack_mxfp8")
def nan_payload_canonicalized(codes, scale, dtype=torch.float32):
    """Writes NaN codes as the canonical quiet NaN of the output dtype, dropping the sign and
    payload the reference's arithmetic keeps (what a GPU's own NaN, or a NaN literal, gives)."""
    out = ref.unpack_mxfp8(codes, scale, dtype)
    raw = codes.view(torch.uint8)
    nan = (raw == _NAN_CODES[0]) | (raw == _NAN_CODES[1])
    return torch.where(nan, torch.full((), float("nan"), dtype=dtype, device=out.device), out)


@breaks("unpack_mxfp8")
def negative_zero_lost(codes, scale, dtype=torch.float32):
    """Decodes the E4M3 code 0x80 as +0.0 (a magnitude-only decode that applies the sign by
    multiplying by -1 only for nonzero magnitudes)."""
    out = ref.unpack_mxfp8(codes, scale, dtype)
    return torch.where(codes.view(torch.uint8) == 0x80, torch.zeros((), dtype=dtype,
                                                                    device=out.device), out)


@breaks("unpack_nvfp4")
def bfloat16_truncated(codes, block_scale, tensor_scale, in_features, dtype=torch.float32):
    """Rounds bfloat16 outputs toward zero (drops the low 16 bits of the float32 product, as the
    Triton interpreter's fp32 -> bf16 cast does) instead of to nearest-even."""
    if dtype != torch.bfloat16:
        return ref.unpack_nvfp4(codes, block_scale, tensor_scale, in_features, dtype)
    wide = ref.unpack_nvfp4(codes, block_scale, tensor_scale, in_features, torch.float32)
    high = (wide.view(torch.int32) >> 16).to(torch.int16)
    return torch.where(wide.isnan(), wide.to(dtype), high.view(torch.bfloat16))


CONTROLS = [
    ("nibble_order_swapped", nibble_order_swapped,
     "exact: random code bytes; a row's last byte holds two different nibbles, or one nibble "
     "and nonzero padding (odd_in_features, primes, one_element)"),
    ("ragged_block_takes_previous_scale", ragged_block_takes_previous_scale,
     "exact: row lengths 80 and 131 leave a ragged last block; block scales differ per block"),
    ("ragged_last_group_dropped", ragged_last_group_dropped,
     "exact: ragged last groups (80 in 32s, 131 in 7s, 20 in 64) with nonzero codes"),
    ("nan_payload_canonicalized", nan_payload_canonicalized,
     "exact: random E4M3 bytes hold NaN codes; bits are compared, NaN payloads and signs count"),
    ("negative_zero_lost", negative_zero_lost,
     "exact: random E4M3 bytes hold 0x80; bits are compared, so -0.0 differs from +0.0"),
    ("bfloat16_truncated", bfloat16_truncated,
     "exact: bfloat16 cases of products with more than 8 significant bits"),
]

"""Packing: the checkpoint contract. `unpack(pack(w)) == fake_quant(w)` bit for bit, for finite w.

One layout per format, no variants (docs/checkpoint_format.md is the byte-level description).
Packers run the same quantizer as the fake-quant op and store its codes and scales; unpackers
multiply the decoded codes by the decoded scales with the op's own float32 arithmetic, so the
two cannot drift. Sub-byte codes are packed along the last dim, first element in the lowest bits.
Pack rejects NaN and inf: no code means them.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from libreyolo.quant import nan_bits, quantizers
from libreyolo.quant import validation as v
from libreyolo.quant.formats import E2M1, E8M0_BIAS, MX_BLOCK_SIZE, NVFP4_BLOCK_SIZE
from libreyolo.quant.numerics import pow2

_FP8_DTYPES = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}


class PackedInt8(NamedTuple):
    codes: torch.Tensor  # int8, w's shape, in [-127, 127]
    scale: torch.Tensor  # float32, (w.shape[axis],)
    axis: int


class PackedFP8(NamedTuple):
    codes: torch.Tensor  # float8_e4m3fn or float8_e5m2, w's shape
    scale: torch.Tensor  # float32: () per tensor, (w.shape[axis],) per channel, (..., 1) per row
    axis: int | None


class PackedIntGrouped(NamedTuple):
    codes: torch.Tensor  # uint8, (out, ceil(in * bits / 8)), two's complement sub-byte codes
    scale: torch.Tensor  # float32, (out, ceil(in / group_size))
    bits: int
    group_size: int
    in_features: int


class PackedNVFP4(NamedTuple):
    codes: torch.Tensor  # uint8, (out, ceil(in / 2)), E2M1 nibbles
    block_scale: torch.Tensor  # float8_e4m3fn, (out, ceil(in / 16))
    tensor_scale: torch.Tensor  # float32, ()
    in_features: int


class PackedMXFP4(NamedTuple):
    codes: torch.Tensor  # uint8, (out, ceil(in / 2)), E2M1 nibbles
    scale: torch.Tensor  # uint8 E8M0 (2^(code - 127)), (out, ceil(in / 32))
    in_features: int


class PackedMXFP8(NamedTuple):
    codes: torch.Tensor  # float8_e4m3fn, (out, in)
    scale: torch.Tensor  # uint8 E8M0 (2^(code - 127)), (out, ceil(in / 32))


def _stored_scale(scale: torch.Tensor) -> torch.Tensor:
    """A copy with -0.0 stored as +0.0: a zero scale dequantizes to +0.0 (rule 7), and
    ``0 * -0.0`` would give -0.0 on unpack."""
    return torch.where(scale == 0, 0.0, scale)


def pack_int8(w: torch.Tensor, scale: torch.Tensor, axis: int = 0) -> PackedInt8:
    result = quantizers.int8_per_channel(w, scale, axis, x_name="w")
    v.check_all_finite("w", w)
    return PackedInt8(result.codes.to(torch.int8), _stored_scale(scale), axis % w.dim())


def unpack_int8(codes, scale, axis: int = 0, dtype=torch.float32) -> torch.Tensor:
    _check_codes("codes", codes, (torch.int8,))
    axis = v.check_axis("axis", axis, codes.dim())
    _check_shape("scale", scale, torch.float32, (codes.shape[axis],), codes.device)
    shape = [1] * codes.dim()
    shape[axis] = -1
    return _finish(nan_bits.product(codes.float(), scale.view(shape)), dtype)


def pack_fp8(w: torch.Tensor, scale=None, *, fmt: str = "e4m3", axis=None) -> PackedFP8:
    result = quantizers.fp8(w, scale, fmt=fmt, axis=axis, x_name="w")
    v.check_all_finite("w", w)
    axis = None if axis is None else axis % w.dim()
    return PackedFP8(result.codes.to(_FP8_DTYPES[fmt]), _stored_scale(result.scales["scale"]), axis)


def unpack_fp8(codes, scale, axis=None, dtype=torch.float32) -> torch.Tensor:
    _check_codes("codes", codes, tuple(_FP8_DTYPES.values()))
    if axis is None:
        _check_codes("scale", scale, (torch.float32,))
        per_row = (*codes.shape[:-1], 1) if scale.dim() and codes.dim() else ()
        _check_shape("scale", scale, torch.float32, per_row, codes.device)
        return _finish(nan_bits.product(codes.float(), scale), dtype)
    axis = v.check_axis("axis", axis, codes.dim())
    _check_shape("scale", scale, torch.float32, (codes.shape[axis],), codes.device)
    shape = [1] * codes.dim()
    shape[axis] = -1
    return _finish(nan_bits.product(codes.float(), scale.view(shape)), dtype)


def pack_int_grouped(w: torch.Tensor, bits: int, group_size: int) -> PackedIntGrouped:
    result = quantizers.int_grouped(w, bits, group_size)
    v.check_all_finite("w", w)
    codes = _pack_subbyte(result.codes.to(torch.int32) & ((1 << bits) - 1), bits)
    return PackedIntGrouped(codes, result.scales["scale"], bits, group_size, w.shape[1])


def unpack_int_grouped(
    codes, scale, bits: int, group_size: int, in_features: int, dtype=torch.float32
) -> torch.Tensor:
    """Reference unpack of grouped int2/int4/int8 weights: (out, in_features) of `dtype`."""
    bits, group_size, in_features = check_unpack_int_grouped(
        codes, scale, bits, group_size, in_features, dtype)
    raw = _unpack_subbyte(codes, bits, in_features)
    # sign-extend the two's complement code by a comparison, not `(raw ^ sign) - sign`: the
    # TorchScript ONNX exporter refuses XOR on integers
    values = torch.where(raw >= 1 << (bits - 1), raw - (1 << bits), raw).float()
    return _finish(_blockwise(values, scale, group_size), dtype)  # group_size: group_length


def pack_nvfp4(w: torch.Tensor, global_amax=None) -> PackedNVFP4:
    result = quantizers.nvfp4_weight(w, global_amax)
    v.check_all_finite("w", w)
    return PackedNVFP4(
        _pack_subbyte(_encode_e2m1(result.codes), 4),
        result.scales["block_scale"].to(torch.float8_e4m3fn),
        result.scales["tensor_scale"],
        w.shape[1],
    )


def unpack_nvfp4(
    codes, block_scale, tensor_scale, in_features: int, dtype=torch.float32
) -> torch.Tensor:
    """Reference unpack of NVFP4 weights: E2M1 codes times (E4M3 block scale x fp32 scale)."""
    in_features = check_unpack_nvfp4(codes, block_scale, tensor_scale, in_features, dtype)
    values = _decode_e2m1(_unpack_subbyte(codes, 4, in_features))
    scale = nan_bits.product(block_scale.float(), tensor_scale)
    return _finish(_blockwise(values, scale, NVFP4_BLOCK_SIZE), dtype)


def pack_mxfp4(w: torch.Tensor) -> PackedMXFP4:
    result = quantizers.mxfp4_weight(w)
    v.check_all_finite("w", w)
    scale = (result.scales["exponent"] + E8M0_BIAS).to(torch.uint8)
    return PackedMXFP4(_pack_subbyte(_encode_e2m1(result.codes), 4), scale, w.shape[1])


def unpack_mxfp4(codes, scale, in_features: int, dtype=torch.float32) -> torch.Tensor:
    """Reference unpack of MXFP4 weights: E2M1 codes times 2^(E8M0 code - 127) per 32."""
    in_features = check_unpack_mxfp4(codes, scale, in_features, dtype)
    values = _decode_e2m1(_unpack_subbyte(codes, 4, in_features))
    return _finish(_blockwise(values, _decode_e8m0(scale), MX_BLOCK_SIZE), dtype)


def pack_mxfp8(w: torch.Tensor) -> PackedMXFP8:
    result = quantizers.mxfp8_weight(w)
    v.check_all_finite("w", w)
    scale = (result.scales["exponent"] + E8M0_BIAS).to(torch.uint8)
    return PackedMXFP8(result.codes.to(torch.float8_e4m3fn), scale)


def unpack_mxfp8(codes, scale, dtype=torch.float32) -> torch.Tensor:
    """Reference unpack of MXFP8 weights: E4M3 codes times 2^(E8M0 code - 127) per 32 inputs.

    A NaN code (0x7F, 0xFF) stays NaN with its sign and payload as float32 arithmetic on the
    CPU leaves it, on every device (``nan_bits``; docs/checkpoint_format.md, "Unpacked bits");
    -0.0 (0x80) stays -0.0.
    """
    check_unpack_mxfp8(codes, scale, dtype)
    return _finish(_blockwise(codes.float(), _decode_e8m0(scale), MX_BLOCK_SIZE), dtype)


# The unpackers' argument checks, shared with the accelerated unpack implementations so that both
# reject bad input with the same error. Each returns the normalized integers the unpack needs.


def check_unpack_int_grouped(codes, scale, bits, group_size, in_features, dtype):
    """... and the group length the unpack uses: ``group_size``, or the row's length when the
    group is longer (one group a row either way: ``quantizers.group_length``)."""
    bits = v.check_bits("bits", bits)
    group_size = v.check_positive_int("group_size", group_size)
    in_features = _check_in_features(in_features)
    rows = _rows("codes", codes, torch.uint8)
    _check_shape("codes", codes, torch.uint8, (rows, -(-in_features // (8 // bits))))
    _check_shape("scale", scale, torch.float32, (rows, -(-in_features // group_size)),
                 codes.device)
    _check_dtype(dtype)
    return bits, quantizers.group_length(group_size, in_features), in_features


def check_unpack_nvfp4(codes, block_scale, tensor_scale, in_features, dtype) -> int:
    in_features = _check_in_features(in_features)
    rows = _rows("codes", codes, torch.uint8)
    _check_shape("codes", codes, torch.uint8, (rows, -(-in_features // 2)))
    _check_shape("block_scale", block_scale, torch.float8_e4m3fn,
                 (rows, -(-in_features // NVFP4_BLOCK_SIZE)), codes.device)
    _check_shape("tensor_scale", tensor_scale, torch.float32, (), codes.device)
    _check_dtype(dtype)
    return in_features


def check_unpack_mxfp4(codes, scale, in_features, dtype) -> int:
    in_features = _check_in_features(in_features)
    rows = _rows("codes", codes, torch.uint8)
    _check_shape("codes", codes, torch.uint8, (rows, -(-in_features // 2)))
    _check_shape("scale", scale, torch.uint8, (rows, -(-in_features // MX_BLOCK_SIZE)),
                 codes.device)
    _check_dtype(dtype)
    return in_features


def check_unpack_mxfp8(codes, scale, dtype) -> int:
    rows = _rows("codes", codes, torch.float8_e4m3fn)
    _check_shape("scale", scale, torch.uint8, (rows, -(-codes.shape[1] // MX_BLOCK_SIZE)),
                 codes.device)
    _check_dtype(dtype)
    return codes.shape[1]


def _pack_subbyte(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """(rows, n) codes in [0, 2^bits) -> (rows, ceil(n * bits / 8)) uint8, element j of a byte
    group at bit offset j * bits (the first element in the lowest bits); padding codes are 0."""
    per_byte = 8 // bits
    rows, n = codes.shape
    padded = F.pad(codes.to(torch.int32), (0, -n % per_byte))
    grouped = padded.view(rows, padded.shape[1] // per_byte, per_byte)
    shifts = torch.arange(per_byte, device=codes.device, dtype=torch.int32) * bits
    return (grouped << shifts).sum(-1, dtype=torch.int32).to(torch.uint8)


def _unpack_subbyte(packed: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """The fields of each byte, first in the lowest bits. Byte values are non-negative, so
    floor division and remainder by powers of two are the shift and the mask: integer shifts
    have no translation in the dynamo ONNX exporter (unpack is what exported graphs hold)."""
    per_byte = 8 // bits
    place = 2 ** (torch.arange(per_byte, device=packed.device, dtype=torch.int32) * bits)
    fields = (packed.to(torch.int32).unsqueeze(-1) // place) % (1 << bits)
    return fields.reshape(packed.shape[0], packed.shape[1] * per_byte)[:, :n]


def _encode_e2m1(values: torch.Tensor) -> torch.Tensor:
    """E2M1 code (sign << 3 | magnitude index) of values already on the E2M1 grid."""
    magnitude = values.abs()
    index = torch.where(
        magnitude < 2, magnitude * 2, torch.where(magnitude < 4, magnitude + 2, magnitude * 0.5 + 4)
    )
    return index.to(torch.int32) | (torch.signbit(values).to(torch.int32) << 3)


def _decode_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """E2M1 code -> float32 value, decoded from the bit fields (sign, 2-bit exponent, mantissa),
    read by division and remainder as ``_unpack_subbyte`` reads them."""
    sign = 1 - 2 * (codes // 8)
    exponent = (codes // 2) % 4
    mantissa = (codes % 2).float()
    normal = pow2(exponent - E2M1.exponent_bias) * (1 + mantissa / 2)
    magnitude = torch.where(exponent == 0, mantissa / 2, normal)
    return torch.where(sign < 0, -magnitude, magnitude)


def _decode_e8m0(scale: torch.Tensor) -> torch.Tensor:
    return pow2(scale.to(torch.int32) - E8M0_BIAS)


def _blockwise(values: torch.Tensor, scale: torch.Tensor, block: int) -> torch.Tensor:
    """values (rows, n) times one scale per `block` columns, as the quantizers multiply them."""
    rows, n = values.shape
    padded = F.pad(values, (0, quantizers.block_padding(n, block)))
    blocks = padded.view(rows, padded.shape[1] // block, block)
    return nan_bits.product(blocks, scale.unsqueeze(-1)).reshape(rows, padded.shape[1])[:, :n]


def _finish(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    _check_dtype(dtype)
    return nan_bits.convert(values, dtype)


def _check_dtype(dtype: object) -> None:
    if dtype not in v.FLOAT_DTYPES:
        raise TypeError(f"dtype must be float32, float16 or bfloat16, got {dtype}")


def _rows(name: str, codes: object, dtype: torch.dtype) -> int:
    """Check a 2-D packed tensor's dtype and rank; its row count fixes the scales' shape."""
    _check_codes(name, codes, (dtype,))
    if codes.dim() != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(codes.shape)}")
    return codes.shape[0]


def _check_in_features(in_features: object) -> int:
    if isinstance(in_features, bool) or not isinstance(in_features, int):
        raise TypeError(f"in_features must be an int, got {type(in_features).__name__}")
    if in_features < 0:
        raise ValueError(f"in_features must be non-negative, got {in_features}")
    return in_features


def _check_codes(name: str, t: object, dtypes: tuple[torch.dtype, ...]) -> None:
    v.check_dense(name, t)
    if t.dtype not in dtypes:
        expected = " or ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise TypeError(f"{name} must be {expected}, got {str(t.dtype).removeprefix('torch.')}")


def _check_shape(name: str, t: object, dtype: torch.dtype, shape: tuple[int, ...],
                 device: torch.device | None = None) -> None:
    """dtype exactly, and shape exactly (-1 in `shape` means: any size there); on `device` (the
    codes') when given."""
    _check_codes(name, t, (dtype,))
    same_rank = len(t.shape) == len(shape)
    if not same_rank or any(s not in (-1, n) for s, n in zip(shape, t.shape, strict=True)):
        wanted = tuple("*" if s == -1 else s for s in shape)
        raise ValueError(f"{name} must have shape {wanted}, got {tuple(t.shape)}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} must be on {device} (the codes' device), got {t.device}")

"""Inputs of the unpack checks, built from ``unpack_tables.toml``: exhaustive code-by-scale tables
and the error inputs."""

from __future__ import annotations

import tomllib
from pathlib import Path

import torch

_DATA = tomllib.loads(Path(__file__).with_name("unpack_tables.toml").read_text())
ERRORS = {case["id"]: case for case in _DATA["error"]}
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
SLOTS = ("unpack_int_grouped", "unpack_nvfp4", "unpack_mxfp4", "unpack_mxfp8")


def hostile_scales() -> torch.Tensor:
    """The table's float32 scale bit patterns, as float32 (payloads kept: built from bits)."""
    patterns = torch.tensor(_DATA["hostile_float32_scales"], dtype=torch.int64)
    return patterns.to(torch.int32).view(torch.float32)


def every_byte(rows: int) -> torch.Tensor:
    """``rows`` rows that each hold the 256 byte values once (every code, every nibble pair)."""
    return torch.arange(256, dtype=torch.int32).to(torch.uint8).repeat(rows, 1)


def mx_table(slot: str) -> tuple:
    """Every element code against every E8M0 scale code: row ``s`` has scale code ``s``."""
    per_row = 256 if slot == "unpack_mxfp8" else 512
    scale = torch.arange(256, dtype=torch.int32).to(torch.uint8)[:, None].repeat(1, per_row // 32)
    if slot == "unpack_mxfp8":
        return (every_byte(256).view(torch.float8_e4m3fn), scale)
    return (every_byte(256), scale, per_row)


#: Block-scale bytes of the code-pair table: 1, NaN (both signs), ±0, the smallest subnormal,
#: the largest finite, -1.
PAIR_BLOCK_SCALES = (0x38, 0x7F, 0xFF, 0x00, 0x80, 0x01, 0x7E, 0xB8)


def nvfp4_tables() -> list[tuple]:
    """Every E2M1 code against every E4M3 block-scale byte (row ``b``: one 16-block, the codes
    0..15, block-scale byte ``b``), once per hostile tensor scale; then every code pair (every
    code byte: the two outputs a 16-bit word packs, so a NaN beside any value) against the
    ``PAIR_BLOCK_SCALES`` (row ``i``: the 256 code bytes, 32 blocks of 16 outputs, each with
    block-scale byte ``PAIR_BLOCK_SCALES[i]``), once per hostile tensor scale."""
    block = torch.arange(256, dtype=torch.int32).to(torch.uint8)[:, None]
    codes = every_byte(256)[:, 0x10:0x100:0x22].contiguous()  # 0x10, 0x32, ..., 0xFE
    pair_block = torch.tensor(PAIR_BLOCK_SCALES, dtype=torch.uint8)[:, None].repeat(1, 32)
    return [(codes, block.view(torch.float8_e4m3fn), tensor_scale, 16)
            for tensor_scale in hostile_scales()] + [
        (every_byte(len(PAIR_BLOCK_SCALES)), pair_block.view(torch.float8_e4m3fn), tensor_scale,
         512) for tensor_scale in hostile_scales()]


def int_grouped_tables() -> list[tuple]:
    """Every field of every width against every hostile scale (row ``i`` has scale ``i``); the
    row length leaves a ragged last group of 24 and, below 8 bits, one field in the last byte."""
    scales = hostile_scales()
    tables = []
    for bits in (2, 4, 8):
        per_byte = 8 // bits
        in_features = 256 * per_byte - (per_byte - 1)
        group = 24
        scale = scales[:, None].repeat(1, -(-in_features // group)).contiguous()
        tables.append((every_byte(len(scales)), scale, bits, group, in_features))
    return tables


def error_arguments(case: dict) -> tuple[tuple, dict]:
    def build(value):
        if isinstance(value, dict):
            return torch.zeros(value["shape"], dtype=getattr(torch, value["dtype"]))
        return value

    kwargs = {k: getattr(torch, v) for k, v in case.get("kwargs", {}).items()}
    return tuple(build(a) for a in case["args"]), kwargs

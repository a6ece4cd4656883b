"""From an unpack slot's arguments to the kernel's configuration (no triton here: cheap to import).

``plan(slot, *args, **kwargs)`` runs the reference's own argument checks
(``libreyolo.quant.packing``'s ``check_unpack_*``: the same TypeError and ValueError) and
describes the work as an ``UnpackPlan``, which the provider's ``accepts`` hands to the call
(``libreyolo.kernels.prepared``) so an input is checked and planned once. Planning reads no
tensor data and copies nothing: float8 tensors go to the kernel as they are and it reads them
through byte pointers, so it reads bits and never casts float8 (docs/architecture.md, "Facts for
kernel authors": the interpreter's fp8 casts are wrong, and triton 3.6 miscompiles some fp8
bitcasts), and a call makes no byte view on the host (a torch call per call:
``benchmarks/NOTES.md``, "Host-side helpers"); GPUs whose Triton takes no float8 pointer
(``byte_views``) get the views.

Everything but the tensors' data is decided by their dtypes, shapes, strides, devices and
layouts and by the other arguments, types included. That description
(``libreyolo.kernels.plan_cache``) is the key of a cache of ``Work``: the checks that passed, the
tiling, the reason a layout or device is declined, and the launch made for it. A call whose
description was seen before checks nothing again and runs no planning code: the checks are pure
functions of the description, so they would pass again. Only what can change between
equal descriptions is decided per call: grad mode here, the pointers' alignment (which Triton
specializes on) in ``triton_launch``. Graph capture, the device and the mode are the declared
capabilities' (``libreyolo.kernels.triton_kit``): the registry declines a captured call before
it is planned, so traced or symbolic sizes never become cache keys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from functools import partial
from typing import NamedTuple

import torch

from libreyolo.deprecated import moved
from libreyolo.kernels.plan_cache import PlanCache, describe
from libreyolo.kernels.prepared import Prepared
from libreyolo.kernels.settings import interpreting
from libreyolo.kernels.triton_kit import FloatKind, cdiv, interpreter_decline, next_power_of_2
from libreyolo.quant import packing
from libreyolo.quant.formats import MX_BLOCK_SIZE, NVFP4_BLOCK_SIZE

from . import unpack_tiles
from .unpack_tiles import MIN_TILE_BYTES, TileConfig


class Format(IntEnum):
    """How the kernel decodes a code and its scale (docs/checkpoint_format.md)."""

    INT_GROUPED = 0  # two's complement int2/int4/int8 fields, float32 scale per group
    NVFP4 = 1  # E2M1 nibbles, E4M3 scale per 16 times a float32 tensor scale
    MXFP4 = 2  # E2M1 nibbles, E8M0 scale per 32
    MXFP8 = 3  # E4M3 bytes, E8M0 scale per 32


#: A program's output bytes and warps come from ``unpack_tiles.toml``, per format and dtype:
#: a 32 KB tile (16K bfloat16 or 8K float32 outputs, 64 or 32 per thread at eight warps) keeps
#: enough bytes in flight per SM; outputs too small to spread over
#: ``MIN_PROGRAMS`` programs at the row's size (an H200 has 132 SMs) get smaller tiles, down to
#: ``MIN_TILE_BYTES`` (one 16-byte store per thread of eight warps).
MIN_PROGRAMS = 256
#: How the compiled kernel rounds bfloat16 outputs: ``"hardware"``, PTX ``cvt.rn.bf16x2.f32`` (one
#: instruction a pair), or ``"integer"``, the instruction's emulation in integer arithmetic (what
#: the interpreter always runs: it truncates bfloat16 casts and runs no inline asm). The same
#: bits either way (``tests/kernels/quant/unpack_checks.py``); a switch for benchmarks
#: (``bench_unpack.py --bf16-rounding``), read when a description is first planned.
BF16_ROUNDINGS = ("hardware", "integer")
BF16_ROUNDING = "hardware"
_FORMAT_NAMES = {Format.NVFP4: "nvfp4", Format.MXFP4: "mxfp4", Format.MXFP8: "mxfp8"}
_DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def tile_config(fmt: Format, bits: int, dtype: torch.dtype) -> TileConfig:
    """The ``unpack_tiles.toml`` row of this format (integer groups by field width) and dtype."""
    name = f"int{bits}" if fmt == Format.INT_GROUPED else _FORMAT_NAMES[fmt]
    return unpack_tiles.TILES[name, _DTYPE_NAMES[dtype]]


def hardware_bf16(dtype: torch.dtype) -> bool:
    """Whether the kernel rounds this output by ``cvt.rn.bf16x2.f32`` (its ``HARDWARE_BF16``):
    bfloat16, compiled, and ``BF16_ROUNDING`` says so (other dtypes pass False: one compiled
    kernel each)."""
    if BF16_ROUNDING not in BF16_ROUNDINGS:
        raise ValueError(f"unpack_plan.BF16_ROUNDING must be one of {BF16_ROUNDINGS}, "
                         f"got {BF16_ROUNDING!r}")
    return dtype == torch.bfloat16 and BF16_ROUNDING == "hardware" and not interpreting()


@dataclass(frozen=True, slots=True)
class WordTiling:
    """How the kernel covers the output: ``words`` words of ``fields`` outputs per row; a program
    per ``block_r`` rows by ``block_g`` scale groups of ``group_words`` words (or, with
    ``scale_per_word``, by one row piece of ``group_words`` words with a scale load per word),
    in 16-byte stores of ``vector`` words; ``programs`` of them on a 1-D grid."""

    fields: int
    words: int
    block_r: int
    block_g: int
    group_words: int
    vector: int
    scale_per_word: bool
    programs: int


def tiling(fmt: Format, bits: int, group: int, rows: int, in_features: int,
           dtype: torch.dtype, config: TileConfig) -> WordTiling:
    """The kernel's tiling: the widest word (at most 64 bits, at most one code byte's fields)
    that divides the row and the group, so that words are stored whole and share one scale;
    groups of a power-of-two number of words become the tile's middle dimension."""
    out_bits = 32 if dtype == torch.float32 else 16
    tile_bytes = min(config.tile_bytes, max(MIN_TILE_BYTES, next_power_of_2(
        rows * in_features * out_bits // 8 // MIN_PROGRAMS)))
    per_byte = 8 // bits
    fields = next(f for f in (4, 2, 1) if f <= per_byte and f * out_bits <= 64
                  and in_features % f == 0 and group % f == 0)
    words = in_features // fields
    tile_words = max(1, tile_bytes * 8 // (fields * out_bits))
    group_words = group // fields
    scale_per_word = group_words & (group_words - 1) != 0 or group_words > tile_words
    if scale_per_word:
        block_g, group_words = 1, min(next_power_of_2(max(1, words)), tile_words)
    else:
        block_g = min(next_power_of_2(max(1, cdiv(words, group_words))),
                      tile_words // group_words)
    block_r = max(1, min(next_power_of_2(rows), tile_words // (block_g * group_words)))
    programs = cdiv(rows, block_r) * cdiv(words, block_g * group_words)
    vector = min(128 // (fields * out_bits), group_words)  # words per 16-byte store
    return WordTiling(fields, words, block_r, block_g, group_words, vector, scale_per_word,
                      programs)


@dataclass(eq=False, slots=True)
class Work:
    """What a description of the arguments decides: one unpack of ``rows x in_features`` outputs
    of ``dtype`` on ``device`` from ``bits``-wide fields, one scale per ``group`` inputs of a row;
    its ``unpack_tiles.toml`` row (``config``: tile size and warps), its tiling,
    the launch grid (three dimensions, as Triton's compiled-kernel launcher indexes it) and the
    kernel's arguments after the four pointers (``kernel_args``: sizes, strides, constants, the
    last ``hardware_bf16``); the reason the kernel declines it whatever the call (or None);
    whether it runs under the interpreter; whether each call views float8 tensors as bytes
    (``byte_views``); a stand-in the output is allocated like (``_output_like``); the launch made
    for it on its first run, in ``launches`` (``unpack_launch``)."""

    fmt: Format
    bits: int
    group: int
    rows: int
    in_features: int
    dtype: torch.dtype
    device: torch.device
    config: TileConfig
    tiling: WordTiling
    grid: tuple[int, int, int]
    kernel_args: tuple
    declined: str | None
    interpreted: bool
    byte_views: bool
    out_like: torch.Tensor
    launches: dict = field(default_factory=dict)


@dataclass(slots=True)
class UnpackPlan(Prepared):
    """One call's unpack: its ``Work`` and tensors as given: ``codes`` (uint8; MXFP8's float8),
    ``scale`` (NVFP4's float8, E8M0 as uint8, float32 otherwise) and, for NVFP4, the float32
    ``tensor_scale``."""

    work: Work
    codes: torch.Tensor
    scale: torch.Tensor
    tensor_scale: torch.Tensor | None

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return tuple(t for t in (self.codes, self.scale, self.tensor_scale) if t is not None)


# Each slot's arguments in the reference's order, defaults applied (the reference's signature).
def _int_grouped(codes, scale, bits, group_size, in_features, dtype=torch.float32):
    return codes, scale, None, (bits, group_size, in_features, dtype)


def _nvfp4(codes, block_scale, tensor_scale, in_features, dtype=torch.float32):
    return codes, block_scale, tensor_scale, (in_features, dtype)


def _mxfp4(codes, scale, in_features, dtype=torch.float32):
    return codes, scale, None, (in_features, dtype)


def _mxfp8(codes, scale, dtype=torch.float32):
    return codes, scale, None, (dtype,)


def _check_int_grouped(codes, scale, tensor_scale, others) -> tuple:
    bits, group_size, in_features = packing.check_unpack_int_grouped(codes, scale, *others)
    return Format.INT_GROUPED, bits, group_size, in_features


def _check_nvfp4(codes, block_scale, tensor_scale, others) -> tuple:
    in_features = packing.check_unpack_nvfp4(codes, block_scale, tensor_scale, *others)
    return Format.NVFP4, 4, NVFP4_BLOCK_SIZE, in_features


def _check_mxfp4(codes, scale, tensor_scale, others) -> tuple:
    return Format.MXFP4, 4, MX_BLOCK_SIZE, packing.check_unpack_mxfp4(codes, scale, *others)


def _check_mxfp8(codes, scale, tensor_scale, others) -> tuple:
    return Format.MXFP8, 8, MX_BLOCK_SIZE, packing.check_unpack_mxfp8(codes, scale, *others)


class SlotPlanner(NamedTuple):
    """How a slot's call is planned: ``bind`` its arguments in the reference's order (codes,
    scale, tensor scale, the rest), ``check`` them with the reference's checks (the format, field
    bits, group and in_features they decide)."""

    bind: Callable
    check: Callable


SLOTS = {
    "unpack_int_grouped": SlotPlanner(_int_grouped, _check_int_grouped),
    "unpack_nvfp4": SlotPlanner(_nvfp4, _check_nvfp4),
    "unpack_mxfp4": SlotPlanner(_mxfp4, _check_mxfp4),
    "unpack_mxfp8": SlotPlanner(_mxfp8, _check_mxfp8),
}
#: Descriptions kept (distinct weight shapes of the models in use); past it the cache restarts.
MAX_CACHED = 4096
_CACHE = PlanCache(MAX_CACHED)


def _work(fmt: Format, bits: int, group: int, in_features: int, dtype: torch.dtype, codes, scale,
          tensor_scale) -> Work:
    rows = codes.shape[0]
    config = tile_config(fmt, bits, dtype)
    tiles = tiling(fmt, bits, group, rows, in_features, dtype, config)
    kernel_args = (rows, tiles.words, *codes.stride(), *scale.stride(), int(fmt), bits, group,
                   int(FloatKind.of(dtype)), tiles.fields, tiles.block_r, tiles.block_g,
                   tiles.group_words, tiles.vector, tiles.scale_per_word, hardware_bf16(dtype))
    tensors = (codes, scale) if tensor_scale is None else (codes, scale, tensor_scale)
    return Work(fmt, bits, group, rows, in_features, dtype, codes.device, config, tiles,
                (tiles.programs, 1, 1), kernel_args, _static_decline(tensors), interpreting(),
                byte_views((codes, scale), codes.device), _output_like(rows, in_features, dtype,
                                                                       codes.device))


def _output_like(rows: int, in_features: int, dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
    """A ``(rows, in_features)`` tensor of ``dtype`` on ``device`` holding one element (every
    stride 0): ``torch.empty_like`` of it is a contiguous output, a call cheaper in torch's
    argument parsing than ``torch.empty(size, dtype=, device=)`` (``benchmarks/NOTES.md``,
    "Host-side helpers"). Where it has at most one element its own zero strides would be
    copied: then it is
    a contiguous tensor itself."""
    if rows * in_features <= 1:
        return torch.empty((rows, in_features), dtype=dtype, device=device)
    return torch.empty((), dtype=dtype, device=device).expand(rows, in_features)


#: The first compute capability for which triton 3.6 compiles a float8 E4M3 pointer argument
#: (``fp8e4nv``; before it, "type fp8e4nv not supported in this architecture").
FLOAT8_POINTERS_FROM = (8, 9)


def byte_views(tensors: tuple, device: torch.device) -> bool:
    """Whether each call hands the kernel its float8 tensors as uint8 views: on GPUs older than
    ``FLOAT8_POINTERS_FROM`` (elsewhere the kernel reads them through byte pointers itself)."""
    float8_on_cuda = device.type == "cuda" and any(t.dtype == torch.float8_e4m3fn for t in tensors)
    return float8_on_cuda and torch.cuda.get_device_capability(device) < FLOAT8_POINTERS_FROM


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.uint8) if tensor.dtype == torch.float8_e4m3fn else tensor


def _static_decline(tensors: tuple) -> str | None:
    """Why the kernel declines these tensors whatever the call (layout, devices apart, CUDA
    tensors under the interpreter), or None."""
    sparse = next((t for t in tensors if t.layout != torch.strided), None)
    if sparse is not None:
        return f"a {sparse.layout} tensor: the kernel reads strided (dense) tensors"
    device = tensors[0].device
    if any(t.device != device for t in tensors):
        return "codes and scales are on different devices (the reference reports it)"
    return interpreter_decline(device)


def plan(slot: str, *args, **kwargs) -> UnpackPlan:
    """The checked and planned unpack of these arguments; raises the reference's errors."""
    bind, check = SLOTS[slot]
    codes, scale, tensor_scale, others = bind(*args, **kwargs)
    # the other arguments as they are and by type (what ``describe`` gives them, without a
    # Python call each, a share of a planned call's host time: benchmarks/NOTES.md, "Host-side
    # helpers")
    key = (slot, describe(codes), describe(scale), describe(tensor_scale), others,
           *map(type, others), interpreting())
    work = _CACHE.get(key)
    if work is None:
        work = _work(*check(codes, scale, tensor_scale, others), others[-1], codes, scale,
                     tensor_scale)
        _CACHE.put(key, work)
    if work.byte_views:
        codes, scale = _as_bytes(codes), _as_bytes(scale)
    return UnpackPlan(work, codes, scale, tensor_scale)


def decline_reason(plan: UnpackPlan) -> str | None:
    """Why the kernel will not take this (already checked) input, or None."""
    tensor_scale = plan.tensor_scale
    if torch.is_grad_enabled() and (plan.scale.requires_grad or plan.codes.requires_grad or (
            tensor_scale is not None and tensor_scale.requires_grad)):
        return "a scale requires grad: the kernel has no backward (the reference keeps autograd)"
    return plan.work.declined


#: The planner of each slot, with the reference's signature.
PLANNERS = {slot: partial(plan, slot) for slot in SLOTS}


__getattr__ = moved(__name__, {"OutKind": "libreyolo.kernels.triton_kit:FloatKind",
                               "Tiling": f"{__name__}:WordTiling"})

"""From a slot's arguments to the one kernel's configuration (no triton here: cheap to import).

Each ``plan_<slot>`` validates its arguments with the shared validators (the same TypeError and
ValueError as the reference) and describes the work as a ``Plan``: a row-major ``(rows, cols)``
view of the input, the value grid, where scales come from, and how wide a *unit* (the columns
that share one computed scale, or simply a tile row) is. ``launch.py`` turns a plan into launches.

Planning reads no tensor data except where the shared validators do (user-given scales and zero
points, once per tensor version), and copies nothing, so the provider's ``accepts`` plans to
validate and hands the plan to the call (a ``Prepared``): one validation per call.

Everything a plan holds but its tensors is a ``Layout``, decided by a description of the
arguments (``libreyolo.kernels.plan_cache``) and kept under it, with the static part of the
kernel's decline and the launches made for it: ``prepare`` runs a planner only for a description
it has not seen, or when a user-given scale or zero point is not the tensor, unchanged, whose
values that plan read. Graph capture, the device and the mode are the declared capabilities'
(``libreyolo.kernels.triton_kit``), which the registry applies before ``prepare``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from enum import IntEnum

import torch

from libreyolo.deprecated import moved
from libreyolo.kernels.plan_cache import PlanCache, describe
from libreyolo.kernels.prepared import Prepared
from libreyolo.kernels.settings import raw_values
from libreyolo.kernels.triton_kit import interpreter_decline
from libreyolo.quant import validation
from libreyolo.quant.formats import (
    E2M1,
    E4M3,
    FP8_FORMATS,
    INT8_AFFINE_MAX,
    INT8_AFFINE_MIN,
    MX_BLOCK_SIZE,
    NVFP4_BLOCK_SIZE,
    NVFP4_TENSOR_SCALE_DIVISOR,
    FloatFormat,
    int_qmax,
)

#: Elements per program on the GPU: 16 KiB of float32 in flight per program, 16 per thread at
#: eight warps (four warps at 32 a thread take ~126 registers, which allows only 16 resident warps
#: per SM; at eight warps a thread needs ~62 and 32 warps fit: ``benchmarks/NOTES.md``, "The
#: fake-quant kernel's tile and launches"). Fixed (no
#: autotuning), so "every configuration" is this one.
GPU_TILE = 4096
#: The widest unit whose amax one program computes from its own tile (a whole row of a dynamic
#: per-row op, or a group). Wider rows take the two-pass route through amax partials.
MAX_UNIT = 8192
#: At most this many partial maxima per row in the amax pass; the quantizing pass reduces them.
MAX_PARTIALS = 128
#: NVFP4 without ``global_amax`` on a tensor of at most this many quantizing programs (GPU
#: tiles) takes one launch: each program reads the whole tensor for its amax (256 KiB of float32
#: at most, from L2), instead of an amax pass first (a second launch, which made small NVFP4 calls
#: the slowest on the host: ``benchmarks/NOTES.md``, "The fake-quant kernel's tile and
#: launches"). Larger tensors keep the pass.
INLINE_AMAX_TILES = 16
#: The same for the single-row pass of a whole tensor's amax (NVFP4 without ``global_amax``): 128
#: programs, one per SM, each looping over its chunks, kept too few loads in flight
#: (``benchmarks/NOTES.md``, "The fake-quant kernel's tile and launches").
TENSOR_PARTIALS = 512


class ScaleSource(IntEnum):
    TENSOR = 0  # scale[0]
    PER_ROW = 1  # scale[row % channels]
    PER_COL = 2  # scale[col]
    FROM_AMAX = 3  # computed from a finite amax (rule 6)


class AmaxFrom(IntEnum):
    UNIT = 0  # the unit's own elements, inside the tile
    ROW_PARTIALS = 1  # the amax pass's partial maxima of the unit's row


class ScaleRule(IntEnum):
    DIVIDE = 0  # amax / amax_divisor
    E8M0 = 1  # 2^clamp(floor(log2 amax) - element_emax, -127, 127)
    NVFP4 = 2  # E4M3(unit amax / (6 * s_t)) * s_t, s_t = tensor amax / 2688


@dataclass(frozen=True)
class Grid:
    """The values a format can take, as the kernel rounds onto them."""

    floating: bool
    qmin: float = 0.0
    qmax: float = 0.0
    mbits: int = 0
    emin: int = 0
    fmax: float = 0.0

    # Memoized: a grid is immutable, and building one costs a frozen dataclass's __init__ per call.
    @classmethod
    @functools.cache
    def integers(cls, qmin: int, qmax: int) -> Grid:
        return cls(False, qmin=float(qmin), qmax=float(qmax))

    @classmethod
    @functools.cache
    def of(cls, fmt: FloatFormat) -> Grid:
        return cls(True, mbits=fmt.mantissa_bits, emin=fmt.min_normal_exponent, fmax=fmt.max_value)


@dataclass(frozen=True, eq=False)
class Layout:
    """Everything about one fake-quantization but its tensors (see the module docstring):
    a row-major ``(rows, cols)`` view of the input and how its scales are found."""

    rows: int
    cols: int
    grid: Grid
    scale_source: ScaleSource
    channels: int = 1  # PER_ROW: rows cycle through this many channels
    unit: int = 0  # 0: the tile's width (no per-unit scale)
    amax_from: AmaxFrom = AmaxFrom.UNIT
    scale_rule: ScaleRule = ScaleRule.DIVIDE
    amax_divisor: float = 1.0
    element_emax: int = 0
    zero_point: int | None = None
    block_scale_grid: Grid | None = None  # NVFP4: the grid block scales are rounded onto
    tensor_amax_given: bool = False  # NVFP4: the call passes its tensor amax (else computed)
    #: what runs for this layout (``launch.Passes``, with its launches), by tile
    passes: dict = field(default_factory=dict, compare=False, repr=False)


@dataclass(slots=True)
class Plan(Prepared):
    """One call's fake-quantization: its ``Layout`` and tensors. Made on every call (from a
    kept layout), so not frozen: a frozen dataclass sets each field through
    ``object.__setattr__``; nothing changes a plan after it is made."""

    layout: Layout
    x: torch.Tensor  # the input as given (launch makes it contiguous)
    scale: torch.Tensor | None = None  # a given scale (TENSOR, PER_ROW, PER_COL), contiguous
    tensor_amax: torch.Tensor | None = None  # NVFP4: a given global amax (else computed)


def _plan(x, rows, cols, grid, source, *, scale=None, tensor_amax=None, **layout) -> Plan:
    return Plan(Layout(rows, cols, grid, source, **layout), x, scale, tensor_amax)


def _channel_view(x: torch.Tensor, axis: int) -> tuple[int, int, ScaleSource]:
    """(rows, cols, source) of the view in which channel ``axis`` is constant per row (inner
    dimensions exist) or is the column (``axis`` is the last dimension)."""
    channels = x.shape[axis]
    inner = math.prod(x.shape[axis + 1 :])
    if inner == 1:
        return x.numel() // max(channels, 1), channels, ScaleSource.PER_COL
    return (x.numel() // inner if inner else 0), inner, ScaleSource.PER_ROW


def _last_dim_view(x: torch.Tensor) -> tuple[int, int]:
    cols = x.shape[-1] if x.dim() else 1
    return (x.numel() // cols if cols else 0), cols


def _per_row_amax(x: torch.Tensor, grid: Grid, divisor: float) -> Plan:
    """Scales from each row's finite amax along the last dim: in-tile when the row fits one unit,
    else through the amax pass."""
    rows, cols = _last_dim_view(x)
    wide = cols > MAX_UNIT
    return _plan(
        x, rows, cols, grid, ScaleSource.FROM_AMAX,
        unit=0 if wide else cols,
        amax_from=AmaxFrom.ROW_PARTIALS if wide else AmaxFrom.UNIT,
        amax_divisor=divisor,
    )


def plan_int8_per_channel(x, scale, axis=0) -> Plan:
    validation.check_float_tensor("x", x)
    validation.check_min_rank("x", x, 1)
    axis = validation.check_axis("axis", axis, x.dim())
    validation.check_scale("scale", scale, (x.shape[axis],), x.device)
    rows, cols, source = _channel_view(x, axis)
    return _plan(x, rows, cols, Grid.integers(-127, 127), source,
                 scale=scale.contiguous(), channels=x.shape[axis])


def plan_int8_affine(x, scale, zero_point) -> Plan:
    validation.check_float_tensor("x", x)
    validation.check_scale("scale", scale, (), x.device)
    zero_point = validation.check_zero_point("zero_point", zero_point)
    return _plan(x, 1, x.numel(), Grid.integers(INT8_AFFINE_MIN, INT8_AFFINE_MAX),
                 ScaleSource.TENSOR, scale=scale.contiguous(), zero_point=zero_point)


def plan_fp8(x, scale=None, *, fmt="e4m3", axis=None) -> Plan:
    fmt, mode, axis = validation.check_fp8_arguments(x, scale, fmt, axis)
    grid = Grid.of(FP8_FORMATS[fmt])
    if mode == "row":
        return _per_row_amax(x, grid, grid.fmax)
    if mode == "tensor":
        return _plan(x, 1, x.numel(), grid, ScaleSource.TENSOR, scale=scale.contiguous())
    rows, cols, source = _channel_view(x, axis)
    return _plan(x, rows, cols, grid, source, scale=scale.contiguous(), channels=x.shape[axis])


def plan_int_grouped(w, bits, group_size) -> Plan:
    validation.check_float_tensor("w", w)
    validation.check_rank("w", w, 2)
    bits = validation.check_bits("bits", bits)
    group_size = validation.check_positive_int("group_size", group_size)
    qmax = int_qmax(bits)
    grid = Grid.integers(-qmax, qmax)
    if group_size >= w.shape[1]:  # one group per row
        return _per_row_amax(w, grid, float(qmax))
    return _plan(w, w.shape[0], w.shape[1], grid, ScaleSource.FROM_AMAX,
                 unit=group_size, amax_divisor=float(qmax))


def _nvfp4(x: torch.Tensor, tensor_amax: torch.Tensor | None) -> Plan:
    rows, cols = _last_dim_view(x)
    return _plan(x, rows, cols, Grid.of(E2M1), ScaleSource.FROM_AMAX,
                 unit=NVFP4_BLOCK_SIZE, scale_rule=ScaleRule.NVFP4,
                 amax_divisor=NVFP4_TENSOR_SCALE_DIVISOR, tensor_amax=tensor_amax,
                 block_scale_grid=Grid.of(E4M3), tensor_amax_given=tensor_amax is not None)


def plan_nvfp4_weight(w, global_amax=None) -> Plan:
    validation.check_float_tensor("w", w)
    validation.check_rank("w", w, 2)
    if global_amax is not None:
        validation.check_scale("global_amax", global_amax, (), w.device)
    return _nvfp4(w, global_amax)


def plan_nvfp4_dynamic(x) -> Plan:
    validation.check_float_tensor("x", x)
    validation.check_min_rank("x", x, 1)
    return _nvfp4(x, None)


def _mx(x: torch.Tensor, element: FloatFormat) -> Plan:
    rows, cols = _last_dim_view(x)
    return _plan(x, rows, cols, Grid.of(element), ScaleSource.FROM_AMAX,
                 unit=MX_BLOCK_SIZE, scale_rule=ScaleRule.E8M0,
                 element_emax=element.max_exponent)


def _mx_weight(element: FloatFormat):
    def plan(w) -> Plan:
        validation.check_float_tensor("w", w)
        validation.check_rank("w", w, 2)
        return _mx(w, element)

    return plan


def _mx_dynamic(element: FloatFormat):
    def plan(x) -> Plan:
        validation.check_float_tensor("x", x)
        validation.check_min_rank("x", x, 1)
        return _mx(x, element)

    return plan


#: Slot name -> the function that plans it from the slot's own arguments.
PLANNERS = {
    "fake_quant_int8_per_channel": plan_int8_per_channel,
    "fake_quant_int8_affine": plan_int8_affine,
    "fake_quant_fp8": plan_fp8,
    "fake_quant_int_grouped": plan_int_grouped,
    "fake_quant_nvfp4_weight": plan_nvfp4_weight,
    "fake_quant_nvfp4_dynamic": plan_nvfp4_dynamic,
    "fake_quant_mxfp4_weight": _mx_weight(E2M1),
    "fake_quant_mxfp4_dynamic": _mx_dynamic(E2M1),
    "fake_quant_mxfp8_weight": _mx_weight(E4M3),
    "fake_quant_mxfp8_dynamic": _mx_dynamic(E4M3),
}


_MAX_ELEMENTS = 2**31  # element offsets inside a row are int32


def static_decline(plan: Plan) -> str | None:
    """Why the kernels will not take this (already validated) input whatever the call, or None:
    what they cannot hold, or a CUDA tensor under the interpreter."""
    x, layout = plan.x, plan.layout
    if x.layout != torch.strided:
        return f"x has layout {x.layout}: the kernels read strided (dense) tensors"
    if x.numel() >= _MAX_ELEMENTS:
        return f"x has {x.numel()} elements: the kernels index fewer than 2^31"
    wide_group = layout.scale_source == ScaleSource.FROM_AMAX and \
        layout.amax_from == AmaxFrom.UNIT
    if wide_group and layout.unit > MAX_UNIT:
        return f"groups of {layout.unit} columns: one program holds at most {MAX_UNIT}"
    return interpreter_decline(x.device)


#: Layouts kept (distinct call descriptions of the models in use); past it the cache restarts.
MAX_CACHED = 4096
_CACHE = PlanCache(MAX_CACHED)
_ROLES = ("x", "scale", "tensor_amax")
#: ``isinstance(a, torch.Tensor)`` as one C function, for ``filter``: no Python frame per argument
_is_tensor = torch.Tensor.__instancecheck__
#: Keyword values a key holds as they are, beside their types (what ``describe`` gives them,
#: without a Python call each): hashable, compared by value, and never holding a tensor.
_PLAIN = frozenset({str, int, float, bool, type(None)})


def prepare(slot: str, *args, **kwargs) -> Plan | str:
    """The validated plan of this call, or the reason the kernels decline it (bad input raises
    the reference's error). A description seen before reuses its layout and decline (see the
    module docstring).

    The key holds ``TRITON_INTERPRET`` as set (the static decline depends on it: equal values,
    equal decisions), and keywords only when there are some: plain values (``fmt``, ``axis``) as
    they are with their types, others described. A call with keywords took measurably more host
    time than one without (``benchmarks/NOTES.md``, "Host-side helpers")."""
    watched = tuple(filter(_is_tensor, args[1:]))
    if not kwargs:
        key = (slot, raw_values()[2], *map(describe, args))
    else:
        values = kwargs.values()
        types = tuple(map(type, values))
        if _PLAIN.issuperset(types):  # names, values, types: flat, no tuple per keyword
            key = (slot, raw_values()[2], *map(describe, args), *kwargs, *values, *types)
        else:
            key = (slot, raw_values()[2], *map(describe, args), *kwargs, *map(describe, values))
            watched = (*watched, *filter(_is_tensor, values))
    kept = _CACHE.get(key, watched)
    if kept is not None:
        return kept[1](args, kwargs)
    plan = PLANNERS[slot](*args, **kwargs)
    declined = static_decline(plan)
    where = tuple(_where(getattr(plan, role), args, kwargs) for role in _ROLES)
    if all(w is not False for w in where):  # else a tensor was copied: planned every call
        _CACHE.put(key, (plan.layout, _binder(plan.layout, declined, where)), watched)
    return declined or plan


def _binder(layout: Layout, declined: str | None, where: tuple):
    """``bind(args, kwargs)``: the kept answer for a later call of the same description, its
    decline or its ``Plan`` on that call's tensors (``where`` each role sits, from ``_where``);
    the common shapes of ``where`` get a function without a loop."""
    if declined is not None:
        return lambda args, kwargs: declined
    x_at, scale_at, amax_at = where
    if type(x_at) is int and amax_at is None:
        if scale_at is None:
            return lambda args, kwargs: Plan(layout, args[x_at])
        if type(scale_at) is int:
            return lambda args, kwargs: Plan(layout, args[x_at], args[scale_at])
    return lambda args, kwargs: Plan(layout, *(_pick(args, kwargs, w) for w in where))


def _where(tensor, args: tuple, kwargs: dict):
    """Where ``tensor`` sits among the arguments (an index or a keyword; None for None), or
    False when it is none of them."""
    if tensor is None:
        return None
    for index, arg in enumerate(args):
        if arg is tensor:
            return index
    for name, arg in kwargs.items():
        if arg is tensor:
            return name
    return False


def _pick(args: tuple, kwargs: dict, where):
    if where is None:
        return None
    return args[where] if type(where) is int else kwargs[where]


__getattr__ = moved(__name__, {"InputKind": "libreyolo.kernels.triton_kit:FloatKind"})

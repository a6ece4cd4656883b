"""Run a ``Plan``: the launches, and the autograd wiring of the straight-through backward.

Forward is one launch of ``fake_quant_kernel``. Two kinds of op need a first pass
(``finite_amax_partials_kernel``), because their scale depends on more elements than one tile
holds: NVFP4 without a given ``global_amax`` (the tensor scale needs the whole tensor's amax) and
dynamic per-row scales of rows wider than ``MAX_UNIT``. Backward is one launch of the same kernel
in its backward mode: it recomputes the mask from ``x`` and the saved partials instead of
storing a mask in forward, so forward writes nothing but its output.

Non-contiguous inputs are copied to a contiguous tensor first (an explicit, documented copy: the
kernel then needs no strides, and the copy is the only extra pass such inputs cost).

Each launch is made once per layout, pass and tile (a ``triton_launch.Launcher`` kept on the
``Layout``), so a steady-state call allocates its output and relaunches the compiled kernel with
its tensors: the sizes, grid and constants were worked out on the first call.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ...triton_launch import Launcher
from .kernels import fake_quant_kernel, finite_amax_partials_kernel
from .plan import (
    GPU_TILE,
    MAX_PARTIALS,
    TENSOR_PARTIALS,
    AmaxFrom,
    Grid,
    InputKind,
    Layout,
    Plan,
    ScaleRule,
)

_BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}
_NO_BLOCK_SCALES = Grid(True)  # the kernel's SCALE_* arguments when a plan has no block scales


def cdiv(n: int, d: int) -> int:
    """ceil(n / d) for ints, in plain Python: ``triton.cdiv`` called from the host goes through
    a JIT function's ``__call__`` (five calls cost ~40% of a launch's own Python, cProfile)."""
    return -(-n // d)


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= n, 0 for n <= 0 (as ``triton.next_power_of_2``)."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


def _as_loaded(x: torch.Tensor) -> torch.Tensor:
    """The kernel reads bfloat16 as int16 bits (it widens them itself); others as they are."""
    return x.view(torch.int16) if x.dtype == torch.bfloat16 else x


def _warps(elements: int) -> int:
    """Eight warps from a 4096-element tile up (16 float32 per thread: ~62 registers, so 32
    warps stay resident per SM), four below (interpreter-only tiles)."""
    return 8 if elements >= 4096 else 4


def amax_partials(
    x: torch.Tensor, rows: int, cols: int, chunk: int, max_partials: int = MAX_PARTIALS,
    launchers: dict | None = None,
) -> torch.Tensor:
    """``(rows, n)`` partial finite maxima of a row-major ``(rows, cols)`` tensor,
    n <= ``max_partials`` (a power of two); its launch is kept in ``launchers`` (a layout's)."""
    key = ("amax", rows, cols, chunk, max_partials)
    launchers = {} if launchers is None else launchers
    kept = launchers.get(key)
    if kept is None:
        chunks = cdiv(cols, chunk)
        iterations = next_power_of_2(cdiv(chunks, max_partials))
        n_partials = max(1, cdiv(chunks, iterations))
        kept = launchers[key] = (n_partials, Launcher(
            finite_amax_partials_kernel, (rows, n_partials), x, x, cols, n_partials,
            IN_KIND=int(InputKind.of(x.dtype)), CHUNK=chunk, ITERATIONS=iterations,
            num_warps=_warps(chunk),
        ))
    n_partials, launcher = kept
    partials = torch.empty((rows, n_partials), dtype=torch.float32, device=x.device)
    launcher(_as_loaded(x), partials)
    return partials


class Tiling(NamedTuple):
    """How the quantizing pass covers a plan: ``programs`` tiles of ``block_units`` units."""

    unit: int
    unit_pad: int
    block_units: int
    units_per_row: int
    n_units: int
    programs: int


def tiling(layout: Layout, tile: int = GPU_TILE) -> Tiling:
    """Units are the layout's own (a group, a block, a row) or ``tile``-wide pieces of a row."""
    unit = layout.unit or min(next_power_of_2(layout.cols), tile)
    unit_pad = next_power_of_2(unit)
    block_units = max(1, tile // unit_pad)
    units_per_row = cdiv(layout.cols, unit)
    n_units = layout.rows * units_per_row
    return Tiling(unit, unit_pad, block_units, units_per_row, n_units,
                  cdiv(n_units, block_units))


def first_pass(plan: Plan, x: torch.Tensor, tile: int) -> torch.Tensor | None:
    """The amax partials the quantizing pass reads, or None when it needs none."""
    layout = plan.layout
    if x.numel() == 0:
        return None
    if layout.scale_rule == ScaleRule.NVFP4:
        if plan.tensor_amax is not None:
            return plan.tensor_amax.reshape(1, 1)
        return amax_partials(x, 1, x.numel(), tile, TENSOR_PARTIALS, layout.launchers)
    if layout.amax_from == AmaxFrom.ROW_PARTIALS:
        return amax_partials(x, layout.rows, layout.cols, tile, launchers=layout.launchers)
    return None


def quantize(
    plan: Plan, x: torch.Tensor, partials: torch.Tensor | None,
    grad: torch.Tensor | None = None, tile: int = GPU_TILE,
) -> torch.Tensor:
    """Forward output (``grad is None``) or the straight-through gradient, for contiguous ``x``."""
    out = torch.empty_like(x)
    if x.numel() == 0:
        return out
    layout = plan.layout
    backward = grad is not None
    key = ("quantize", tile, backward)
    launcher = layout.launchers.get(key)
    if launcher is None:
        launcher = layout.launchers[key] = _quantize_launcher(layout, plan, x, partials, tile,
                                                              backward)
    bits = _BITS[x.dtype]
    launcher(_as_loaded(x), out.view(bits), x if grad is None else grad.view(bits),
             plan.scale if plan.scale is not None else x,
             partials if partials is not None else x)
    return out


def _quantize_launcher(layout: Layout, plan: Plan, x: torch.Tensor,
                       partials: torch.Tensor | None, tile: int, backward: bool) -> Launcher:
    """The quantizing pass of ``layout`` (tensors are placeholders: each call passes its own)."""
    t = tiling(layout, tile)
    n_partials = partials.shape[-1] if partials is not None else 1
    grid, block_scales = layout.grid, layout.block_scale_grid or _NO_BLOCK_SCALES
    return Launcher(
        fake_quant_kernel, (t.programs,), x, x, x, x, x,
        t.n_units, t.units_per_row, layout.cols, t.unit, layout.channels, n_partials,
        layout.zero_point or 0,
        IN_KIND=int(InputKind.of(x.dtype)),
        FLOAT_GRID=grid.floating, QMIN=grid.qmin, QMAX=grid.qmax,
        MBITS=grid.mbits, EMIN=grid.emin, FMAX=grid.fmax,
        SCALE_SOURCE=int(layout.scale_source), AMAX_FROM=int(layout.amax_from),
        SCALE_RULE=int(layout.scale_rule), AMAX_DIVISOR=layout.amax_divisor,
        ELEMENT_EMAX=layout.element_emax, SCALE_MBITS=block_scales.mbits,
        SCALE_EMIN=block_scales.emin, SCALE_MAX=block_scales.fmax,
        HAS_ZERO_POINT=bool(layout.zero_point),
        BACKWARD=backward,
        BLOCK_UNITS=t.block_units, UNIT_PAD=t.unit_pad,
        PARTIALS_PAD=next_power_of_2(n_partials),
        num_warps=_warps(t.block_units * t.unit_pad), enable_fp_fusion=False,
    )


class _StraightThrough(torch.autograd.Function):
    """Forward: the fake-quantized tensor. Backward: ``where(mask, g, 0)`` for ``x`` only
    (scales, given or computed, are constants: rule 8)."""

    @staticmethod
    def forward(ctx, x, plan, tile):
        x = x.detach().contiguous()
        partials = first_pass(plan, x, tile)
        # saved for backward, so autograd refuses a backward after x was changed in place (the
        # mask is recomputed from x, and must be the forward's)
        ctx.save_for_backward(x)
        ctx.plan, ctx.partials, ctx.tile = plan, partials, tile
        return quantize(plan, x, partials, tile=tile)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        grad = g.reshape(x.shape).contiguous()
        return quantize(ctx.plan, x, ctx.partials, grad, ctx.tile), None, None


def run(plan: Plan, tile: int = GPU_TILE) -> torch.Tensor:
    """Fake-quantize ``plan.x``; differentiable (straight-through) when it requires grad."""
    if torch.is_grad_enabled() and plan.x.requires_grad:
        return _StraightThrough.apply(plan.x, plan, tile)
    x = plan.x.contiguous()
    return quantize(plan, x, first_pass(plan, x, tile), tile=tile)

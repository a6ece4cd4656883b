"""Run a ``Plan``: the launches, and the autograd wiring of the straight-through backward.

Forward is one launch of ``fake_quant_kernel``. Two kinds of op need a first pass
(``finite_amax_partials_kernel``), because their scale depends on more elements than one tile
holds: NVFP4 without a given ``global_amax`` on a tensor of more than ``INLINE_AMAX_TILES``
tiles (the tensor scale needs the whole tensor's amax; on fewer tiles each quantizing program
reads the whole tensor itself, in one launch) and dynamic per-row scales of rows wider than
``MAX_UNIT``. Backward is one launch of the same kernel in its backward mode: it recomputes the
mask from ``x`` and the saved partials (or the inline amax, from the same ``x``) instead of
storing a mask in forward, so forward writes nothing but its output.

Non-contiguous inputs are copied to a contiguous tensor first (an explicit, documented copy: the
kernel then needs no strides, and the copy is the only extra pass such inputs cost).

What a call runs is worked out once per layout and tile (a ``Passes`` kept on the ``Layout``,
holding its ``triton_launch.Launcher``s in ``launches``), so a steady-state call allocates its
output and relaunches the compiled kernel with its tensors: the sizes, grid, constants and which
passes run were decided on the first call.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from libreyolo.quant.straight_through import StraightThrough

from ...triton_kit import FloatKind, cdiv, next_power_of_2
from ...triton_launch import Launcher
from .kernels import fake_quant_kernel, finite_amax_partials_kernel
from .plan import (
    GPU_TILE,
    INLINE_AMAX_TILES,
    MAX_PARTIALS,
    TENSOR_PARTIALS,
    AmaxFrom,
    Grid,
    Layout,
    Plan,
    ScaleRule,
)

_BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}
_NO_BLOCK_SCALES = Grid(True)  # the kernel's SCALE_* arguments when a plan has no block scales


def _as_loaded(x: torch.Tensor) -> torch.Tensor:
    """The kernel reads bfloat16 as int16 bits (it widens them itself); others as they are."""
    return x.view(torch.int16) if x.dtype == torch.bfloat16 else x


def _warps(elements: int) -> int:
    """Eight warps from a 4096-element tile up (16 float32 per thread: ~62 registers, so 32
    warps stay resident per SM), four below (interpreter-only tiles)."""
    return 8 if elements >= 4096 else 4


def _amax_launcher(x: torch.Tensor, rows: int, cols: int, chunk: int,
                   max_partials: int) -> tuple[int, Launcher]:
    """(n, the launch) of the amax pass writing ``(rows, n)`` partial finite maxima of a
    row-major ``(rows, cols)`` tensor, n <= ``max_partials`` (a power of two)."""
    chunks = cdiv(cols, chunk)
    iterations = next_power_of_2(cdiv(chunks, max_partials))
    n_partials = max(1, cdiv(chunks, iterations))
    return n_partials, Launcher(
        finite_amax_partials_kernel, (rows, n_partials), x, x, cols, n_partials,
        IN_KIND=int(FloatKind.of(x.dtype)), CHUNK=chunk, ITERATIONS=iterations,
        num_warps=_warps(chunk),
    )


def amax_partials(x: torch.Tensor, rows: int, cols: int, chunk: int,
                  max_partials: int = MAX_PARTIALS) -> torch.Tensor:
    """``(rows, n)`` partial finite maxima of a row-major ``(rows, cols)`` tensor,
    n <= ``max_partials`` (a power of two): the amax pass on its own."""
    n_partials, launcher = _amax_launcher(x, rows, cols, chunk, max_partials)
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


def inline_amax_iterations(layout: Layout, t: Tiling) -> int:
    """How many tile-sized chunks (``block_units * unit_pad`` elements, as the kernel reads them)
    each program of an NVFP4 tensor without a given amax reads to find the tensor amax itself (a
    power of two), or 0 when the tensor spans more than
    ``INLINE_AMAX_TILES`` programs and an amax pass runs first (or the op needs no tensor amax).

    Small tensors are where a second launch costs most (its host time, not its GPU time, is the
    call's cost) and where each program reading the whole tensor costs least (it sits in L2)."""
    if layout.scale_rule != ScaleRule.NVFP4 or layout.tensor_amax_given:
        return 0
    if t.programs > INLINE_AMAX_TILES:
        return 0
    return next_power_of_2(cdiv(layout.rows * layout.cols, t.block_units * t.unit_pad))


class Passes:
    """What every call of one layout at one tile runs, worked out on its first call: whether an
    amax pass runs first (its launch is in ``launches`` as ``"amax"`` when it does), and the
    quantizing launches (``"forward"`` now, ``"backward"`` on first use), so a steady-state call
    allocates its output and relaunches."""

    __slots__ = ("layout", "tiling", "empty", "bits", "as_int16", "inline_iterations",
                 "amax_rows", "n_partials", "launches")

    def __init__(self, plan: Plan, x: torch.Tensor, tile: int) -> None:
        layout = self.layout = plan.layout
        self.bits = _BITS[x.dtype]
        self.as_int16 = x.dtype == torch.bfloat16  # the kernel widens bfloat16 bits itself
        self.amax_rows, self.n_partials, self.tiling, self.launches = 1, 1, None, {}
        self.inline_iterations = 0
        self.empty = layout.rows * layout.cols == 0
        if self.empty:  # nothing to launch (and no tiling: a unit of 0 columns)
            return
        self.tiling = tiling(layout, tile)
        self.inline_iterations = inline_amax_iterations(layout, self.tiling)
        if layout.scale_rule == ScaleRule.NVFP4 and not layout.tensor_amax_given and \
                not self.inline_iterations:
            self.n_partials, self.launches["amax"] = _amax_launcher(
                x, 1, layout.rows * layout.cols, tile, TENSOR_PARTIALS)
        elif layout.amax_from == AmaxFrom.ROW_PARTIALS:
            self.amax_rows = layout.rows
            self.n_partials, self.launches["amax"] = _amax_launcher(
                x, layout.rows, layout.cols, tile, MAX_PARTIALS)
        self.launches["forward"] = self._quantize_launcher(x, backward=False)

    def first_pass(self, plan: Plan, x: torch.Tensor) -> torch.Tensor | None:
        """The amax partials (or the given tensor amax) the quantizing pass reads, or None."""
        amax = self.launches.get("amax")
        if amax is not None:
            partials = torch.empty((self.amax_rows, self.n_partials), dtype=torch.float32,
                                   device=x.device)
            amax(x.view(torch.int16) if self.as_int16 else x, partials)
            return partials
        return plan.tensor_amax

    def quantize(self, plan: Plan, x: torch.Tensor, partials: torch.Tensor | None,
                 grad: torch.Tensor | None = None) -> torch.Tensor:
        """Forward output (``grad is None``) or the straight-through gradient, for contiguous
        ``x``."""
        out = torch.empty_like(x)
        if self.empty:
            return out
        if grad is None:
            launch, third = self.launches["forward"], x
        else:
            launch = self.launches.get("backward") or self.launches.setdefault(
                "backward", self._quantize_launcher(x, backward=True))
            third = grad.view(self.bits)
        scale = plan.scale
        launch(x.view(torch.int16) if self.as_int16 else x,
                 out.view(torch.int16) if self.as_int16 else out, third,
                 x if scale is None else scale, x if partials is None else partials)
        return out

    def _quantize_launcher(self, x: torch.Tensor, backward: bool) -> Launcher:
        """The quantizing pass (tensors are placeholders: each call passes its own)."""
        layout, t = self.layout, self.tiling
        grid, block_scales = layout.grid, layout.block_scale_grid or _NO_BLOCK_SCALES
        return Launcher(
            fake_quant_kernel, (t.programs,), x, x, x, x, x,
            t.n_units, t.units_per_row, layout.cols, t.unit, layout.channels, self.n_partials,
            layout.zero_point or 0,
            IN_KIND=int(FloatKind.of(x.dtype)),
            FLOAT_GRID=grid.floating, QMIN=grid.qmin, QMAX=grid.qmax,
            MBITS=grid.mbits, EMIN=grid.emin, FMAX=grid.fmax,
            SCALE_SOURCE=int(layout.scale_source), AMAX_FROM=int(layout.amax_from),
            SCALE_RULE=int(layout.scale_rule), AMAX_DIVISOR=layout.amax_divisor,
            ELEMENT_EMAX=layout.element_emax, SCALE_MBITS=block_scales.mbits,
            SCALE_EMIN=block_scales.emin, SCALE_MAX=block_scales.fmax,
            HAS_ZERO_POINT=bool(layout.zero_point),
            BACKWARD=backward,
            BLOCK_UNITS=t.block_units, UNIT_PAD=t.unit_pad,
            PARTIALS_PAD=next_power_of_2(self.n_partials),
            INLINE_AMAX_ITERATIONS=self.inline_iterations,
            num_warps=_warps(t.block_units * t.unit_pad), enable_fp_fusion=False,
        )


def passes(plan: Plan, x: torch.Tensor, tile: int) -> Passes:
    """The layout's ``Passes`` at ``tile``, made on its first call (``x``: a contiguous input)."""
    kept = plan.layout.passes.get(tile)
    if kept is None:
        kept = plan.layout.passes[tile] = Passes(plan, x, tile)
    return kept


class _KernelStep:
    """The straight-through step of the kernels (``libreyolo.quant.straight_through``): the
    backward is one launch of the quantizing pass with the upstream gradient, which writes
    ``where(mask, g, 0)``."""

    @staticmethod
    def forward(x, plan, tile):
        x = x.detach().contiguous()
        kept = passes(plan, x, tile)
        partials = kept.first_pass(plan, x)
        # x is saved, so autograd refuses a backward after x was changed in place (the mask is
        # recomputed from x, and must be the forward's: the same partials, or for a tensor amax
        # found inline the same x, read whole again)
        return kept.quantize(plan, x, partials), (x,), (kept, partials)

    @staticmethod
    def backward(saved, state, g, plan, tile):
        (x,), (kept, partials) = saved, state
        return kept.quantize(plan, x, partials, g.reshape(x.shape).contiguous())


_KERNEL_STEP = _KernelStep()


def run(plan: Plan, tile: int = GPU_TILE) -> torch.Tensor:
    """Fake-quantize ``plan.x``; differentiable (straight-through) when it requires grad."""
    x = plan.x
    if x.requires_grad and torch.is_grad_enabled():
        return StraightThrough.apply(x, _KERNEL_STEP, plan, tile)
    x = x.contiguous()
    kept = passes(plan, x, tile)
    return kept.quantize(plan, x, kept.first_pass(plan, x))


def backward(plan: Plan, grad: torch.Tensor, tile: int = GPU_TILE) -> torch.Tensor:
    """The straight-through gradient of ``plan.x`` for ``grad`` without a recorded forward (the
    slot's operator under ``torch.compile``): the backward launch ``_KernelStep`` makes,
    after the same first pass its forward made."""
    x = plan.x.detach().contiguous()
    kept = passes(plan, x, tile)
    return kept.quantize(plan, x, kept.first_pass(plan, x), grad.reshape(x.shape).contiguous())

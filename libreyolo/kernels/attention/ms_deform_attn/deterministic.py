"""The deterministic MSDA backward: a value gradient with the same bits every run.

The atomic backward adds each sample's share of the value gradient with float32 ``atomic_add``;
the order of those adds changes run to run, and float addition is not associative, so the value
gradient's last bits do too (the location and weight gradients are stored once per point, and
repeat). When ``torch.are_deterministic_algorithms_enabled()`` is true at the backward call (a
host flag, read per call), the classic and ragged Triton backwards take this path instead
(``triton_common.gradients``):

1. ``fixed``: a zeroed int64 buffer of ``HEADER + value.numel()`` elements (one allocation, like
   the other gradient buffers; no host sync, CUDA-graph capturable).
2. ``gradient_bound_kernel`` writes its header, on the device: ``H0 = max fl(|g| * N)`` over the
   output gradient and ``H1 = max |w|`` over the attention weights (integer atomic maxima of their
   bit patterns). ``N`` bounds the contributions one value element can receive: ``len_q`` times
   the points a query takes per head on one level (classic; all its points, ragged): a sample's
   four corners are four different pixels of its own level, so an element is hit at most once
   per sample, and only by its (batch, head)'s queries' samples of its level.
3. The backward kernel runs unchanged but for its value gradient's pointer, which is ``fixed``
   (it adds past the header): each contribution ``c`` (the float32 the atomic backward would
   add, computed the same way) becomes ``round(c * s)`` (to nearest, ties to even) and is added
   with an int64 atomic. Integer addition is associative, so any order gives the same sum. The
   scale ``s`` is a power of two made from the header in each program: ``B = fl(H0 * H1)``
   bounds ``N * max|c|`` (bilinear corner weights are at most 1, discrete sampling has none),
   ``e = ceil(log2 B)`` (at least ``MIN_EXPONENT = -64``) and ``s = 2**(62 - e)``: every partial
   sum stays below ``2**62 (1 + 6u) + N / 2`` (``u = 2**-24``: the roundings of ``c`` and
   ``B``), inside int64's ``2**63``.
4. ``fixed_point_to_float_kernel`` writes ``float32(fixed) / s`` (the conversion rounds once, the
   multiply by ``2**(e - 62)`` is exact) into the float32 gradient buffer, cast to the input dtype
   as the atomic backward casts it.

**Error.** Against the exact sum of the same float32 contributions, each of the at most ``N``
hits of an element rounds by at most half a unit ``1 / s = 2**(e - 62) < 2 B 2**-62``, and the
conversion once: ``|out - sum c| <= N B 2**-62 + 2**-24 |sum c|``, with ``B ~ N max|g| max|w|``,
so the fixed-point term is at most ``N**2 max|g| max|w| 2**-62`` (the atomic sum's own rounding
is up to ``(hits - 1) 2**-24 sum |c|``). Below ``B = 2**-64`` the unit stays ``2**-126``, so
the term is ``N 2**-127``. The unit is one per call: the error is absolute, at the scale of the
largest possible sum, so an element far below ``B`` keeps fewer significant bits than a float32
sum of its own terms. ``docs/ms_deform_attn.md`` ("Determinism") gives the margins on the
catalogue's cases against the ``bounded`` contract (the encoder's worst case is 9.2e-4 of its
floor alone, the decoders' at most 6e-6).

**Why fixed point.** The alternatives give the same bits by fixing the order of float adds, and
pay for the order: sorting the contributions by element and reducing each segment (torch's
deterministic ``index_put_(accumulate=True)`` does this) materializes every contribution, one
per (sample, corner, channel): 4.6M samples x 4 x 32, 2.3 GB in float32, for the
Deformable-DETR encoder; a gather formulation (each value element sums the samples that reach
it) needs that inverse index built per call. Fixed point keeps the atomic kernel as it is, one
pass with its access pattern, and adds an int64 buffer the value's size and two streaming passes.

**NaN and infinity.** The value gradient does not depend on ``value``; NaN or infinite locations
read zero (every path). When ``B`` is not finite (a NaN or an infinity in the output gradient or
the attention weights, or ``max|g| N max|w|`` beyond float32's range) every contribution is
dropped and the whole value gradient is NaN: deterministic, and louder than the atomic path's
(which makes NaN only the elements those samples hit). The location and weight gradients are the
atomic path's in every case.

**Cost.** Beyond the atomic backward: the int64 buffer (twice the float32 one) and its fill, one
pass over the output gradient and the weights, and one over the value gradient (8 bytes read, 4
written per element); the int64 adds are relaxed atomics (the float32 path's are acq_rel).
Under deterministic mode torch also fills every ``torch.empty`` with NaN
(``torch.utils.deterministic.fill_uninitialized_memory``): the forward and the backward's
buffers pay that, the kernels' work does not need it.
``benchmarks/bench/bench_msda_deterministic.py`` measures it against the atomic backward.

**Plans.** A plan does not depend on the mode: the flag is read per backward call. The plan
keeps its launches (its ``launches``, as every plan does: ``triton_launch.Launcher``): the
backward's one per mode (the providers' ``_backward_launch`` keys it on the value gradient's
dtype, int64 only here: a Launcher relaunches the dtypes it was made with, so a plan's atomic
launch must never take the int64 buffer, nor the other way round), and this path's two
streaming kernels', made on its first deterministic backward. A forward under deterministic
mode leaves the gradient buffers to the backward (``keep_for_backward``): the float32 value
gradient then needs no zeroing, the conversion stores every element. A forward outside the mode
followed by a backward in it (or the reverse) is correct too: the backward allocates what its
mode needs. Warm up in the mode a CUDA graph will capture (its kernels compile at their first
call, and its launches are made then).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import torch

from libreyolo.kernels.triton_kit import cdiv
from libreyolo.kernels.triton_launch import Launcher

#: int64 elements ahead of the value gradient in the accumulator, the bits below the largest
#: sum, and the smallest exponent of the bound (``deterministic_kernels``' constants).
HEADER = 2
FIXED_BITS = 62
MIN_EXPONENT = -64
#: Elements per program of the two streaming kernels (4 warps).
BOUND_BLOCK = 4096
CONVERT_BLOCK = 1024
NUM_WARPS = 4


def requested() -> bool:
    """Whether the backward being called must be deterministic (a host flag: no sync)."""
    return torch.are_deterministic_algorithms_enabled()


@functools.cache
def _kernels():
    from libreyolo.kernels.attention.ms_deform_attn import deterministic_kernels

    return deterministic_kernels


def hits_bound(attention_weights: torch.Tensor) -> int:
    """``N``: contributions one value element can receive at most, ``len_q`` times the last
    dimension of the weights: the points per level (classic, ``(B, len_q, heads, levels,
    points)``) or all the points (ragged, ``(B, len_q, heads, sum(points))``)."""
    return attention_weights.shape[1] * attention_weights.shape[-1]


def scale_exponent(grad_out: torch.Tensor, attention_weights: torch.Tensor) -> int | None:
    """``e`` of the module docstring for these inputs (the scale is ``2**(62 - e)``), worked out
    on the host as the kernels work it out on the device, or None when the bound is not finite.
    For tests and benchmarks: it reads the maxima on the host (the backward never does)."""
    as_float32 = functools.partial(torch.tensor, dtype=torch.float32)
    g = as_float32(grad_out.detach().abs().max().item() if grad_out.numel() else 0.0)
    w = as_float32(attention_weights.detach().abs().max().item()
                   if attention_weights.numel() else 0.0)
    bound = float(g * as_float32(hits_bound(attention_weights)) * w)  # the kernels' roundings
    if not math.isfinite(bound):
        return None
    mantissa, exponent = math.frexp(bound)  # bound = mantissa * 2**exponent, mantissa in [.5, 1)
    ceil_log2 = exponent - 1 if mantissa == 0.5 else exponent if bound else MIN_EXPONENT
    return max(ceil_log2, MIN_EXPONENT)


def fixed_point_error_bound(grad_out: torch.Tensor, attention_weights: torch.Tensor) -> float:
    """The fixed-point term of the error bound (the module docstring), ``N / 2`` units of
    ``2**(e - 62)``, for these inputs: what rounding to the grid can add to any one element of the
    value gradient, in its units (``inf`` when the bound is not finite). Reads the maxima on the
    host, as :func:`scale_exponent`."""
    exponent = scale_exponent(grad_out, attention_weights)
    if exponent is None:
        return math.inf
    return hits_bound(attention_weights) / 2 * 2.0 ** (exponent - FIXED_BITS)


def accumulator(value: torch.Tensor) -> torch.Tensor:
    """The zeroed int64 buffer: its header, then one element per element of ``value``. Kernels
    take it whole, never a view past the header (``deterministic_kernels``' module docstring)."""
    return value.new_zeros(HEADER + value.numel(), dtype=torch.int64)


def write_bound(launches: dict, fixed: torch.Tensor, grad_out: torch.Tensor,
                attention_weights: torch.Tensor) -> None:
    """The header of ``fixed`` (zeroed) from the contiguous output gradient and weights, by the
    launch kept in ``launches`` (the plan's: its sizes, the weights' dtype and the device are the
    plan's; the output gradient's dtype is the caller's, so it keys the launch)."""
    key = ("fixed-point bound", grad_out.dtype)
    launch = launches.get(key) or launches.setdefault(key, Launcher(
        _kernels().gradient_bound_kernel,
        (cdiv(max(grad_out.numel(), attention_weights.numel()), BOUND_BLOCK),), grad_out,
        attention_weights, fixed, grad_out.numel(), attention_weights.numel(),
        hits_bound(attention_weights), BLOCK=BOUND_BLOCK, num_warps=NUM_WARPS))
    launch(grad_out, attention_weights, fixed)


def to_float(launches: dict, fixed: torch.Tensor, out: torch.Tensor) -> None:
    """``out`` (float32) = the fixed-point value gradient of the accumulator ``fixed`` in floats,
    by the launch kept in ``launches`` (the plan's, which fixes ``out``'s size and device)."""
    launch = launches.get("fixed-point to float") or launches.setdefault(
        "fixed-point to float", Launcher(
            _kernels().fixed_point_to_float_kernel, (cdiv(out.numel(), CONVERT_BLOCK),), fixed,
            out, out.numel(), BLOCK=CONVERT_BLOCK, num_warps=NUM_WARPS))
    launch(fixed, out)


def gradients(launch_for, plan, value, sampling_locations, attention_weights, grad_out,
              buffers: tuple) -> tuple:
    """The three gradients with the value gradient in fixed point (the module docstring):
    ``launch_for(plan, tensors)`` is the provider's kept backward launch for these tensors (its
    int64 one: the value gradient passed is the accumulator), ``buffers`` the float32 value
    gradient (every element is stored here) and the location and weight gradients."""
    grad_value, grad_locations, grad_weights = buffers
    fixed = accumulator(value)
    write_bound(plan.launches, fixed, grad_out, attention_weights)
    tensors = (value, plan.shapes, sampling_locations, attention_weights, grad_out, fixed,
               grad_locations, grad_weights)
    launch_for(plan, tensors)(*tensors)
    to_float(plan.launches, fixed, grad_value)
    if value.dtype is not torch.float32:
        grad_value = grad_value.to(value.dtype)
    return grad_value, grad_locations, grad_weights


_HERE = Path(__file__).resolve().parent
#: The files the deterministic backward's numbers depend on (both providers list them).
SOURCES = (str(_HERE / "deterministic.py"), str(_HERE / "deterministic_kernels.py"))

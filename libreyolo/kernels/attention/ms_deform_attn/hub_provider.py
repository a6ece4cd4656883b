"""The ``hub`` implementation of the ``ms_deform_attn`` slot: Deformable DETR's compiled forward
and backward from the Hugging Face Hub (``kernels-community/deformable-detr``, Apache-2.0), as
the lock pins it (``libreyolo/kernels/hub/hub_kernels.lock.toml``).

Registered on top of the Triton implementation, so it wins where it is eligible, and eligibility is
narrow: the ``kernels`` package installed (``libreyolo[hub-kernels]``), a CUDA device, float32
tensors on it, eager execution (its declared capabilities decline float16 and bfloat16, and any
call while a graph is traced, compiled or exported), and ``LIBREYOLO_HUB_KERNELS`` not 0. Per-level
point counts and discrete sampling are the ragged slot's, which has no Hub implementation. The
predicate and ``accepts`` import nothing and fetch nothing: the kernel is fetched (if the cache
lacks it), verified and imported by the first call, and a refusal or failure there disables it for
the process with one warning (the registry's rule for every implementation) while the next
implementation takes the input.

The compiled op takes ``level_start_index`` (derived here on the device from the level sizes)
and an ``im2col_step`` that must divide the batch (the largest divisor up to Deformable DETR's
64). Inputs are made contiguous, as the op requires. An empty input (no batch, query, point or
channel) is not given to the op, whose launch fails on it (``benchmarks/NOTES.md``, "The Hub op on
empty inputs"): its output and gradients are zeros of the right shapes, what a sum over nothing is.

After a warm-up call (which loads the kernel and copies level sizes given as pairs to the
device), forward and backward make no host sync and no allocation outside the caching
allocator, so they are CUDA-graph capturable.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from pathlib import Path

import torch

from libreyolo.kernels import Capabilities, register, settings
from libreyolo.kernels.hub import LOCK_FILE
from libreyolo.kernels.prepared import Prepared
from libreyolo.kernels.registry import plan_or_raise

from .levels import device_shapes, remembered
from .portable import validate_inputs

#: The lock's name for the pin this implementation loads.
HUB_KERNEL = "deformable-detr"
#: Where the op runs; the CPU tests point it at "cpu" to run the same logic on a stand-in (so the
#: device is checked by ``accepts`` against it, not declared).
DEVICE = "cuda"
#: The op is taken for float32 only, and never while a graph is captured: an exported graph
#: keeps the portable math.
CAPABILITIES = Capabilities(dtypes={torch.float32}, traced=False)
#: Deformable DETR's modules pass im2col_step=64 (models/ops/modules/ms_deform_attn.py).
IM2COL_STEP = 64
# The op indexes with int.
MAX_ELEMENTS = 2**31 - 1


def environment_ok() -> bool | str:
    """The kernels package is installed (not imported) and there is a CUDA device."""
    if not _kernels_installed():
        return "the kernels package is not installed (pip install 'libreyolo[hub-kernels]')"
    if DEVICE == "cuda" and not torch.cuda.is_available():
        return "no CUDA device"
    return True


def _kernels_installed() -> bool:
    """The ``kernels`` distribution is installed and importable. Its metadata decides, not
    ``find_spec`` alone: any folder named ``kernels`` on ``sys.path`` (a project's own, or a
    test tree's ``tests/kernels``) passes for a namespace package of that name."""
    try:
        importlib.metadata.distribution("kernels")
    except importlib.metadata.PackageNotFoundError:
        return False
    return importlib.util.find_spec("kernels") is not None


def im2col_step(batch: int) -> int:
    """The largest divisor of ``batch`` up to :data:`IM2COL_STEP` (the op needs one); 1 for an
    empty batch."""
    return next((step for step in range(min(batch, IM2COL_STEP), 0, -1) if batch % step == 0), 1)


class HubPlan(Prepared):
    """An input :func:`accepts` validated: level sizes on the device and the op's step."""

    __slots__ = ("shapes", "step", "empty")

    def __init__(self, shapes: torch.Tensor, step: int, empty: bool):
        self.shapes = shapes
        self.step = step
        self.empty = empty


def accepts(value, spatial_shapes, sampling_locations, attention_weights):
    """A :class:`HubPlan` when the compiled op takes this input, else why not.

    Bad input raises the portable core's errors (its own validation). Reads no setting of the
    ``kernels`` package and imports nothing.
    """
    if not settings.hub_kernels_enabled():
        return f"{settings.HUB_KERNELS} turns Hub kernels off"
    if isinstance(spatial_shapes, torch.Tensor) and spatial_shapes.is_cuda \
            and torch.cuda.is_current_stream_capturing() and remembered(spatial_shapes) is None:
        return ("spatial_shapes tensor not read before this CUDA graph capture (reading it "
                "would sync): warm up with it outside the capture")
    levels = validate_inputs(value, spatial_shapes, sampling_locations, attention_weights)
    if value.device.type != DEVICE:
        return f"value is on {value.device}, the compiled op runs on {DEVICE}"
    batch, _, heads, channels = value.shape
    if max(value.numel(), sampling_locations.numel(),
           batch * sampling_locations.shape[1] * heads * channels) > MAX_ELEMENTS:
        return f"more than {MAX_ELEMENTS} elements in one tensor (the op indexes with int)"
    if isinstance(spatial_shapes, torch.Tensor) and spatial_shapes.device == value.device:
        shapes = spatial_shapes.contiguous()
    else:
        shapes = device_shapes(levels, value.device)
        if shapes is None:
            return ("spatial_shapes pairs first seen during a CUDA graph capture (copying them "
                    "would sync): warm up with them outside the capture")
    empty = value.numel() == 0 or sampling_locations.numel() == 0
    return HubPlan(shapes, im2col_step(batch), empty)


@functools.cache
def kernel():
    """The verified Hub module (``ms_deform_attn_forward``/``_backward``), loaded once."""
    from libreyolo.kernels.hub import loader

    return loader.load(HUB_KERNEL)


def level_start_index(shapes: torch.Tensor) -> torch.Tensor:
    """Each level's first row in ``value``, computed on the device (no host read)."""
    sizes = shapes.prod(1)
    return sizes.cumsum(0) - sizes


def _forward(plan: HubPlan, starts, value, sampling_locations, attention_weights):
    if plan.empty:
        batch, _, heads, channels = value.shape
        return value.new_zeros(batch, sampling_locations.shape[1], heads * channels)
    return kernel().ms_deform_attn_forward(value, plan.shapes, starts, sampling_locations,
                                           attention_weights, plan.step)


class _HubFunction(torch.autograd.Function):
    """Autograd wiring: the compiled backward gives all three gradients in one call."""

    @staticmethod
    def forward(ctx, plan, starts, value, sampling_locations, attention_weights):
        ctx.plan = plan
        ctx.save_for_backward(starts, value, sampling_locations, attention_weights)
        return _forward(plan, starts, value, sampling_locations, attention_weights)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        starts, value, sampling_locations, attention_weights = ctx.saved_tensors
        if ctx.plan.empty:
            grads = [torch.zeros_like(t) for t in (value, sampling_locations, attention_weights)]
        else:
            grads = kernel().ms_deform_attn_backward(
                value, ctx.plan.shapes, starts, sampling_locations, attention_weights,
                grad_out.contiguous(), ctx.plan.step)
        grad_value, grad_locations, grad_weights = grads
        needs = ctx.needs_input_grad
        return (None, None, grad_value if needs[2] else None,
                grad_locations if needs[3] else None, grad_weights if needs[4] else None)


def ms_deform_attn_hub(value, spatial_shapes, sampling_locations, attention_weights, *,
                       prepared: HubPlan | None = None):
    """The slot on the verified Hub kernel; differentiable in value, locations and weights.

    ``prepared`` is what :func:`accepts` returned (the registry passes it); a direct call
    without it asks what the registry asks (``registry.plan_or_raise``: the declared
    capabilities, then :func:`accepts`) and raises the portable core's error for a bad input, or
    ``ValueError`` with the reason on a decline.
    The first call loads the kernel: :class:`~libreyolo.kernels.hub.HubKernelRefused` when it
    does not verify.
    """
    if prepared is None:
        prepared = plan_or_raise(REGISTERED, (value, spatial_shapes, sampling_locations,
                                              attention_weights))
    kernel()  # load (or refuse) before any autograd bookkeeping
    tensors = (value.contiguous(), sampling_locations.contiguous(),
               attention_weights.contiguous())
    starts = level_start_index(prepared.shapes)
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return _HubFunction.apply(prepared, starts, *tensors)
    return _forward(prepared, starts, *tensors)


_HERE = Path(__file__).resolve().parent
#: The files this implementation's numbers depend on: the adapter, the loader and verification,
#: and the lock, so a parity record covers exactly one pin (a changed lock stales it).
SOURCES = (str(_HERE / "hub_provider.py"),
           *(str(LOCK_FILE.parent / f) for f in ("lock.py", "verify.py", "loader.py")),
           str(LOCK_FILE))

REGISTERED = register("ms_deform_attn", ms_deform_attn_hub, name="hub", predicate=environment_ok,
                      capabilities=CAPABILITIES, accepts=accepts, sources=SOURCES)

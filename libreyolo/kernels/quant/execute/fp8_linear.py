"""The fused FP8 linear: prologue, GEMM and epilogue for a finalized FP8 layer, when it wins.

``fp8_linear`` is what the finalized ``nn.Linear`` (and 1x1 ``nn.Conv2d``) calls; ``None`` sends
the caller to its own path (its input's fake quantization, then bf16 ``F.linear`` on the weight
dequantized once, or the portable forward). It engages only on CUDA, never in an export, for
bfloat16 activations, on shapes the measured policy (``fp8_policy.toml``, docs/fp8_execute.md)
lists as faster than its yardstick on the device the activations are on.

This package's GEMM keeps its sums in the tensor cores' accumulator (faster) where K is at most
``FAST_ACCUMULATION_MAX_K``, where that stays more accurate than bf16 ``F.linear``, and promotes
them to float32 above it; ``LIBREYOLO_FP8_FAST_ACCUMULATION`` forces either (docs/fp8_execute.md,
"Accumulation"). The GEMM slot itself, and any other implementation of it, always runs as the
catalogue records it.

Each piece is a slot and is looked up in the registry, so ``LIBREYOLO_KERNELS=slot=name`` selects
it without dropping the others: the prologue (``fp8_cast_dynamic`` or, with ``input_scale``,
``fp8_cast_static``), then the GEMM (``fp8_gemm``). When the implementation that would run is this
package's own, it is called with padded buffers directly (the prologue writes its codes K-padded
to 16 for ``_scaled_mm``, the weight is padded once and cached), which saves a copy; any other
implementation gets the slot's plain arguments. The call path reads no device data on the host:
a warmed-up call can be captured in a CUDA graph.
"""

from __future__ import annotations

import functools
import tomllib
import weakref
from pathlib import Path

import torch
import torch.nn.functional as F

from libreyolo.capture import COMPILE, EXPORT, graph_capture
from libreyolo.kernels import registry
from libreyolo.kernels.settings import fp8_fast_accumulation

from . import fp8_gemm

POLICY_FILE = Path(__file__).with_name("fp8_policy.toml")
ACTIVATIONS = {"relu": F.relu, "silu": F.silu, "gelu": F.gelu}
#: The longest reduction whose GEMM keeps its sums in the FP8 tensor cores' own accumulator by
#: default: up to here its error against float64 measured below bf16 ``F.linear``'s on the same
#: operands, above it not (``benchmarks/profiles/probe_fp8_fast_accum.py``; docs/fp8_execute.md,
#: "Accumulation").
FAST_ACCUMULATION_MAX_K = 1024
#: The bounds a region of ``fp8_policy.toml`` may hold.
BOUNDS = tuple(f"{side}_{d}" for d in "mnk" for side in ("min", "max"))
#: (id(tensor), what was made of it) -> (a weak reference to the tensor, its version, what was
#: made); dropped with the tensor
_kept: dict[tuple, tuple] = {}


@functools.cache
def policy() -> dict[str, tuple[dict, ...]]:
    """The measured policy, checked: each measured device's name (a part of
    ``torch.cuda.get_device_name``'s answer) -> its regions, where the fused path was faster
    there (each ``min_m``, ``min_n``, ``min_k``, optional ``max_*``)."""
    with POLICY_FILE.open("rb") as file:
        return _checked(tomllib.load(file), POLICY_FILE)


def _checked(table: dict, path) -> dict[str, tuple[dict, ...]]:
    """``table`` as ``policy`` returns it, or a ValueError naming ``path`` and what is wrong: a
    mistyped key would otherwise leave a device engaging nowhere, and two names matching one
    card would give it the regions of whichever comes first."""
    def refuse(what: str):
        raise ValueError(f"{path}: {what}")

    devices = table.get("device", [])
    if set(table) - {"device"} or not isinstance(devices, list):
        refuse(f"the top level holds {sorted(table)}; expected only [[device]] tables")
    out: dict[str, tuple[dict, ...]] = {}
    for number, device in enumerate(devices, 1):
        name = device.get("name") if isinstance(device, dict) else None
        if not isinstance(name, str) or not name:
            refuse(f"device {number} has no name (a part of torch.cuda.get_device_name's answer)")
        regions = device.get("region", [])
        if set(device) - {"name", "region"} or not isinstance(regions, list):
            refuse(f"device {name!r} holds {sorted(device)}; expected name and "
                   "[[device.region]] tables")
        for other in out:
            if other == name:
                refuse(f"device {name!r} is listed twice")
            if other in name or name in other:
                refuse(f"devices {other!r} and {name!r} overlap: a card named like "
                       f"{max(name, other, key=len)!r} matches both")
        for region in regions:
            wrong = [key for key, value in (region.items() if isinstance(region, dict) else ())
                     if key not in BOUNDS or type(value) is not int or value < 0]
            if wrong or not isinstance(region, dict):
                refuse(f"device {name!r} has a region with unknown keys or values {wrong}; "
                       f"expected some of {list(BOUNDS)}, each an integer >= 0")
        out[name] = tuple(regions)
    return out


def reload_policy() -> None:
    """Read ``POLICY_FILE`` again on the next question, forgetting every answer kept from it."""
    policy.cache_clear()
    _answer.cache_clear()
    _device_regions.cache_clear()


def regions_of(device: str) -> tuple[dict, ...]:
    """The regions measured on ``device`` (a name as ``torch.cuda.get_device_name`` gives it):
    those of the entry whose name it contains; none (never engage) when no entry names it."""
    return next((regions for name, regions in policy().items() if name in device), ())


@functools.cache
def _device_regions(index: int) -> tuple[dict, ...]:
    return regions_of(torch.cuda.get_device_name(index))


def engages(device: str, m: int, n: int, k: int) -> bool:
    """Whether the policy's measurements on ``device`` (named as ``regions_of`` takes it) say
    the fused path beats its yardstick there for an (M, N, K) layer (fp8_policy.toml's header)."""
    return _covered(regions_of(device), m, n, k)


def _covered(regions: tuple[dict, ...], m: int, n: int, k: int) -> bool:
    return any(all(region.get(f"min_{d}", 0) <= v <= region.get(f"max_{d}", 1 << 62)
                   for d, v in (("m", m), ("n", n), ("k", k))) for region in regions)


def _policy_engages(x, *weights) -> bool:
    """Whether ``x`` may take a fused path through the layers of ``weights`` ((N, K) codes, in
    order): CUDA bfloat16 activations, not captured for export, no autograd, and every layer's
    (M, N, K) in one of the regions the policy measured on ``x``'s device. Under ``torch.compile``
    the answer is the trace's: the compiled graph holds the fused operator or the layers' path."""
    if not isinstance(x, torch.Tensor) or x.device.type != "cuda" or x.dtype != torch.bfloat16:
        return False
    if graph_capture() == EXPORT or x.requires_grad:
        return False
    k = x.shape[-1]
    m = x.numel() // k if k else 0
    return _engages_on(x.device.index or 0, m, tuple(tuple(w.shape) for w in weights))


@torch.compiler.assume_constant_result
def _engages_on(index: int, m: int, shapes: tuple) -> bool:
    """The policy's answer for a device and layers' shapes: a constant of a compiled graph
    (Dynamo calls it while tracing; it reads a file and the device's name, which it cannot
    trace. Dynamo would trace into a cache's wrapper instead, so the cache is ``_answer``)."""
    return _answer(index, m, shapes)


@functools.lru_cache(maxsize=256)
def _answer(index: int, m: int, shapes: tuple) -> bool:
    """``_engages_on``'s answer, kept: a model asks it for the same few shapes on every call."""
    regions = _device_regions(index)
    return all(_covered(regions, m, *shape) for shape in shapes)


def fp8_linear(x, weight, weight_scale, bias=None, *, input_scale=None, activation=None):
    """x: (..., K) float16/bfloat16/float32 activations; weight: (N, K) float8_e4m3fn codes;
    weight_scale: float32 (N,) per-output-channel; bias: (N,) or None; input_scale: float32 ()
    static per-tensor activation scale, or None for dynamic per-row scales computed exactly as
    libreyolo.quant's fp8 quantizer does for the dynamic per-row mode; activation: None or one of
    'relu', 'silu', 'gelu', applied after bias.
    Returns the (..., N) output in x.dtype, or None when the fused path does not engage here
    (not CUDA, an export, policy says bf16 is faster, no implementation takes the input) so the
    caller takes its own path. Under ``torch.compile`` the fused path is the operator
    ``torch.ops.libreyolo.fp8_linear``."""
    if not _policy_engages(x, weight):
        return None
    if graph_capture() == COMPILE:
        return torch.ops.libreyolo.fp8_linear(x, weight.view(torch.uint8), weight_scale, bias,
                                              input_scale=input_scale, activation=activation)
    return fused_fp8_linear(x, weight, weight_scale, bias, input_scale=input_scale,
                            activation=activation)


def fp8_mlp(x, fc1, fc2):
    """``fused_fp8_mlp`` where the policy engages both of its layers, under ``fp8_linear``'s
    conditions (there the fold only saves fc1's GELU pass and a read of its output); None
    sends the caller to its layers' own path. ``fc1``, ``fc2``: ``(weight, weight_scale,
    bias)`` of two FP8 layers with dynamic activation scales. Under ``torch.compile``: the
    operator ``torch.ops.libreyolo.fp8_mlp``."""
    if not _policy_engages(x, fc1[0], fc2[0]):
        return None
    if graph_capture() == COMPILE:
        (w1, s1, b1), (w2, s2, b2) = fc1, fc2
        return torch.ops.libreyolo.fp8_mlp(x, w1.view(torch.uint8), s1, b1,
                                           w2.view(torch.uint8), s2, b2)
    return fused_fp8_mlp(x, fc1, fc2)


def fused_fp8_linear(x, weight, weight_scale, bias=None, *, input_scale=None, activation=None):
    """The fused path without the policy (the benchmark times it everywhere); None when an
    implementation declines. Arguments as ``fp8_linear``'s."""
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"activation must be None or one of {sorted(ACTIVATIONS)}, "
                         f"got {activation!r}")
    k, n = x.shape[-1], weight.shape[0]
    if k == 0:
        return None  # an empty reduction: the caller's path (bias alone) says what it means
    x2d = x.reshape(-1, k)
    if x2d.shape[0] == 0:
        return x.new_empty((*x.shape[:-1], n))
    quantized = _prologue(x2d, input_scale)
    if quantized is None:
        return None
    codes, row_scale = quantized
    out = _gemm(codes, row_scale, weight, weight_scale, _bias_as(bias, x.dtype), x.dtype, k)
    if out is None:
        return None
    if activation is not None:
        out = ACTIVATIONS[activation](out)
    return out.reshape(*x.shape[:-1], n)


def fused_fp8_mlp(x, fc1, fc2):
    """``fc2(gelu(fc1(x)))`` for two FP8 layers ``(weight, weight_scale, bias)`` with dynamic
    activation scales, the GELU folded into fc2's prologue: fc1's bf16 output is read once, and
    GELU, row amax and E4M3 codes come from that one read (a ViT MLP; docs/fp8_execute.md).

    Not a slot and not in the conformance matrix: the fold computes GELU with its own
    approximation (``fp8_kernels._gelu``, within 4e-6 relative of float64), so fc2's activation
    codes may differ from ``fp8_cast_dynamic(F.gelu(h))`` by one code near a rounding boundary
    (docs/fp8_execute.md, "Fusing the ViT MLP's GELU"; bench_fp8.py counts them). Needs this
    package's own prologue and GEMM (CUDA, bfloat16 x); returns None otherwise, like
    ``fused_fp8_linear``.
    """
    (w1, s1, b1), (w2, s2, b2) = fc1, fc2
    hidden = fused_fp8_linear(x, w1, s1, b1)
    gemm = _first("fp8_gemm")
    if hidden is None or gemm is None or gemm.name != "scaled_mm":
        return None
    impl = _first("fp8_cast_dynamic")
    h2d = hidden.reshape(-1, hidden.shape[-1])
    if impl is None or impl.name != "triton":
        return None
    plan = registry.answer(impl, (h2d,))
    if isinstance(plan, str):
        return None
    from .fp8_launch import cast

    codes, row_scale = cast(plan, pad_to=16, gelu=True)
    out = fp8_gemm.scaled_mm_cuda(codes, padded_weight(w2), row_scale, s2, _bias_as(b2, x.dtype),
                                  x.dtype, True, w2.shape[0],
                                  fast_accumulation=fast_accumulation(w2.shape[1]))
    return out.reshape(*x.shape[:-1], w2.shape[0])


def fast_accumulation(k: int) -> bool:
    """Whether this package's GEMM over a reduction of length ``k`` runs with fast accumulation:
    as ``LIBREYOLO_FP8_FAST_ACCUMULATION`` forces it, else where ``k`` is at most
    ``FAST_ACCUMULATION_MAX_K``."""
    forced = fp8_fast_accumulation()
    return k <= FAST_ACCUMULATION_MAX_K if forced is None else forced


def _first(op: str):
    eligible = registry.candidates(op)
    return eligible[0] if eligible else None


def _prologue(x2d, input_scale):
    """(codes K-padded to 16, (M, 1) float32 row scales), or None when nothing takes x."""
    op, args = ("fp8_cast_dynamic", (x2d,)) if input_scale is None else \
        ("fp8_cast_static", (x2d, input_scale))
    impl = _first(op)
    if impl is not None and impl.name == "triton" and impl.origin == "in-tree":
        plan = registry.answer(impl, args)
        if isinstance(plan, str):
            return None
        from .fp8_launch import cast

        codes, row_scale = cast(plan, pad_to=16)
    else:
        result = registry.dispatch(op, *args)
        codes, row_scale = result if input_scale is None else (result, None)
        codes = fp8_gemm.padded_codes(codes)
    if row_scale is None:
        row_scale = input_scale.expand(x2d.shape[0], 1).contiguous()
    return codes, row_scale


def padded_weight(weight: torch.Tensor) -> torch.Tensor:
    """The weight with N and K rounded up to 16 (zeros), made once per weight tensor version."""
    n, k = weight.shape
    if n % 16 == 0 and k % 16 == 0 and weight.is_contiguous():
        return weight
    return _made_once(weight, "padded", lambda w: fp8_gemm.padded_codes(w, fp8_gemm.aligned(n)))


def _bias_as(bias, dtype):
    """The bias in the activations' dtype (a finalized layer keeps it in float32), made once per
    bias tensor version."""
    if bias is None or bias.dtype == dtype:
        return bias
    return _made_once(bias, dtype, lambda b: b.to(dtype))


def _made_once(tensor: torch.Tensor, what, make):
    """``make(tensor)``, kept until the tensor changes (in place, or its storage swapped by
    ``.data =``) or goes: made on every call, the padded weight and the cast biases were two
    more kernels per layer (``benchmarks/NOTES.md``, "Made once per tensor version"). The check
    reads no device data. Inference tensors have no version
    counter, and what is made inside a CUDA graph capture is the graph's memory, so those are
    made on every call."""
    if tensor.is_inference():
        return make(tensor)
    key = (id(tensor), what)
    cached = _kept.get(key)
    stamp = (tensor._version, tensor.data_ptr())  # a ``.data =`` swap keeps the version
    if cached is not None and cached[0]() is tensor and cached[1] == stamp:
        return cached[2]  # made earlier: reading it is safe inside a capture too
    made = make(tensor)
    if tensor.is_cuda and torch.cuda.is_current_stream_capturing():
        return made
    _kept[key] = (weakref.ref(tensor, lambda _, key=key: _kept.pop(key, None)), stamp, made)
    return made


def _gemm(codes, row_scale, weight, weight_scale, bias, out_dtype, k):
    """The GEMM slot on the prologue's codes, or None when it declines (a float32 output, a
    device without FP8 tensor cores...). This package's own implementation is asked, as the
    prologue's is, then called with the padded buffers."""
    impl = _first("fp8_gemm")
    args = (codes[:, :k], weight, row_scale, weight_scale, bias, out_dtype)
    if impl is not None and impl.name == "scaled_mm" and impl.origin == "in-tree":
        if isinstance(registry.answer(impl, args), str):
            return None
        return fp8_gemm.scaled_mm_cuda(codes, padded_weight(weight), row_scale, weight_scale,
                                       bias, out_dtype, True, weight.shape[0],
                                       fast_accumulation=fast_accumulation(k))
    return registry.dispatch("fp8_gemm", *args)


# -- the fused path as operators, for torch.compile ----------------------------------------------
# Opaque to inductor: a compiled model runs the eager fused path (prologue, tensor-core GEMM,
# epilogue), its bits those of an eager call. The E4M3 weights cross as their bytes (as the slots'
# operators take them, libreyolo/kernels/operators.py). Where the fused path declines at run time
# (an implementation declines the input), the operator computes what the finalized layer's own
# path does: the dequantized weight times the fake-quantized input.

_library = torch.library.Library("libreyolo", "FRAGMENT")
_library.define("fp8_linear(Tensor x, Tensor weight, Tensor weight_scale, Tensor? bias=None, *, "
                "Tensor? input_scale=None, str? activation=None) -> Tensor")
_library.define("fp8_mlp(Tensor x, Tensor w1, Tensor s1, Tensor? b1, Tensor w2, Tensor s2, "
                "Tensor? b2) -> Tensor")


def _layers_path(x, weight, weight_scale, bias, input_scale, activation):
    """A finalized FP8 layer's own path: the quantized input times the dequantized weight."""
    from libreyolo.quant.fake_quant import fake_quant_fp8
    from libreyolo.quant.packing import unpack_fp8

    w = unpack_fp8(weight, weight_scale, axis=0, dtype=x.dtype)
    out = F.linear(fake_quant_fp8(x, input_scale), w, None if bias is None else bias.to(x.dtype))
    return out if activation is None else ACTIVATIONS[activation](out)


@torch.compiler.disable(recursive=True)
def _linear_kernel(x, weight, weight_scale, bias=None, *, input_scale=None, activation=None):
    weight = weight.view(torch.float8_e4m3fn)
    with torch.no_grad():
        out = fused_fp8_linear(x, weight, weight_scale, bias, input_scale=input_scale,
                               activation=activation)
        if out is None:
            out = _layers_path(x, weight, weight_scale, bias, input_scale, activation)
    return out.contiguous()


@torch.compiler.disable(recursive=True)
def _mlp_kernel(x, w1, s1, b1, w2, s2, b2):
    fc1, fc2 = (w1.view(torch.float8_e4m3fn), s1, b1), (w2.view(torch.float8_e4m3fn), s2, b2)
    with torch.no_grad():
        out = fused_fp8_mlp(x, fc1, fc2)
        if out is None:
            hidden = _layers_path(x, *fc1, None, "gelu")
            out = _layers_path(hidden, *fc2, None, None)
    return out.contiguous()


def _linear_fake(x, weight, weight_scale, bias=None, *, input_scale=None, activation=None):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _mlp_fake(x, w1, s1, b1, w2, s2, b2):
    return x.new_empty((*x.shape[:-1], w2.shape[0]))


_library.impl("fp8_linear", _linear_kernel, "CompositeExplicitAutograd")
_library.impl("fp8_mlp", _mlp_kernel, "CompositeExplicitAutograd")
torch.library.register_fake("libreyolo::fp8_linear", _linear_fake, lib=_library)
torch.library.register_fake("libreyolo::fp8_mlp", _mlp_fake, lib=_library)

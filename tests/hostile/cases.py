"""The hostile-input suite's tries, as data (issue 35).

Each ``Try`` is one bad call of one public entry point of docs/kernels.md (the ops, the registry's
functions, the nn modules, packing and loading, the settings, the suite's tools): ``build(device)``
makes the call's inputs on a device and gives back a function making the call. The call must
raise exactly ``error`` (or, for a setting, warn ``error``) with a message naming each of
``names`` (an argument, a variable, a file), and disable nothing. The same table runs on CPU,
under the Triton interpreter (a child process: ``interpreted_hostile.py``) and on CUDA, wherever
``devices`` says its input can be built, so every path gives the same error.

``classes`` says which of issue 35's classes the try exercises (0: the contract's plain checks,
one per argument; 1 bad input is not a kernel failure, 4 sizes that are not sizes, 5 errors that
came from deep inside, 6 paths that disagreed, 7 settings and tools). ``Result`` rows are the
calls that must give the same numbers on every path instead of an error (classes 2, 4 and 6).
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

from conformance.catalogue import CATALOGUE
from conformance.inputs.shapesets import load
from conformance.schema.spec import Inputs
from libreyolo.kernels import (
    Capabilities,
    SelectionWarning,
    candidates,
    decline_reason,
    dispatch,
    explain,
    ops,
    register,
    registered,
    resolve,
    settings,
    unregister,
)
from libreyolo.kernels.attention.ms_deform_attn import (
    maybe_ms_deform_attn,
    maybe_ms_deform_attn_ragged,
    ms_deform_attn_portable,
    ms_deform_attn_ragged,
    ms_deform_attn_ragged_portable,
)
from libreyolo.kernels.slots import SLOTS, get_slot
from libreyolo.quant import packing
from tests.attention.hostile_inputs import BAD_INPUTS, HOSTILE_CASE

ALL = ("cpu", "interpreter", "cuda")
HOST = ("cpu", "interpreter")  # no tensor: nothing to build on a GPU


class ExitedWith2(Exception):
    """A command-line tool returned exit code 2; the message is what it wrote to stderr."""


@dataclass(frozen=True)
class Try:
    id: str
    entry: str
    names: tuple[str, ...]
    error: type[BaseException]
    build: Callable[[str], Callable[[], object]]
    classes: tuple[int, ...] = (0,)
    devices: tuple[str, ...] = ALL


def tensor_device(device: str) -> str:
    return "cuda" if device == "cuda" else "cpu"


def other_device(device: str) -> str:
    return "cpu" if device == "cuda" else "meta"


@functools.cache
def _valid_case(slot: str):
    spec = CATALOGUE[slot]
    case = next(c for c in load(spec.shapes) if c.size == "small")
    dtype = torch.float32 if torch.float32 in spec.dtypes else spec.dtypes[-1]
    return spec, case, dtype


def valid(slot: str, device: str) -> Inputs:
    """A valid call of `slot` (its catalogue's first small case) on `device`."""
    spec, case, dtype = _valid_case(slot)
    inputs = spec.make_inputs(case, dtype, "contiguous", torch.Generator().manual_seed(0))
    return inputs.to(tensor_device(device))


def with_args(slot: str, change: Callable[[list, dict, str], None]):
    """A build: the valid call of `slot`, changed in place by `change(args, kwargs, device)`,
    through ``ops.<slot>``."""

    def build(device):
        inputs = valid(slot, device)
        args, kwargs = list(inputs.args), dict(inputs.kwargs)
        change(args, kwargs, device)
        return lambda: getattr(ops, slot)(*args, **kwargs)

    return build


def parameters(slot: str) -> tuple[str, ...]:
    """The slot's parameter names, in order, from its declared schema."""
    arguments = get_slot(slot).schema.partition("->")[0]
    arguments = arguments[arguments.index("(") + 1:arguments.rindex(")")]
    return tuple(item.partition("=")[0].split()[-1] for item in arguments.split(",")
                 if item.strip() and item.strip() != "*")


def _positions(slot: str) -> dict[str, int]:
    schema = get_slot(slot).schema
    positional = schema[:schema.index(", *")] if ", *" in schema else schema
    return {name: i for i, name in enumerate(parameters(slot)) if f" {name}" in positional}


def replace(slot: str, name: str, value):
    """The valid call with argument `name` replaced by `value(original, device)`."""
    i = _positions(slot).get(name)

    def change(args, kwargs, device):
        if i is not None and i < len(args):
            args[i] = value(args[i], device)
        else:
            kwargs[name] = value(kwargs.get(name), device)

    return with_args(slot, change)


def _sparse(t, device):
    return t.to_sparse()


def _meta(t, device):
    return t.to("meta")


def _catalogue_tries() -> list[Try]:
    """Every slot's catalogue error inputs (one per argument at least), through ``ops``."""
    tries = []
    for slot, spec in CATALOGUE.items():
        for error in spec.error_inputs:
            def build(device, error=error, slot=slot):
                inputs = error.build(tensor_device(device), other_device(device))
                return lambda: getattr(ops, slot)(*inputs.args, **inputs.kwargs)

            tries.append(Try(f"ops.{slot}:{error.name}", f"ops.{slot}", (error.match,),
                             error.error, build))
    return tries


def _signature_tries() -> list[Try]:
    """Class 1: a call the slot's signature does not take is the caller's TypeError on every
    path (``ops.fp8_gemm(a, b, sa, sb, rowwise=False)`` disabled scaled_mm)."""
    tries = []
    for slot in SLOTS:
        name = slot.name
        tries.append(Try(f"ops.{name}:unknown-keyword", f"ops.{name}", ("rowwise", name),
                         TypeError, with_args(name, lambda a, k, d: k.update(rowwise=False)),
                         (1,)))
        tries.append(Try(f"ops.{name}:too-many-arguments", f"ops.{name}", (name,), TypeError,
                         with_args(name, lambda a, k, d: a.extend([None] * 8)), (1,)))
        first = parameters(name)[0]
        tries.append(Try(f"ops.{name}:missing-{first}", f"ops.{name}", (first,), TypeError,
                         with_args(name, lambda a, k, d: (a.clear(), k.clear())), (1,)))
        tries.append(Try(f"ops.{name}:sparse-{first}", f"ops.{name}", (first,), TypeError,
                         replace(name, first, _sparse), (5,)))
    return [t for t in tries if not _unbuildable(t)]


def _unbuildable(t: Try) -> bool:
    """Sparse float8 tensors do not exist (torch has no sparse kernels for them)."""
    try:
        t.build("cpu")
    except (RuntimeError, NotImplementedError):
        return True
    return False


def _fake_quant_tries() -> list[Try]:
    def meta_scale(slot, scale_name="scale"):
        def change(args, kwargs, device):
            args[0] = args[0].to("meta")
            i = _positions(slot)[scale_name]
            args[i] = args[i].to("meta")

        return with_args(slot, change)

    return [
        Try("ops.fake_quant_fp8:fmt-list", "ops.fake_quant_fp8", ("fmt",), TypeError,
            with_args("fake_quant_fp8", lambda a, k, d: k.update(fmt=["e4m3"])), (5,)),
        Try("ops.fake_quant_fp8:fmt-dict", "ops.fake_quant_fp8", ("fmt",), TypeError,
            with_args("fake_quant_fp8", lambda a, k, d: k.update(fmt={"e4m3": 1})), (5,)),
        Try("ops.fake_quant_int8_per_channel:axis-list", "ops.fake_quant_int8_per_channel",
            ("axis",), TypeError, replace("fake_quant_int8_per_channel", "axis",
                                          lambda t, d: [0]), (5,)),
        Try("ops.fake_quant_int8_per_channel:axis-bool", "ops.fake_quant_int8_per_channel",
            ("axis",), TypeError, replace("fake_quant_int8_per_channel", "axis",
                                          lambda t, d: True), (4,)),
        Try("ops.fake_quant_int8_affine:zero-point-bool", "ops.fake_quant_int8_affine",
            ("zero_point",), TypeError, replace("fake_quant_int8_affine", "zero_point",
                                                lambda t, d: True), (4,)),
        Try("ops.fake_quant_int_grouped:bits-list", "ops.fake_quant_int_grouped", ("bits",),
            TypeError, replace("fake_quant_int_grouped", "bits", lambda t, d: [4]), (5,)),
        Try("ops.fake_quant_int_grouped:group-size-float", "ops.fake_quant_int_grouped",
            ("group_size",), TypeError, replace("fake_quant_int_grouped", "group_size",
                                                lambda t, d: 2.0**40), (4,)),
        Try("ops.fake_quant_int8_per_channel:meta-scale", "ops.fake_quant_int8_per_channel",
            ("scale",), ValueError, meta_scale("fake_quant_int8_per_channel"), (5,)),
        Try("ops.fake_quant_int8_affine:meta-scale", "ops.fake_quant_int8_affine", ("scale",),
            ValueError, meta_scale("fake_quant_int8_affine"), (5,)),
        Try("ops.fp8_cast_static:meta-scale", "ops.fp8_cast_static", ("scale",), ValueError,
            meta_scale("fp8_cast_static"), (5,)),
        Try("ops.fake_quant_nvfp4_weight:meta-global-amax", "ops.fake_quant_nvfp4_weight",
            ("global_amax",), ValueError, with_args("fake_quant_nvfp4_weight", lambda a, k, d: (
                a.__setitem__(0, a[0].to("meta")),
                a.append(torch.tensor(1.0, device="meta")))), (5,)),
        Try("ops.fp8_perchannel_epilogue:activation-list", "ops.fp8_perchannel_epilogue",
            ("activation",), ValueError, replace("fp8_perchannel_epilogue", "activation",
                                                 lambda t, d: ["relu"]), (5,)),
        Try("ops.unpack_int_grouped:in-features-bool", "ops.unpack_int_grouped",
            ("in_features",), TypeError, replace("unpack_int_grouped", "in_features",
                                                 lambda t, d: True), (4,)),
        Try("ops.unpack_int_grouped:group-size-bool", "ops.unpack_int_grouped",
            ("group_size",), TypeError, replace("unpack_int_grouped", "group_size",
                                                lambda t, d: True), (4,)),
        Try("ops.unpack_mxfp8:dtype-string", "ops.unpack_mxfp8", ("dtype",), TypeError,
            replace("unpack_mxfp8", "dtype", lambda t, d: "float32"), (5,)),
        Try("ops.unpack_mxfp8:meta-scale", "ops.unpack_mxfp8", ("scale",), ValueError,
            replace("unpack_mxfp8", "scale", _meta), (5,)),
        Try("ops.unpack_mxfp4:meta-scale", "ops.unpack_mxfp4", ("scale",), ValueError,
            replace("unpack_mxfp4", "scale", _meta), (5,)),
        Try("ops.unpack_nvfp4:meta-tensor-scale", "ops.unpack_nvfp4", ("tensor_scale",),
            ValueError, replace("unpack_nvfp4", "tensor_scale", _meta), (5,)),
        Try("ops.unpack_int_grouped:meta-scale", "ops.unpack_int_grouped", ("scale",),
            ValueError, replace("unpack_int_grouped", "scale", _meta), (5,)),
    ]


# -- deformable attention: the shared table of tests/attention/hostile_inputs.py, through every
#    public path, and the ragged slot


def _msda(break_inputs, path):
    def build(device):
        from conformance.inputs.ms_deform_attn_cases import make_inputs

        inputs = [t.to(tensor_device(device)) if isinstance(t, torch.Tensor) else t
                  for t in make_inputs(HOSTILE_CASE)]
        broken = break_inputs(*inputs)
        return lambda: path(*broken)

    return build


NEW_IN_ISSUE_35 = {"spatial_shapes_int", "spatial_shapes_0_d", "spatial_shapes_meta",
                   "spatial_shapes_sparse", "value_sparse"}
MSDA_PATHS = {"ops.ms_deform_attn": ops.ms_deform_attn,
              "maybe_ms_deform_attn": maybe_ms_deform_attn,
              "resolve(ms_deform_attn)": lambda *a: dispatch("ms_deform_attn", *a),
              "ms_deform_attn_portable": ms_deform_attn_portable}


def _msda_tries() -> list[Try]:
    tries = []
    for row_id, break_inputs, error, words in BAD_INPUTS:
        classes = (4,) if "bool" in row_id else (5,) if row_id in NEW_IN_ISSUE_35 else (0,)
        for entry, path in MSDA_PATHS.items():
            path_class = (6,) if entry in ("ops.ms_deform_attn", "maybe_ms_deform_attn") else ()
            tries.append(Try(f"{entry}:{row_id}", entry, tuple(words), error,
                             _msda(break_inputs, path), (*classes, *path_class)))
    return tries


def _ragged(change, path=ops.ms_deform_attn_ragged):
    """The ragged slot's valid call (its catalogue case) changed by `change(args, device)`."""

    def build(device):
        inputs = valid("ms_deform_attn_ragged", device)
        args = list(inputs.args)
        change(args, device)
        return lambda: path(*args)

    return build


def _set(i, value):
    return lambda args, device: args.__setitem__(i, value(args, device))


def _levels_inconsistent(args, device):
    shapes = args[1]
    return [(h + 1, w) for h, w in shapes.tolist()] if isinstance(shapes, torch.Tensor) \
        else [(h + 1, w) for h, w in shapes]


RAGGED_PATHS = {"ops.ms_deform_attn_ragged": ops.ms_deform_attn_ragged,
                "maybe_ms_deform_attn_ragged": maybe_ms_deform_attn_ragged,
                "ms_deform_attn_ragged": ms_deform_attn_ragged,
                "ms_deform_attn_ragged_portable": ms_deform_attn_ragged_portable}


def _ragged_tries() -> list[Try]:
    rows = [
        # class 1: the level sizes disagree with len_in: the caller's error, no kernel disabled
        ("inconsistent-level-sizes", _set(1, _levels_inconsistent), ValueError, ("len_in",),
         (1,)),
        ("bool-point-count", _set(4, lambda a, d: [True] + list(a[4][1:])), TypeError,
         ("points_per_level",), (4,)),
        ("float-point-counts", _set(4, lambda a, d: [n + 0.7 for n in a[4]]), TypeError,
         ("points_per_level",), (4,)),
        ("bool-level-size", _set(1, lambda a, d: [(True, w) for _, w in a[1].tolist()]),
         TypeError, ("spatial_shapes",), (4,)),
        ("int-spatial-shapes", _set(1, lambda a, d: 5), TypeError, ("spatial_shapes",), (5,)),
        ("method-list", _set(5, lambda a, d: ["bilinear"]), ValueError, ("method",), (5,)),
        ("sparse-value", _set(0, lambda a, d: a[0].to_sparse()), TypeError, ("value",), (5,)),
    ]
    tries = []
    for row_id, change, error, names, classes in rows:
        for entry, path in RAGGED_PATHS.items():
            tries.append(Try(f"{entry}:{row_id}", entry, names, error, _ragged(change, path),
                             classes))
    return tries


# -- the registry's functions


def _noop(*args, **kwargs):
    return None


def _call(fn, *args, **kwargs):
    return lambda device: (lambda: fn(*args, **kwargs))


def _with_valid(fn, slot="fake_quant_fp8", **extra):
    def build(device):
        inputs = valid(slot, device)
        return lambda: fn(*inputs.args, **{**inputs.kwargs, **extra})

    return build


REGISTRY_TRIES = [
    Try("dispatch:unknown-slot", "dispatch", ("op",), ValueError, _call(dispatch, "fake_quant_fp9"),
        devices=HOST),
    Try("dispatch:slot-none", "dispatch", ("op",), ValueError, _call(dispatch, None),
        devices=HOST),
    Try("dispatch:unknown-keyword", "dispatch", ("bogus",), TypeError,
        _with_valid(functools.partial(dispatch, "fake_quant_fp8"), bogus=1), (1,)),
    Try("resolve:unknown-slot", "resolve", ("op",), ValueError, _call(resolve, "nope"),
        devices=HOST),
    Try("resolve:unknown-keyword", "resolve", ("bogus",), TypeError,
        _with_valid(lambda *a, **k: resolve("fake_quant_fp8")(*a, **k), bogus=1), (1,)),
    Try("register:unknown-slot", "register", ("op",), ValueError,
        _call(register, "nope", _noop, name="a"), devices=HOST),
    Try("register:impl-not-callable", "register", ("impl",), TypeError,
        _call(register, "fake_quant_fp8", 3, name="a"), devices=HOST),
    Try("register:name-blank", "register", ("name",), ValueError,
        _call(register, "fake_quant_fp8", _noop, name=" "), devices=HOST),
    Try("register:name-none", "register", ("name",), ValueError,
        _call(register, "fake_quant_fp8", _noop, name=None), devices=HOST),
    Try("register:name-reference", "register", ("name",), ValueError,
        _call(register, "fake_quant_fp8", _noop, name="reference"), devices=HOST),
    Try("register:predicate", "register", ("predicate",), TypeError,
        _call(register, "fake_quant_fp8", _noop, name="a", predicate=True), devices=HOST),
    Try("register:accepts", "register", ("accepts",), TypeError,
        _call(register, "fake_quant_fp8", _noop, name="a", accepts="x"), devices=HOST),
    Try("register:sources-string", "register", ("sources",), TypeError,
        _call(register, "fake_quant_fp8", _noop, name="a", sources="a.py"), devices=HOST),
    Try("register:capabilities-dict", "register", ("capabilities",), TypeError,
        _call(register, "fake_quant_fp8", _noop, name="a", capabilities={"dtypes": []}),
        devices=HOST),
    Try("register:writes-inputs-string", "register", ("writes_inputs",), TypeError,
        _call(register, "fake_quant_fp8", _noop, name="a", writes_inputs="yes"), devices=HOST),
    Try("Capabilities:unknown-mode", "Capabilities", ("modes",), ValueError,
        _call(Capabilities, modes={"gpu"}), devices=HOST),
    Try("unregister:unknown-slot", "unregister", ("op",), ValueError,
        _call(unregister, "nope", "a"), devices=HOST),
    Try("unregister:name-none", "unregister", ("name",), ValueError,
        _call(unregister, "fake_quant_fp8", None), devices=HOST),
    Try("unregister:reference", "unregister", ("name",), ValueError,
        _call(unregister, "fake_quant_fp8", "reference"), devices=HOST),
    Try("explain:unknown-slot", "explain", ("op",), ValueError, _call(explain, "nope"),
        devices=HOST),
    Try("explain:unknown-keyword", "explain", ("bogus",), TypeError,
        _with_valid(functools.partial(explain, "fake_quant_fp8"), bogus=1), (1,)),
    Try("decline_reason:name-none", "decline_reason", ("name",), TypeError,
        _call(decline_reason, "ms_deform_attn", None), (5,), HOST),
    Try("decline_reason:unknown-slot", "decline_reason", ("op",), ValueError,
        _call(decline_reason, "nope", "triton"), devices=HOST),
    Try("decline_reason:unknown-keyword", "decline_reason", ("bogus",), TypeError,
        _with_valid(functools.partial(decline_reason, "fake_quant_fp8", "triton"), bogus=1),
        (1,)),
    Try("candidates:unknown-slot", "candidates", ("op",), ValueError, _call(candidates, "nope"),
        devices=HOST),
    Try("registered:unknown-slot", "registered", ("op",), ValueError, _call(registered, "nope"),
        devices=HOST),
]


# -- nn modules


def _msdeformattn_forward(change):
    """``MSDeformAttn(d_model=16, n_levels=2, n_heads=2, n_points=2)`` on a valid call, changed
    by `change(kwargs, device)`."""

    def build(device):
        from libreyolo.nn.ms_deform_attn import MSDeformAttn

        on = tensor_device(device)
        torch.manual_seed(0)
        module = MSDeformAttn(d_model=16, n_levels=2, n_heads=2, n_points=2).to(on)
        levels = [(2, 3), (1, 2)]
        call = {"query": torch.randn(1, 3, 16, device=on),
                "reference_points": torch.rand(1, 3, 2, 2, device=on),
                "value": torch.randn(1, 8, 16, device=on),
                "spatial_shapes": torch.tensor(levels, device=on)}
        change(call, device)
        return lambda: module(**call)

    return build


def _msdeformattn(**kwargs):
    def build(device):
        from libreyolo.nn.ms_deform_attn import MSDeformAttn

        return lambda: MSDeformAttn(**kwargs)

    return build


def _kw(name, value):
    return lambda call, device: call.__setitem__(name, value(call, device))


MODULE_TRIES = [
    Try("MSDeformAttn:d_model-zero", "MSDeformAttn", ("d_model",), ValueError,
        _msdeformattn(d_model=0), devices=HOST),
    Try("MSDeformAttn:n_levels-bool", "MSDeformAttn", ("n_levels",), ValueError,
        _msdeformattn(n_levels=True), (4,), HOST),
    Try("MSDeformAttn:n_heads-not-dividing", "MSDeformAttn", ("n_heads",), ValueError,
        _msdeformattn(d_model=10, n_heads=3), devices=HOST),
    Try("MSDeformAttn:n_points-float", "MSDeformAttn", ("n_points",), ValueError,
        _msdeformattn(n_points=2.5), (4,), HOST),
    Try("MSDeformAttn.forward:float64-query", "MSDeformAttn.forward", ("query",), TypeError,
        _msdeformattn_forward(_kw("query", lambda c, d: c["query"].double())), (5,)),
    Try("MSDeformAttn.forward:float64-value", "MSDeformAttn.forward", ("value",), TypeError,
        _msdeformattn_forward(_kw("value", lambda c, d: c["value"].double())), (5,)),
    Try("MSDeformAttn.forward:float64-reference-points", "MSDeformAttn.forward",
        ("reference_points",), TypeError,
        _msdeformattn_forward(_kw("reference_points",
                                  lambda c, d: c["reference_points"].double())), (5,)),
    Try("MSDeformAttn.forward:2-d-query", "MSDeformAttn.forward", ("query",), ValueError,
        _msdeformattn_forward(_kw("query", lambda c, d: c["query"][0]))),
    Try("MSDeformAttn.forward:reference-points-shape", "MSDeformAttn.forward",
        ("reference_points",), ValueError,
        _msdeformattn_forward(_kw("reference_points",
                                  lambda c, d: c["reference_points"][..., :1]))),
    Try("MSDeformAttn.forward:value-batch", "MSDeformAttn.forward", ("value",), ValueError,
        _msdeformattn_forward(_kw("value", lambda c, d: c["value"].expand(2, -1, -1)))),
    Try("MSDeformAttn.forward:int-spatial-shapes", "MSDeformAttn.forward", ("spatial_shapes",),
        TypeError, _msdeformattn_forward(_kw("spatial_shapes", lambda c, d: 2)), (5,)),
    Try("MSDeformAttn.forward:0-d-spatial-shapes", "MSDeformAttn.forward", ("spatial_shapes",),
        ValueError, _msdeformattn_forward(_kw("spatial_shapes", lambda c, d: torch.tensor(2))),
        (5,)),
    Try("MSDeformAttn.forward:bool-level-size", "MSDeformAttn.forward", ("spatial_shapes",),
        TypeError, _msdeformattn_forward(_kw("spatial_shapes",
                                             lambda c, d: [(True, 8), (1, 2)])), (4,)),
    Try("MSDeformAttn.forward:three-levels", "MSDeformAttn.forward", ("spatial_shapes",),
        ValueError, _msdeformattn_forward(_kw("spatial_shapes",
                                              lambda c, d: [(2, 2), (1, 2), (1, 2)]))),
    Try("MSDeformAttn.forward:float-padding-mask", "MSDeformAttn.forward",
        ("value_padding_mask",), TypeError,
        _msdeformattn_forward(_kw("value_padding_mask", lambda c, d: torch.zeros(
            1, 8, device=c["value"].device)))),
    Try("MSDeformAttn.forward:padding-mask-shape", "MSDeformAttn.forward",
        ("value_padding_mask",), ValueError,
        _msdeformattn_forward(_kw("value_padding_mask", lambda c, d: torch.zeros(
            1, 7, dtype=torch.bool, device=c["value"].device)))),
    Try("MSDeformAttn.forward:sparse-query", "MSDeformAttn.forward", ("query",), TypeError,
        _msdeformattn_forward(_kw("query", lambda c, d: c["query"].to_sparse())), (5,)),
]


def _finalized(kind, *args, **kwargs):
    def build(device):
        from libreyolo.nn import finalized

        return lambda: getattr(finalized, kind)(*args, **kwargs)

    return build


def _conv(**kwargs):
    return _finalized("FinalizedConv2d", 4, 4, **{"kernel_size": 3, "weight": "int8", **kwargs})


def _linear(**kwargs):
    return _finalized("FinalizedLinear", 32, 4, **{"weight": "fp8", "activation": "fp8_dynamic",
                                                   **kwargs})


def _finalized_layer(device, activation="fp8_static"):
    from libreyolo.nn.finalized import FinalizedLinear

    torch.manual_seed(0)
    float_layer = torch.nn.Linear(32, 4).to(tensor_device(device))
    scale = torch.tensor(0.05, device=float_layer.weight.device)
    given = {"input_scale": scale} if activation == "fp8_static" else {}
    return FinalizedLinear.from_float(float_layer, "fp8", activation, **given)


def _state_dict_with(name, value):
    def build(device):
        layer = _finalized_layer(device)
        state = layer.state_dict()
        state[name] = value(state[name])
        return lambda: layer.load_state_dict(state)

    return build


def _load_packed(**kwargs):
    def build(device):
        layer = _finalized_layer(device)
        packed = packing.pack_fp8(torch.randn(4, 32, device=layer.codes.device),
                                  torch.full((4,), 0.01, device=layer.codes.device), axis=0)
        given = {"packed": packed, "bias": layer.bias.clone(),
                 "input_scale": torch.tensor(0.05, device=layer.codes.device)}
        given.update({k: v(given) for k, v in kwargs.items()})
        return lambda: layer.load_packed(given.pop("packed"), given.pop("bias"), **given)

    return build


def _layer_forward(x):
    def build(device):
        layer = _finalized_layer(device, "fp8_dynamic")
        given = x(tensor_device(device))
        return lambda: layer(given)

    return build


FINALIZED_TRIES = [
    Try("FinalizedConv2d:kernel-size-1-tuple", "FinalizedConv2d", ("kernel_size",), TypeError,
        _conv(kernel_size=(3,)), (5,), HOST),
    Try("FinalizedConv2d:kernel-size-bool", "FinalizedConv2d", ("kernel_size",), TypeError,
        _conv(kernel_size=True), (4,), HOST),
    Try("FinalizedConv2d:padding-negative", "FinalizedConv2d", ("padding",), ValueError,
        _conv(padding=-1), (5,), HOST),
    Try("FinalizedConv2d:padding-float", "FinalizedConv2d", ("padding",), TypeError,
        _conv(padding=1.5), (5,), HOST),
    Try("FinalizedConv2d:padding-3-tuple", "FinalizedConv2d", ("padding",), TypeError,
        _conv(padding=(1, 1, 1)), (5,), HOST),
    Try("FinalizedConv2d:padding-word", "FinalizedConv2d", ("padding",), ValueError,
        _conv(padding="full"), devices=HOST),
    Try("FinalizedConv2d:stride-zero", "FinalizedConv2d", ("stride",), ValueError,
        _conv(stride=0), devices=HOST),
    Try("FinalizedConv2d:dilation-1-tuple", "FinalizedConv2d", ("dilation",), TypeError,
        _conv(dilation=(1,)), (5,), HOST),
    Try("FinalizedConv2d:groups", "FinalizedConv2d", ("groups",), ValueError,
        _conv(groups=3), devices=HOST),
    Try("FinalizedConv2d:in-channels", "FinalizedConv2d", ("in_channels",), ValueError,
        _finalized("FinalizedConv2d", 0, 4, 3, weight="int8"), devices=HOST),
    Try("FinalizedConv2d:out-channels", "FinalizedConv2d", ("out_channels",), TypeError,
        _finalized("FinalizedConv2d", 4, 4.0, 3, weight="int8"), devices=HOST),
    Try("FinalizedLinear:in-features", "FinalizedLinear", ("in_features",), ValueError,
        _finalized("FinalizedLinear", 0, 4, weight="fp8"), devices=HOST),
    Try("FinalizedLinear:out-features-bool", "FinalizedLinear", ("out_features",), TypeError,
        _finalized("FinalizedLinear", 32, True, weight="fp8"), (4,), HOST),
    Try("FinalizedLinear:bias", "FinalizedLinear", ("bias",), TypeError,
        _linear(bias="yes"), devices=HOST),
    Try("FinalizedLinear:weight", "FinalizedLinear", ("weight",), ValueError,
        _linear(weight="int3"), devices=HOST),
    Try("FinalizedLinear:weight-list", "FinalizedLinear", ("weight",), TypeError,
        _linear(weight=["fp8"]), (5,), HOST),
    Try("FinalizedLinear:activation", "FinalizedLinear", ("activation",), ValueError,
        _linear(activation="int4_dynamic"), devices=HOST),
    Try("FinalizedLinear:bits", "FinalizedLinear", ("bits",), ValueError,
        _linear(weight="int_grouped", activation=None, bits=3, group_size=32), devices=HOST),
    Try("FinalizedLinear:group-size", "FinalizedLinear", ("group_size",), ValueError,
        _linear(weight="int_grouped", activation=None, bits=4, group_size=0), devices=HOST),
    Try("FinalizedLinear:bits-for-fp8", "FinalizedLinear", ("bits",), ValueError,
        _linear(bits=4), devices=HOST),
    Try("FinalizedLinear.load_state_dict:nan-input-scale", "FinalizedLinear.load_state_dict",
        ("input_scale",), RuntimeError,
        _state_dict_with("input_scale", lambda t: torch.full_like(t, float("nan"))), (5,)),
    Try("FinalizedLinear.load_state_dict:negative-input-scale",
        "FinalizedLinear.load_state_dict", ("input_scale",), RuntimeError,
        _state_dict_with("input_scale", lambda t: -t), (5,)),
    Try("FinalizedLinear.load_state_dict:codes-dtype", "FinalizedLinear.load_state_dict",
        ("codes",), RuntimeError, _state_dict_with("codes", lambda t: t.float())),
    Try("FinalizedLinear.load_packed:packed", "FinalizedLinear.load_packed", ("packed",),
        TypeError, _load_packed(packed=lambda g: "codes")),
    Try("FinalizedLinear.load_packed:bias-shape", "FinalizedLinear.load_packed", ("bias",),
        ValueError, _load_packed(bias=lambda g: g["bias"][:2])),
    Try("FinalizedLinear.load_packed:nan-input-scale", "FinalizedLinear.load_packed",
        ("input_scale",), ValueError,
        _load_packed(input_scale=lambda g: torch.full_like(g["input_scale"], float("nan")))),
    Try("FinalizedLinear.forward:x-shape", "FinalizedLinear.forward", ("x",), ValueError,
        _layer_forward(lambda on: torch.randn(2, 31, device=on))),
]


# -- packing


def _pack(fn, *args, **kwargs):
    """`fn(*args, **kwargs)`, each callable argument made on the device: `a(device)`."""

    def build(device):
        on = tensor_device(device)
        made = [a(on) if callable(a) else a for a in args]
        made_kw = {k: v(on) if callable(v) else v for k, v in kwargs.items()}
        return lambda: fn(*made, **made_kw)

    return build


def _w(*shape, dtype=torch.float32, fill=None):
    def make(on):
        t = torch.randn(*shape, generator=torch.Generator().manual_seed(0)).to(dtype).to(on)
        if fill is not None:
            t.view(-1)[0] = fill
        return t

    return make


def _scale(n, value=0.01, device=None):
    return lambda on: torch.full((n,), value, device=device or on) if n else \
        torch.tensor(value, device=device or on)


PACKING_TRIES = [
    Try("pack_int8:w-int", "pack_int8", ("w",), TypeError,
        _pack(packing.pack_int8, _w(4, 8, dtype=torch.int32), _scale(4))),
    Try("pack_int8:scale-negative", "pack_int8", ("scale",), ValueError,
        _pack(packing.pack_int8, _w(4, 8), _scale(4, -0.1))),
    Try("pack_int8:axis", "pack_int8", ("axis",), ValueError,
        _pack(packing.pack_int8, _w(4, 8), _scale(4), 5)),
    Try("pack_int8:w-nan", "pack_int8", ("w",), ValueError,
        _pack(packing.pack_int8, _w(4, 8, fill=float("nan")), _scale(4))),
    Try("pack_fp8:fmt-list", "pack_fp8", ("fmt",), TypeError,
        _pack(packing.pack_fp8, _w(4, 8), fmt=["e4m3"]), (5,)),
    Try("pack_fp8:sparse-w", "pack_fp8", ("w",), TypeError,
        _pack(packing.pack_fp8, lambda on: _w(4, 8)(on).to_sparse()), (5,)),
    Try("pack_int_grouped:bits", "pack_int_grouped", ("bits",), ValueError,
        _pack(packing.pack_int_grouped, _w(4, 8), 3, 4)),
    Try("pack_int_grouped:group-size-bool", "pack_int_grouped", ("group_size",), TypeError,
        _pack(packing.pack_int_grouped, _w(4, 8), 4, True), (4,)),
    Try("pack_nvfp4:global-amax-meta", "pack_nvfp4", ("global_amax",), ValueError,
        _pack(packing.pack_nvfp4, lambda on: torch.ones(2, 16, device="meta"),
              lambda on: torch.tensor(1.0, device="meta")), (5,)),
    Try("pack_mxfp4:w-1-d", "pack_mxfp4", ("w",), ValueError,
        _pack(packing.pack_mxfp4, _w(32))),
    Try("pack_mxfp8:meta-w", "pack_mxfp8", ("w",), ValueError,
        _pack(packing.pack_mxfp8, lambda on: torch.ones(2, 32, device="meta")), (5,)),
    Try("unpack_int8:scale-on-meta", "unpack_int8", ("scale",), ValueError,
        _pack(packing.unpack_int8, _w(4, 8, dtype=torch.int8), _scale(4, device="meta")), (5,)),
    Try("unpack_int8:codes-dtype", "unpack_int8", ("codes",), TypeError,
        _pack(packing.unpack_int8, _w(4, 8), _scale(4))),
    Try("unpack_fp8:scale-on-meta", "unpack_fp8", ("scale",), ValueError,
        _pack(packing.unpack_fp8, _w(4, 8, dtype=torch.float8_e4m3fn),
              _scale(0, device="meta")), (5,)),
    Try("unpack_fp8:axis", "unpack_fp8", ("axis",), TypeError,
        _pack(packing.unpack_fp8, _w(4, 8, dtype=torch.float8_e4m3fn), _scale(4), "0")),
]


# -- settings


def _selecting(value):
    def build(device):
        def call():
            saved = os.environ.get(settings.KERNELS)
            os.environ[settings.KERNELS] = value
            try:
                candidates("fake_quant_fp8")
            finally:
                if saved is None:
                    del os.environ[settings.KERNELS]
                else:
                    os.environ[settings.KERNELS] = saved

        return call

    return build


def _fast_accumulation(value):
    def build(device):
        def call():
            saved = os.environ.get(settings.FP8_FAST_ACCUMULATION)
            os.environ[settings.FP8_FAST_ACCUMULATION] = value
            try:
                settings.fp8_fast_accumulation()
            finally:
                if saved is None:
                    del os.environ[settings.FP8_FAST_ACCUMULATION]
                else:
                    os.environ[settings.FP8_FAST_ACCUMULATION] = saved

        return call

    return build


SETTINGS_TRIES = [
    Try("LIBREYOLO_KERNELS:two-bare-names", "LIBREYOLO_KERNELS", ("LIBREYOLO_KERNELS", "hub"),
        SelectionWarning, _selecting("triton,hub"), (7,), HOST),
    Try("LIBREYOLO_KERNELS:empty-name", "LIBREYOLO_KERNELS",
        ("LIBREYOLO_KERNELS", "'fake_quant_fp8='"), SelectionWarning,
        _selecting("fake_quant_fp8="), (7,), HOST),
    Try("LIBREYOLO_KERNELS:empty-slot", "LIBREYOLO_KERNELS", ("LIBREYOLO_KERNELS", "'=triton'"),
        SelectionWarning, _selecting("=triton"), (7,), HOST),
    Try("LIBREYOLO_KERNELS:unknown-slot", "LIBREYOLO_KERNELS",
        ("LIBREYOLO_KERNELS", "fake_quant_fp9"), SelectionWarning,
        _selecting("fake_quant_fp9=triton"), (7,), HOST),
    Try("LIBREYOLO_KERNELS:unknown-name", "LIBREYOLO_KERNELS", ("LIBREYOLO_KERNELS", "cutlass"),
        SelectionWarning, _selecting("cutlass"), (7,), HOST),
    Try("LIBREYOLO_FP8_FAST_ACCUMULATION:typo", "LIBREYOLO_FP8_FAST_ACCUMULATION",
        ("LIBREYOLO_FP8_FAST_ACCUMULATION",), ValueError, _fast_accumulation("maybe"), (7,),
        HOST),
]


# -- the suite's tools


def _tool(main, *argv):
    def build(device):
        def call():
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    rc = main(list(argv))
                except SystemExit as exc:
                    rc = exc.code
            if rc == 2:
                raise ExitedWith2(err.getvalue())
            return rc

        return call

    return build


def _replay_main(argv):
    from conformance.running import replay

    return replay.main(argv)


def _cli_main(argv):
    from libreyolo.kernels import cli

    return cli.main(argv)


def _replay_file(name: str, content: bytes | None):
    """A file for the replay tool, made when the try is built (None: no file)."""

    def build(device):
        import tempfile

        path = os.path.join(tempfile.mkdtemp(prefix="hostile-replay-"), name)
        if content is not None:
            with open(path, "wb") as file:
                file.write(content)
        return _tool(_replay_main, path)(device)

    return build


def _saved(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


TOOL_TRIES = [
    Try("conformance.running.replay:missing-file", "python -m conformance.running.replay",
        ("missing.pt",), ExitedWith2, _replay_file("missing.pt", None), (7,), HOST),
    Try("conformance.running.replay:empty-file", "python -m conformance.running.replay",
        ("empty.pt", "empty"), ExitedWith2, _replay_file("empty.pt", b""), (7,), HOST),
    Try("conformance.running.replay:corrupt-file", "python -m conformance.running.replay",
        ("corrupt.pt",), ExitedWith2, _replay_file("corrupt.pt", b"not a torch file\n"), (7,),
        HOST),
    Try("conformance.running.replay:wrong-schema", "python -m conformance.running.replay",
        ("wrong.pt", "plan"), ExitedWith2, _replay_file("wrong.pt", _saved({"x": 1})), (7,),
        HOST),
    Try("python -m libreyolo.kernels:--import", "python -m libreyolo.kernels",
        ("--import", "no_such_package_here"), ExitedWith2,
        _tool(_cli_main, "--import", "no_such_package_here"), (7,), HOST),
]


TRIES: list[Try] = [
    *_catalogue_tries(), *_signature_tries(), *_fake_quant_tries(), *_msda_tries(),
    *_ragged_tries(), *REGISTRY_TRIES, *MODULE_TRIES, *FINALIZED_TRIES,
    *PACKING_TRIES, *SETTINGS_TRIES, *TOOL_TRIES,
]


def names_in(message: str, name: str) -> bool:
    """Whether `message` names `name`: as a word (not inside another identifier)."""
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", message) is not None


#: Every argument each public entry point takes, which the table must try at least once.
ARGUMENTS = {
    **{f"ops.{slot.name}": parameters(slot.name) for slot in SLOTS},
    "dispatch": ("op",), "resolve": ("op",),
    "register": ("op", "impl", "name", "predicate", "accepts", "sources", "capabilities",
                 "writes_inputs"),
    "unregister": ("op", "name"), "explain": ("op",), "decline_reason": ("op", "name"),
    "candidates": ("op",), "registered": ("op",), "Capabilities": ("modes",),
    "MSDeformAttn": ("d_model", "n_levels", "n_heads", "n_points"),
    "MSDeformAttn.forward": ("query", "reference_points", "value", "spatial_shapes",
                             "value_padding_mask"),
    "FinalizedConv2d": ("in_channels", "out_channels", "kernel_size", "stride", "padding",
                        "dilation", "groups"),
    "FinalizedLinear": ("in_features", "out_features", "bias", "weight", "activation", "bits",
                        "group_size"),
    "FinalizedLinear.load_packed": ("packed", "bias", "input_scale"),
    "FinalizedLinear.load_state_dict": ("input_scale", "codes"),
    "FinalizedLinear.forward": ("x",),
    "pack_int8": ("w", "scale", "axis"), "pack_fp8": ("w", "fmt"),
    "pack_int_grouped": ("bits", "group_size"), "pack_nvfp4": ("global_amax",),
    "unpack_int8": ("codes", "scale"), "unpack_fp8": ("scale", "axis"),
    "LIBREYOLO_KERNELS": ("LIBREYOLO_KERNELS",),
    "LIBREYOLO_FP8_FAST_ACCUMULATION": ("LIBREYOLO_FP8_FAST_ACCUMULATION",),
    "python -m conformance.running.replay": ("missing.pt", "empty.pt", "corrupt.pt", "wrong.pt"),
    "python -m libreyolo.kernels": ("--import",),
}

"""The slot catalogue: every accelerated operation, declared once, as data.

A slot is a named operation. Its declaration says everything the rest derives from: the
signature (a ``torch.library`` schema, from which the Python signature, the slot's operator and
the binding of a call's arguments come), the reference (``"module:function"``) that defines what
the numbers mean, or for a slot without one the callers' portable path and a validator; the output
it returns as a function of its inputs (``outputs.py``); the parity contract; and the dtypes and
layouts it is defined for. The registry, ``ops``, the operators, the CLI and the docs tables read
it; the conformance suite attaches its test profile (shape set, input generator, strategy, error
inputs) by the slot's name (the ``[profile]`` table of ``conformance/shapes/<slot>.toml`` picks one
of ``conformance/catalogue/``'s kinds) and repeats none of these fields. A fake-quant slot's
reference is made from its quantizer (``libreyolo/quant/fake_quant.py``).

A reference is registered under the name ``reference`` when the registry loads; slots without
one let callers keep their own portable path, and ``dispatch`` returns ``None`` when no
implementation takes an input.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..suggest import did_you_mean
from . import outputs
from .outputs import Output

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
LAYOUTS = ("contiguous", "gapped", "transposed")
CONTRACT_KINDS = ("exact", "bounded")


@dataclass(frozen=True)
class Contract:
    """How an implementation's output is judged against the reference.

    `exact`: bit patterns equal the CPU reference's. `bounded`: for the output and the gradients
    of the differentiable inputs, the error against the portable path run in float64 is at most
    `k` times the portable path's own error in the input's precision, plus a floor of `floor`
    epsilons of that precision times the float64 result's largest magnitude.
    `ste`: the gradient of the first input equals `torch.where(mask, g, 0)` bit for bit.
    """

    kind: str
    ste: bool = False
    k: float | None = None
    floor: float | None = None

    def __post_init__(self):
        if self.kind not in CONTRACT_KINDS:
            raise ValueError(f"Contract.kind must be one of {CONTRACT_KINDS}, got {self.kind!r}")
        if self.kind == "bounded" and (self.k is None or self.floor is None):
            raise ValueError("a bounded Contract needs both k and floor")

    def as_dict(self) -> dict:
        return {"kind": self.kind, "ste": self.ste, "k": self.k, "floor": self.floor}


EXACT = Contract("exact")
EXACT_STE = Contract("exact", ste=True)
#: docs/fp8_execute.md, "The GEMM's bound": a correct FP8 GEMM differs from the float32-summing
#: portable path by its summation order and the order of its two scale multiplies.
GEMM_BOUND = Contract("bounded", k=4.0, floor=8.0)
#: Deformable attention's bound (conformance/running/ms_deform_attn_parity.py says why):
#: the kernels' error over the portable float32 error was at most 2.75 under the interpreter,
#: k = 8 leaves ~3x for the GPU's summation orders; the floor covers a portable error of zero.
MSDA_BOUND = Contract("bounded", k=8.0, floor=8.0)


@dataclass(frozen=True)
class Slot:
    """One slot's declaration (see the module docstring)."""

    name: str
    doc: str
    #: ``(Type name=default, ...) -> Result``: a torch.library schema without the op's name.
    schema: str
    output: Callable
    contract: Contract
    reference: str | None = None
    #: For a slot without a reference: the callers' portable path (what its operator falls back
    #: to), and a function of the slot's arguments that raises the slot's TypeError/ValueError
    #: for bad input (the registry's judge of a failing kernel).
    portable: str | None = None
    validator: str | None = None
    dtypes: tuple = FLOAT_DTYPES
    layouts: tuple = LAYOUTS
    #: The inputs a gradient flows to (the straight-through estimator's ``x``; attention's
    #: value, locations and weights); empty for a forward-only slot.
    differentiable: tuple[str, ...] = ()
    #: ``(input, argument, value)`` triples: no gradient flows to the input when the argument
    #: has that value (discrete sampling has no location gradient).
    gradient_unless: tuple[tuple[str, str, object], ...] = ()
    #: E4M3 inputs, which the slot's operator takes as their bytes (``operators.py`` says why).
    float8_inputs: tuple[str, ...] = ()

    def __post_init__(self):
        if (self.reference is None) == (self.portable is None):
            raise ValueError(f"slot {self.name}: declare a reference or a portable path, "
                             "not both")
        if self.reference is None and self.validator is None:
            raise ValueError(f"slot {self.name}: a slot without a reference needs a validator")
        object.__setattr__(self, "_signature", _python_signature(self.schema))
        object.__setattr__(self, "_types", _argument_types(self.schema))

    def load_reference(self) -> Callable | None:
        return _load(self.reference)

    def load_validator(self) -> Callable | None:
        return _load(self.validator)

    def load_portable(self) -> Callable:
        """The reference, or the callers' portable path: what runs when nothing else does."""
        return _load(self.reference or self.portable)

    @property
    def judge(self) -> Callable:
        """What decides whether an input is bad: the reference (it runs the input last), or the
        validator of a slot without one."""
        return self.load_reference() or self.load_validator()

    @property
    def signature(self) -> inspect.Signature:
        return self._signature

    @property
    def argument_types(self) -> dict[str, str]:
        """Each parameter's schema type (``Tensor?``, ``int``, ``int[]``, ``ScalarType``...)."""
        return self._types

    def bind(self, args: tuple, kwargs: dict) -> dict[str, object]:
        """The call's arguments by parameter name, defaults applied; a TypeError naming the
        slot and its signature for a call the signature does not take (a missing, unknown or
        repeated argument, too many positional ones)."""
        return self.binder(args, kwargs)

    @functools.cached_property
    def binder(self) -> Binder:
        """``bind`` as a precomputed function of ``(args, kwargs)`` (the registry's per call)."""
        return Binder(self.name, self.signature)

    @functools.cached_property
    def fits(self) -> Callable[[tuple, dict, object], bool]:
        """``fits(args, kwargs, result)``: True when ``result`` is the declared output of a call
        ``binder.check`` took; False or an exception send the caller to ``expected_output``
        (``outputs.py``). No value is read."""
        return self.output.compile(self.binder)

    def split(self, arguments: dict[str, object]) -> tuple[tuple, dict]:
        """Bound arguments (``bind``'s) as a call again: every parameter before ``*``
        positional, the keyword-only ones as keywords (no ``inspect``: Dynamo traces this)."""
        positional = self.binder.positional
        return (tuple(arguments[name] for name in positional),
                {name: value for name, value in arguments.items() if name not in positional})

    def expected_output(self, args: tuple, kwargs: dict) -> Output | tuple[Output, ...]:
        return self.output(self.bind(args, kwargs))

    def gradient_flows(self, name: str, arguments: dict) -> bool:
        """Whether a gradient flows to differentiable input ``name`` for these arguments."""
        return name in self.differentiable and not any(
            target == name and arguments.get(argument) == value
            for target, argument, value in self.gradient_unless)


class Binder:
    """A call's arguments by parameter name, for one signature, without ``inspect``.

    ``inspect.Signature.bind`` costs microseconds a call; the registry binds every call, so the
    common shapes of a call (positional arguments, keywords the signature names, defaults) are
    mapped here directly, and only a call that does not fit is handed to ``Signature.bind`` for
    its error message.
    """

    __slots__ = ("slot", "signature", "positional", "names", "defaults", "count", "n_required",
                 "keywords_after")

    def __init__(self, slot: str, signature: inspect.Signature):
        parameters = list(signature.parameters.values())
        self.slot, self.signature = slot, signature
        self.positional = tuple(p.name for p in parameters
                                if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD)
        self.names = frozenset(p.name for p in parameters)
        self.defaults = tuple((p.name, p.default) for p in parameters
                              if p.default is not inspect.Parameter.empty)
        self.count = len(parameters)
        # positional parameters without a default (a schema's defaults come last)
        self.n_required = sum(1 for p in parameters if p.default is inspect.Parameter.empty)
        # after n positional arguments, the names a keyword may still give
        self.keywords_after = tuple(self.names - set(self.positional[:n])
                                    for n in range(len(self.positional) + 1))

    def check(self, args: tuple, kwargs: dict) -> None:
        """Raise ``bind``'s TypeError for a call the signature does not take; build nothing.
        The common calls (every required argument positional, keywords the signature has left)
        cost a length and a set comparison."""
        n = len(args)
        if self.n_required <= n <= len(self.positional) and (
                not kwargs or self.keywords_after[n].issuperset(kwargs)):
            return
        self(args, kwargs)

    def place(self, name: str) -> tuple[int, object]:
        """``(position, default)`` of parameter ``name``: a call ``check`` took holds it at
        ``args[position]`` when it has more positional arguments than that, else in ``kwargs``
        or at its default (None when it has none). A keyword-only parameter's position is past
        any call's arguments. How an output rule's fast check reads an argument, inline
        (``outputs.py``)."""
        default = next((d for n, d in self.defaults if n == name), None)
        return (self.positional.index(name) if name in self.positional else sys.maxsize,
                default)

    def __call__(self, args: tuple, kwargs: dict) -> dict[str, object]:
        if len(args) > len(self.positional):
            self._refuse(args, kwargs)
        bound = dict(zip(self.positional, args, strict=False))  # checked: len(args) fits
        if kwargs:  # (written for Dynamo, which traces no set operation of dict keys)
            if any(name not in self.names or name in bound for name in kwargs):
                self._refuse(args, kwargs)
            bound.update(kwargs)
        if len(bound) < self.count:
            for name, default in self.defaults:
                if name not in bound:
                    bound[name] = default
            if len(bound) < self.count:
                self._refuse(args, kwargs)
        return bound

    def _refuse(self, args: tuple, kwargs: dict):
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.slot}{self.signature}: {exc}") from None
        raise AssertionError(f"{self.slot}: Binder and Signature.bind disagree")  # unreachable


def _load(target: str | None) -> Callable | None:
    """``"module:function"`` imported, or None."""
    if target is None:
        return None
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


_DEFAULTS = {"None": None, "True": True, "False": False,
             **{name: getattr(torch, name) for name in ("float32", "float16", "bfloat16")}}


def schema_arguments(schema: str) -> str:
    """What is inside a schema's argument parentheses (``(Tensor x, int axis=0) -> Tensor``)."""
    head = schema[:schema.index("->")].strip()
    return head[head.index("(") + 1:head.rindex(")")]


def _argument_types(schema: str) -> dict[str, str]:
    items = (a.strip() for a in schema_arguments(schema).split(",") if a.strip() != "*")
    return {item.partition("=")[0].split()[-1]: item.split()[0] for item in items if item}


def _python_signature(schema: str) -> inspect.Signature:
    """The Python signature of a schema's arguments: names, defaults, keyword-only after ``*``."""
    arguments = schema_arguments(schema)
    parameters, kind = [], inspect.Parameter.POSITIONAL_OR_KEYWORD
    for item in (a.strip() for a in arguments.split(",") if a.strip()):
        if item == "*":
            kind = inspect.Parameter.KEYWORD_ONLY
            continue
        declaration, _, default = item.partition("=")
        name = declaration.split()[-1]
        if not default:
            parameters.append(inspect.Parameter(name, kind))
            continue
        default = default.strip()
        if default in _DEFAULTS:
            value = _DEFAULTS[default]
        elif re.fullmatch(r'"[^"]*"', default):
            value = default[1:-1]
        else:
            value = int(default)
        parameters.append(inspect.Parameter(name, kind, default=value))
    return inspect.Signature(parameters)


def _fake_quant(name: str, schema: str, doc: str) -> Slot:
    first = re.match(r"\(Tensor (\w+)", schema).group(1)
    return Slot(name, doc, f"{schema} -> Tensor", outputs.like(first), EXACT_STE,
                reference=f"libreyolo.quant.fake_quant:{name}", differentiable=(first,))


def _unpack(name: str, schema: str, doc: str, *, in_features: bool = True,
            float8_inputs: tuple[str, ...] = ()) -> Slot:
    return Slot(name, doc, f"{schema} -> Tensor",
                outputs.unpacked("in_features" if in_features else None), EXACT,
                reference=f"libreyolo.quant.packing:{name}", float8_inputs=float8_inputs)


_EXECUTE = "libreyolo.quant.fp8_execute"
_MSDA = "libreyolo.kernels.attention.ms_deform_attn.portable"
_MSDA_SCHEMA = "(Tensor value, Tensor spatial_shapes, Tensor sampling_locations, " \
               "Tensor attention_weights"
_GEMM_SCHEMA = "(Tensor a, Tensor b, Tensor scale_a, Tensor scale_b, Tensor? bias=None, " \
               "ScalarType out_dtype=bfloat16) -> Tensor"
_HALF = (torch.float16, torch.bfloat16)
_MSDA_LAYOUTS = ("contiguous", "gapped")
_MSDA_GRADIENTS = ("value", "sampling_locations", "attention_weights")

SLOTS: tuple[Slot, ...] = (
    _fake_quant("fake_quant_int8_per_channel", "(Tensor x, Tensor scale, int axis=0)",
                "symmetric int8 (±127), one scale per channel"),
    _fake_quant("fake_quant_int8_affine", "(Tensor x, Tensor scale, int zero_point)",
                "int8 [-128, 127] with per-tensor scale and zero point"),
    _fake_quant("fake_quant_fp8",
                '(Tensor x, Tensor? scale=None, *, str fmt="e4m3", int? axis=None)',
                "FP8 E4M3/E5M2: per-tensor, per-channel or dynamic per-row"),
    _fake_quant("fake_quant_int_grouped", "(Tensor w, int bits, int group_size)",
                "int2/int4/int8, one scale per group of inputs"),
    _fake_quant("fake_quant_nvfp4_weight", "(Tensor w, Tensor? global_amax=None)",
                "NVFP4 weight: E2M1, 16-blocks, E4M3 + fp32 scales"),
    _fake_quant("fake_quant_nvfp4_dynamic", "(Tensor x)",
                "NVFP4 activation, scales from the tensor itself"),
    _fake_quant("fake_quant_mxfp4_weight", "(Tensor w)",
                "MXFP4 weight: E2M1, 32-blocks, E8M0 scales"),
    _fake_quant("fake_quant_mxfp4_dynamic", "(Tensor x)",
                "MXFP4 activation, blocks along the last dim"),
    _fake_quant("fake_quant_mxfp8_weight", "(Tensor w)",
                "MXFP8 weight: E4M3, 32-blocks, E8M0 scales"),
    _fake_quant("fake_quant_mxfp8_dynamic", "(Tensor x)",
                "MXFP8 activation, blocks along the last dim"),
    _unpack("unpack_int_grouped", "(Tensor codes, Tensor scale, int bits, int group_size, "
            "int in_features, ScalarType dtype=float32)",
            "packed grouped int2/int4/int8 codes to floats"),
    _unpack("unpack_nvfp4", "(Tensor codes, Tensor block_scale, Tensor tensor_scale, "
            "int in_features, ScalarType dtype=float32)",
            "packed NVFP4 codes and scales to floats", float8_inputs=("block_scale",)),
    _unpack("unpack_mxfp4", "(Tensor codes, Tensor scale, int in_features, "
            "ScalarType dtype=float32)", "packed MXFP4 codes and scales to floats"),
    _unpack("unpack_mxfp8", "(Tensor codes, Tensor scale, ScalarType dtype=float32)",
            "packed MXFP8 codes and scales to floats", in_features=False,
            float8_inputs=("codes",)),
    Slot("fp8_cast_static",
         "activations to E4M3 codes with a per-tensor scale (the FP8 GEMM's prologue)",
         "(Tensor x, Tensor scale) -> Tensor", outputs.like("x", torch.float8_e4m3fn), EXACT,
         reference=f"{_EXECUTE}:fp8_cast_static"),
    Slot("fp8_cast_dynamic",
         "activations to E4M3 codes and per-row scales in one pass (dynamic prologue)",
         "(Tensor x) -> (Tensor, Tensor)", outputs.fp8_codes_and_row_scales, EXACT,
         reference=f"{_EXECUTE}:fp8_cast_dynamic"),
    Slot("fp8_perchannel_epilogue",
         "float32 accumulator x row scale x column scale + bias, ReLU, cast",
         "(Tensor acc, Tensor row_scale, Tensor col_scale, Tensor? bias=None, "
         "str? activation=None, ScalarType out_dtype=bfloat16) -> Tensor", outputs.epilogue,
         EXACT, reference=f"{_EXECUTE}:fp8_perchannel_epilogue"),
    # The GEMMs' outputs are half precision: Hopper's FP8 tensor cores accumulate with ~14 bits
    # (docs/fp8_execute.md, "Outputs are half precision").
    Slot("fp8_gemm", "E4M3 GEMM, per-row x per-output-channel scales, bias, out dtype",
         _GEMM_SCHEMA, outputs.gemm, GEMM_BOUND, portable=f"{_EXECUTE}:fp8_gemm_portable",
         validator=f"{_EXECUTE}:check_fp8_gemm", dtypes=_HALF, float8_inputs=("a", "b")),
    Slot("fp8_gemm_tensorwise", "E4M3 GEMM with per-tensor scales, bias, out dtype",
         _GEMM_SCHEMA, outputs.gemm, GEMM_BOUND, portable=f"{_EXECUTE}:fp8_gemm_portable",
         validator=f"{_EXECUTE}:check_fp8_gemm_tensorwise", dtypes=_HALF,
         float8_inputs=("a", "b")),
    Slot("ms_deform_attn", "multi-scale deformable attention (Deformable-DETR layout)",
         f"{_MSDA_SCHEMA}) -> Tensor", outputs.attention, MSDA_BOUND,
         portable=f"{_MSDA}:ms_deform_attn_portable", validator=f"{_MSDA}:validate_inputs",
         layouts=_MSDA_LAYOUTS, differentiable=_MSDA_GRADIENTS),
    Slot("ms_deform_attn_ragged",
         "deformable attention with a point count per level, bilinear or discrete (RT-DETRv2)",
         f'{_MSDA_SCHEMA}, int[] points_per_level, str method="bilinear") -> Tensor',
         outputs.attention, MSDA_BOUND, portable=f"{_MSDA}:ms_deform_attn_ragged_portable",
         validator=f"{_MSDA}:validate_ragged_inputs", layouts=_MSDA_LAYOUTS,
         differentiable=_MSDA_GRADIENTS,
         gradient_unless=(("sampling_locations", "method", "discrete"),)),
)

_BY_NAME = {slot.name: slot for slot in SLOTS}


def get_slot(name: str) -> Slot:
    """The declared slot called ``name``; otherwise a ValueError naming the nearest slot, or
    listing them all when none is near."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        near = did_you_mean(name, _BY_NAME)
        raise ValueError(f"op: unknown slot {name!r}" + (
            near or f"; declared slots are {', '.join(sorted(_BY_NAME))}")) from None


def slot_names() -> tuple[str, ...]:
    return tuple(slot.name for slot in SLOTS)

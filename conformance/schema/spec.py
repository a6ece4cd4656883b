"""What a slot declares to the suite: everything the matrix, gate, CLI and docs derive from."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from libreyolo.kernels.capabilities import MODES
from libreyolo.kernels.slots import FLOAT_DTYPES, LAYOUTS, Contract, Slot, get_slot

__all__ = ["ANY_IMPLEMENTATION", "FLOAT_DTYPES", "LAYOUTS", "MODES", "Case", "Contract",
           "ErrorInput", "Expectation", "Inputs", "SlotSpec", "error_input", "tensor"]


@dataclass(frozen=True)
class Expectation:
    """Which cases an implementation promises to take; declining one of them is a failure."""

    modes: frozenset = frozenset(MODES)
    dtypes: frozenset = frozenset(FLOAT_DTYPES)
    layouts: frozenset = frozenset(LAYOUTS)

    def covers(self, mode: str, dtype: torch.dtype, layout: str) -> bool:
        return mode in self.modes and dtype in self.dtypes and layout in self.layouts

    def within(self, declared) -> Expectation:
        """The cases of this expectation inside a declaration (`libreyolo.kernels.Capabilities`,
        None: all of them): the modes it allows (devices included), the dtypes and layouts it
        names."""
        if declared is None:
            return self
        return Expectation(
            modes=frozenset(m for m in self.modes if declared.mode_decline(m) is None),
            dtypes=self.dtypes if declared.dtypes is None else self.dtypes & declared.dtypes,
            layouts=self.layouts if declared.layouts is None else self.layouts & declared.layouts)

    def excluded_by(self, declared) -> list[str]:
        """What of this expectation a declaration leaves out, by dimension (empty: nothing)."""
        kept = self.within(declared).as_dict()
        return [f"{name} {', '.join(sorted(set(wanted) - set(kept[name])))}"
                for name, wanted in self.as_dict().items() if set(wanted) - set(kept[name])]

    def as_dict(self) -> dict:
        return {
            "modes": sorted(self.modes),
            "dtypes": sorted(str(d).removeprefix("torch.") for d in self.dtypes),
            "layouts": sorted(self.layouts),
        }


#: What an implementation nobody declared is held to: every case, in every compiled mode its
#: environment predicate allows (so a backend that declines everything cannot look green).
ANY_IMPLEMENTATION = "*"
DEFAULT_EXPECTATION = Expectation(modes=frozenset({"cpu", "cuda", "cuda-graph"}))
#: The reference is exercised on CPU and CUDA; graph capture is promised only by accelerated
#: implementations (docs/architecture.md, "Graph capture: export, torch.compile, CUDA graphs"),
#: and the interpreter changes nothing for it.
REFERENCE_EXPECTATION = Expectation(modes=frozenset({"cpu", "cuda"}))
#: Triton providers run compiled on CUDA and interpreted on CPU tensors.
TRITON_EXPECTATION = Expectation(modes=frozenset({"cuda", "cuda-graph", "interpreter"}))


@dataclass(frozen=True)
class Case:
    """One named shape-set entry: generator parameters plus where the shape comes from."""

    name: str
    source: str
    size: str
    params: Mapping[str, Any]


@dataclass
class Inputs:
    """Arguments for one call; `grad_args`: positional indices of the differentiable inputs."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    grad_args: tuple = (0,)

    def to(self, device: str) -> Inputs:
        """Same values and layout on another device (strides and gap contents preserved)."""
        return Inputs(tuple(_move(a, device) for a in self.args),
                      {k: _move(v, device) for k, v in self.kwargs.items()}, self.grad_args)

    def tensors(self) -> list[torch.Tensor]:
        return [a for a in (*self.args, *self.kwargs.values()) if isinstance(a, torch.Tensor)]


def _move(value, device):
    if not isinstance(value, torch.Tensor) or value.device.type == device:
        return value
    if value._base is None:
        return value.to(device)
    base = value._base.to(device)
    return base.as_strided(value.shape, value.stride(), value.storage_offset())


@dataclass(frozen=True)
class ErrorInput:
    """An input every implementation of a slot must refuse, in the spirit of PyTorch OpInfo's
    error inputs: it raises `error` with `match` (the argument's name) in its message, or declines
    the input so that the next implementation (at last the reference or portable path) raises it.
    Returning numbers fails. `build(device, other)` makes the input on `device`, `other` being a
    device that is not it; `rule` cites where the rule is written."""

    name: str
    build: Callable[[str, str], Inputs]
    error: type[Exception]
    match: str
    rule: str
    #: implementation -> the issue that makes it refuse this input (a strict expected failure
    #: until then: fixing it without removing the entry fails the run)
    failing: Mapping[str, str] = field(default_factory=dict)


def error_input(name: str, error: type[Exception], match: str, rule: str, *args,
                **kwargs) -> ErrorInput:
    """An ErrorInput from the call's arguments; a callable argument is a maker `(device, other)
    -> value` (see `tensor`), anything else is passed as it is."""

    def build(device: str, other: str) -> Inputs:
        def value(a):
            return a(device, other) if callable(a) else a

        return Inputs(tuple(value(a) for a in args), {k: value(v) for k, v in kwargs.items()},
                      grad_args=())

    return ErrorInput(name, build, error, match, rule)


def tensor(shape=(4, 6), dtype: torch.dtype = torch.float32, *, values=None,
           on: str = "same") -> Callable[[str, str], torch.Tensor]:
    """A maker of a small tensor for error inputs: `values` (row-major) or a ramp over [-2, 2],
    of `dtype`, on the cell's device (`on="other"`: on another one)."""

    def make(device: str, other: str) -> torch.Tensor:
        n = math.prod(shape)
        ramp = torch.linspace(-2.0, 2.0, n) if values is None else torch.tensor(values).double()
        return ramp.reshape(shape).to(dtype).to(other if on == "other" else device)

    return make


@dataclass(frozen=True)
class SlotSpec:
    """The suite's profile of one slot, attached to its declaration by name: how to make its
    inputs (the shape set `shapes`, the seeded generator, the hypothesis strategy), its error
    inputs, which cases each implementation is held to, and how to explain a mismatch. What the
    slot is (signature, reference, contract, dtypes, layouts, portable path) is its declaration's
    (`libreyolo/kernels/slots.py`), read through the properties below; see docs/conformance.md,
    "Adding a slot"."""

    name: str
    make_inputs: Callable[[Case, torch.dtype, str, torch.Generator], Inputs]
    strategy: Callable[[], Any]
    ste_mask: Callable[..., torch.Tensor] | None = None
    expects: Mapping[str, Expectation] = field(default_factory=dict)
    error_inputs: tuple[ErrorInput, ...] = ()
    #: (inputs, output index) -> the parameters that applied at that output element (its scale,
    #: zero point, block scale, code byte...), for mismatch messages
    applied: Callable[[Inputs, tuple], dict] | None = None
    #: the catalogue module whose kind made this profile, as the shape set's `[profile]` names
    #: it (set when the catalogue is built)
    family: str = ""

    def __post_init__(self):
        if self.contract.ste and self.ste_mask is None:
            raise ValueError(f"slot {self.name}: an ste contract needs ste_mask")

    @property
    def slot(self) -> Slot:
        return get_slot(self.name)

    @property
    def signature(self) -> str:
        return self.slot.schema

    @property
    def reference(self) -> str | None:
        return self.slot.reference

    @property
    def contract(self) -> Contract:
        return self.slot.contract

    @property
    def dtypes(self) -> tuple:
        return self.slot.dtypes

    @property
    def layouts(self) -> tuple:
        return self.slot.layouts

    @property
    def shapes(self) -> str:
        """The shape set's file in conformance/shapes/, named after the slot."""
        return f"{self.name}.toml"

    @property
    def portable(self) -> Callable | None:
        """The callers' portable path of a slot without a reference (the bounded contract's
        yardstick and oracle), unchecked: the oracle runs it on float64."""
        return None if self.reference is not None else self.slot.load_portable()

    def reference_fn(self) -> Callable:
        """The reference function, imported on demand (`module:function`)."""
        if self.reference is None:
            raise ValueError(f"slot {self.name} has no reference")
        return self.slot.load_reference()

    def fallback(self) -> Callable:
        """What runs after every implementation declined: the reference, or, for a slot without
        one, its validator and then the callers' portable path."""
        if self.reference is not None:
            return self.reference_fn()
        validate, portable = self.slot.load_validator(), self.slot.load_portable()

        def checked(*args, **kwargs):
            validate(*args, **kwargs)
            return portable(*args, **kwargs)

        return checked

    def expectation(self, impl_name: str) -> Expectation:
        if impl_name == "reference":
            return self.expects.get("reference", REFERENCE_EXPECTATION)
        default = self.expects.get(ANY_IMPLEMENTATION, DEFAULT_EXPECTATION)
        return self.expects.get(impl_name, default)

"""What an implementation declares it supports, as data, when it registers.

In the spirit of xformers' operator attributes (supported devices, dtypes, ...) and the Hub
kernels' modes: one frozen value, ``Capabilities(devices=, dtypes=, modes=, layouts=, traced=)``,
where a dimension left ``None`` (``traced``: True) restricts nothing. The registry declines an
input outside the declaration with a reason derived from it (``declared unsupported (dtype
float16 not in declared dtypes float32)``), before the implementation's own ``accepts``; the
conformance suite reads the same value for its expectations (docs/conformance.md). Modes and
layouts are the suite's:

* modes: ``cpu`` (CPU tensors), ``interpreter`` (CPU tensors while ``TRITON_INTERPRET`` is set),
  ``cuda`` (CUDA tensors, eager) and ``cuda-graph`` (CUDA tensors while a CUDA graph is
  captured). They apply to CPU and CUDA tensors; ``devices`` names the device types taken at all.
* layouts: ``contiguous`` (row-major), ``transposed`` (dense but permuted: reversed strides,
  channels-last) and ``gapped`` (a view that skips or repeats elements). Every tensor argument
  must have a declared layout.
* traced: ``False`` declines every call while a graph is traced, compiled or exported
  (``libreyolo.capture.is_capturing``), so an exported graph keeps the portable math, except
  where a compiled graph traces an in-tree implementation into itself
  (``libreyolo.capture.tracing_kernels``: the graph stays in this process). The
  registry asks no implementation while a graph is captured; this holds the same for the callers
  that ask one directly (the slot's operator, the suite, a backend's own code).

The check costs nothing for an implementation that declares nothing, and looks only at tensors.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch

from libreyolo.capture import CAPTURE_REASON, is_capturing, kernels_traced

from . import settings
from .slots import LAYOUTS, get_slot

MODES = ("cpu", "interpreter", "cuda", "cuda-graph")
#: The device type each mode runs on.
MODE_DEVICES = {"cpu": "cpu", "interpreter": "cpu", "cuda": "cuda", "cuda-graph": "cuda"}
#: The modes that run on a GPU: a record needs passing cells in each (the suite's one list).
GPU_MODES = tuple(mode for mode in MODES if MODE_DEVICES[mode] == "cuda")
DECLARED = "declared unsupported"


def _ordered(values: frozenset, order: tuple = ()) -> list[str]:
    """A declared set's names in a stable order: the dimension's own, else sorted."""
    return [v for v in order if v in values] or sorted(map(dtype_name, values))


def _names(values: frozenset, order: tuple = ()) -> str:
    return ", ".join(_ordered(values, order))


def dtype_name(value) -> str:
    return str(value).removeprefix("torch.") if isinstance(value, torch.dtype) else str(value)


def _checked_set(argument: str, values) -> frozenset | None:
    if values is None:
        return None
    if isinstance(values, (str, bytes, torch.dtype)) or not isinstance(values, Iterable):
        raise TypeError(f"{argument}: expected an iterable (set, tuple, list) or None, got "
                        f"{values!r}")
    checked = frozenset(values)
    if not checked:
        raise ValueError(f"{argument}: an empty declaration would decline every input; leave it "
                         "None for no restriction")
    return checked


def _checked_device(name) -> None:
    if not isinstance(name, str):
        raise TypeError(f"devices: expected device type names (str), got {name!r}")
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type != name or device.index is not None:
        raise ValueError(f"devices: {name!r} is not a torch device type (such as 'cpu', 'cuda', "
                         "'mps'; without an index)")


def _checked_names(argument: str, values: frozenset, known: tuple) -> None:
    for value in values:
        if value not in known:
            raise ValueError(f"{argument}: unknown {argument[:-1]} {value!r}; expected one of "
                             f"{', '.join(known)}")


@dataclass(frozen=True)
class Capabilities:
    """What an implementation supports; ``None`` in a dimension means "no restriction".

    ``devices``: torch device types (``"cpu"``, ``"cuda"``, ...); ``dtypes``: ``torch.dtype``
    values, compared with a call's dtype (its ``dtype`` argument where the slot has one, as the
    unpack slots do, else its first tensor's); ``modes`` and ``layouts``: names from ``MODES``
    and ``LAYOUTS``; ``traced``: whether it runs while a graph is captured (the module docstring
    says what each means).
    """

    devices: frozenset | None = None
    dtypes: frozenset | None = None
    modes: frozenset | None = None
    layouts: frozenset | None = None
    traced: bool = True
    #: Worked out once for `decline`: the device types whose modes the declaration tells apart
    #: (only there is a call's mode looked up), and whether layouts restrict anything.
    _split_devices: frozenset = field(default=frozenset(), init=False, repr=False, compare=False)
    _checks_layouts: bool = field(default=False, init=False, repr=False, compare=False)
    #: ... whether it restricts anything but tracing, and whether CPU and CUDA tensors are taken
    #: (read from a tensor's ``is_cpu``/``is_cuda``: ``t.device`` builds an object per call)
    _restricts: bool = field(default=False, init=False, repr=False, compare=False)
    _cpu_ok: bool = field(default=True, init=False, repr=False, compare=False)
    _cuda_ok: bool = field(default=True, init=False, repr=False, compare=False)

    def __post_init__(self):
        for argument in ("devices", "dtypes", "modes", "layouts"):
            object.__setattr__(self, argument, _checked_set(argument, getattr(self, argument)))
        for device in self.devices or ():
            _checked_device(device)
        for dtype in self.dtypes or ():
            if not isinstance(dtype, torch.dtype):
                raise TypeError(f"dtypes: expected torch.dtype values, got {dtype!r} "
                                f"({type(dtype).__name__})")
        if not isinstance(self.traced, bool):
            raise TypeError(f"traced: expected True or False, got {self.traced!r}")
        _checked_names("modes", self.modes or frozenset(), MODES)
        _checked_names("layouts", self.layouts or frozenset(), LAYOUTS)
        for mode in self.modes or ():
            if self.devices is not None and MODE_DEVICES[mode] not in self.devices:
                raise ValueError(f"modes: {mode!r} runs on {MODE_DEVICES[mode]} tensors, which "
                                 f"the declared devices ({_names(self.devices)}) exclude")
        if self.modes is not None:
            object.__setattr__(self, "_split_devices", frozenset(
                MODE_DEVICES[m] for m in MODES if m not in self.modes))
        object.__setattr__(self, "_checks_layouts",
                           self.layouts is not None and len(self.layouts) < len(LAYOUTS))
        object.__setattr__(self, "_restricts", self.devices is not None or self.dtypes is not None
                           or self.modes is not None or self._checks_layouts)
        if self.devices is not None:
            object.__setattr__(self, "_cpu_ok", "cpu" in self.devices)
            object.__setattr__(self, "_cuda_ok", "cuda" in self.devices)

    def as_dict(self) -> dict:
        """Each dimension as a sorted list of names, or None (no restriction), and ``traced``
        when it restricts (False): JSON-ready."""
        orders = {"modes": MODES, "layouts": LAYOUTS}
        out = {name: None if (values := getattr(self, name)) is None
               else _ordered(values, orders.get(name, ()))
               for name in ("devices", "dtypes", "modes", "layouts")}
        if not self.traced:
            out["traced"] = False
        return out

    def __str__(self) -> str:
        return described(self.as_dict())

    def mode_decline(self, mode: str) -> str | None:
        """Why a call in ``mode`` (one of MODES) is outside the declaration (None: inside)."""
        device = MODE_DEVICES[mode]
        if self.devices is not None and device not in self.devices:
            return f"{DECLARED} (device {device} not in declared devices {_names(self.devices)})"
        if self.modes is not None and mode not in self.modes:
            return f"{DECLARED} (mode {mode} not in declared modes {_names(self.modes, MODES)})"
        return None

    def decline(self, op: str, args: tuple, kwargs: dict, mode: str | None = None) -> str | None:
        """Why this call of slot ``op`` is outside the declaration (None: inside it). ``mode``
        defaults to the call's own: its first tensor's device, the interpreter setting and
        whether a CUDA graph is being captured."""
        if not self.traced and is_capturing() and not kernels_traced():
            return f"{DECLARED} ({CAPTURE_REASON})"
        if not self._restricts:
            return None
        tensors = [*filter(_is_tensor, args)]
        if kwargs:
            tensors += filter(_is_tensor, kwargs.values())
        if not tensors:
            return None
        if self.devices is not None:
            for t in tensors:
                if not (self._cuda_ok if t.is_cuda else self._cpu_ok if t.is_cpu
                        else t.device.type in self.devices):
                    return (f"{DECLARED} (device {t.device.type} not in declared devices "
                            f"{_names(self.devices)})")
        if self.modes is not None:
            first = tensors[0]
            device = "cuda" if first.is_cuda else "cpu" if first.is_cpu else first.device.type
            if mode is None and device in self._split_devices:
                mode = _call_mode(device)
            if mode is not None and mode not in self.modes:
                return f"{DECLARED} (mode {mode} not in declared modes {_names(self.modes, MODES)})"
        if self.dtypes is not None:
            dtype = call_dtype(op, args, kwargs, tensors[0])
            if dtype not in self.dtypes:
                return (f"{DECLARED} (dtype {dtype_name(dtype)} not in declared dtypes "
                        f"{_names(self.dtypes)})")
        if self._checks_layouts:
            for t in tensors:
                layout = layout_of(t)
                if layout not in self.layouts:
                    return (f"{DECLARED} (layout {layout} not in declared layouts "
                            f"{_names(self.layouts, LAYOUTS)})")
        return None


#: ``isinstance(a, torch.Tensor)`` as one C function, for ``filter``
_is_tensor = torch.Tensor.__instancecheck__


def described(declared: dict) -> str:
    """A declaration's ``as_dict()`` (or its JSON) in words, as the CLI and the suite print it:
    ``devices cpu, cuda; modes interpreter, cuda, cuda-graph; not traced``."""
    parts = [f"{name} {', '.join(values)}" for name, values in declared.items()
             if isinstance(values, list)]
    if declared.get("traced") is False:
        parts.append("not traced")
    return "; ".join(parts) or "no restriction"


def _call_mode(device: str) -> str:
    """The mode of a call on CPU or CUDA tensors (reading the capture state costs a call into
    CUDA: `decline` asks only where the declaration tells the device's modes apart)."""
    if device == "cpu":
        return "interpreter" if settings.interpreting() else "cpu"
    return "cuda-graph" if torch.cuda.is_current_stream_capturing() else "cuda"


def call_dtype(op: str, args: tuple, kwargs: dict, first: torch.Tensor) -> torch.dtype:
    """The dtype a call computes in: its ``dtype`` argument (the unpack slots' output dtype,
    the reference's default when the call leaves it out), else its first tensor's dtype."""
    for value in args:
        if isinstance(value, torch.dtype):
            return value
    for value in kwargs.values():
        if isinstance(value, torch.dtype):
            return value
    default = _default_dtype(op)
    return default if default is not None else first.dtype


@functools.cache
def _default_dtype(op: str) -> torch.dtype | None:
    reference = get_slot(op).load_reference()
    if reference is None:
        return None
    parameter = inspect.signature(reference).parameters.get("dtype")
    default = parameter.default if parameter is not None else None
    return default if isinstance(default, torch.dtype) else None


def layout_of(t: torch.Tensor) -> str:
    """``contiguous``, ``transposed`` (dense, permuted) or ``gapped`` (skips or repeats)."""
    if t.is_contiguous():
        return "contiguous"
    expected = 1
    for size, stride in sorted((p for p in zip(t.shape, t.stride(), strict=True) if p[0] > 1),
                               key=lambda p: p[1]):
        if stride != expected:
            return "gapped"
        expected *= size
    return "transposed"

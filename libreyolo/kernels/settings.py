"""Every environment setting of the kernel subsystem, read in one place.

Settings are read on each call (an ``os.environ`` lookup is cheap, and a value already seen is
parsed once), so a change between calls is honoured without restarting the process.
``docs/settings.md`` documents each one.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

KERNELS = "LIBREYOLO_KERNELS"
LEGACY_KERNELS = "LIBREYOLO_QUANT_KERNELS"  # read only when KERNELS is unset
HUB_KERNELS = "LIBREYOLO_HUB_KERNELS"
# Accept a Hub build variant the lock has no audited digest for (docs/hub_kernels.md).
HUB_UNAUDITED = "LIBREYOLO_HUB_KERNELS_UNAUDITED"

REFERENCE = "reference"
_FORCE_REFERENCE = frozenset({"off", REFERENCE})
_FALSE = frozenset({"0", "false", "off", "no"})


@dataclass(frozen=True)
class Selection:
    """Which implementations may be selected, per slot.

    ``default`` applies to every slot that ``per_slot`` does not name: ``None`` (every eligible
    implementation, newest first), ``"reference"`` (the reference alone) or a name (that
    implementation, then the reference). ``per_slot`` holds ``(slot, choice)`` pairs with the
    same meanings. ``reference_only`` (references everywhere) means accelerated providers are not
    even imported.
    """

    default: str | None = None
    per_slot: tuple[tuple[str, str], ...] = ()
    source: str | None = None  # the variable the value came from, for messages
    #: What the value says that cannot be followed as written, one sentence per item (the
    #: registry warns once about each: ``SelectionWarning``).
    problems: tuple[str, ...] = ()

    @property
    def reference_only(self) -> bool:
        return self.default == REFERENCE and all(c == REFERENCE for _, c in self.per_slot)

    @property
    def only(self) -> str | None:
        """The name a bare value selects in every slot not named per slot (None: no name)."""
        return None if self.default == REFERENCE else self.default

    def choice(self, op: str) -> str | None:
        """What is selected in slot ``op``: None (everything), ``"reference"`` or a name."""
        for slot, choice in self.per_slot:
            if slot == op:
                return choice
        return self.default

    def allows(self, op: str, name: str, is_reference: bool) -> bool:
        if is_reference:
            return True
        choice = self.choice(op)
        return choice is None or choice == name


def _normalized(variable: str) -> str | None:
    value = os.environ.get(variable)
    if value is None:
        return None
    value = value.strip().lower()
    return value or None


def _choice(value: str) -> str:
    return REFERENCE if value in _FORCE_REFERENCE else value


@functools.lru_cache(maxsize=64)
def parse_selection(value: str | None, source: str | None) -> Selection:
    """A selection value: comma-separated items, each ``slot=name`` (that slot) or a bare
    ``name`` (every slot not named); ``off`` and ``reference`` force the reference. A later item
    overrides an earlier one for the same slot; an empty item is ignored. What cannot be
    followed as written is kept in ``problems`` (docs/settings.md): a second, different bare
    name (the last one is used), an item with an empty side of ``=`` (ignored)."""
    default, per_slot, problems = None, {}, []
    for item in (value or "").split(","):
        slot, equals, name = (part.strip() for part in item.strip().lower().partition("="))
        if not equals:
            if slot and default is not None and _choice(slot) != default:
                problems.append(f"names {default!r} and {_choice(slot)!r} for every slot; one "
                                f"bare name applies to the slots not named, so the last, "
                                f"{_choice(slot)!r}, is used (name one per slot with slot=name)")
            default = _choice(slot) if slot else default
        elif slot and name:
            per_slot[slot] = _choice(name)
        else:
            what = "no implementation" if slot else "no slot"
            problems.append(f"the item {item.strip()!r} names {what} (expected slot=name); "
                            "it is ignored")
    return Selection(default, tuple(per_slot.items()), source, tuple(problems))


def selection() -> Selection:
    """The selection in effect: ``LIBREYOLO_KERNELS``, else the legacy alias, else everything."""
    for variable in (KERNELS, LEGACY_KERNELS):
        value = os.environ.get(variable)
        if value is not None:
            return parse_selection(value, variable)
    return parse_selection(None, None)


TRITON_INTERPRET = "TRITON_INTERPRET"
# Triton's own reading of the variable (triton 3.6, knobs.getenv_bool): these, case-insensitive.
_TRITON_TRUE = frozenset({"1", "true", "on", "yes"})


def _raw_reader(variables: tuple[str, str, str] = (KERNELS, LEGACY_KERNELS, TRITON_INTERPRET)):
    """A function returning the raw values of three variables, as stored; by default those that
    decide which implementations may run (the registry's cache key: equal values, equal
    decisions).

    ``os.environ.get`` of an unset variable raises and catches a KeyError inside ``_Environ``,
    about fifty times a lookup in its own dict (``_data``, keyed by ``encodekey``;
    ``benchmarks/NOTES.md``, "Host-side helpers"), and two of the three are unset in the common
    case, so reading them is most of a dispatch. Both are CPython's ``os._Environ`` since 3.2;
    where they are missing, the public mapping is read instead.
    """
    data, encode = getattr(os.environ, "_data", None), getattr(os.environ, "encodekey", None)
    if not (isinstance(data, dict) and callable(encode)):
        return lambda: tuple(os.environ.get(v) for v in variables)
    get = data.get
    first, second, third = (encode(v) for v in variables)
    return lambda: (get(first), get(second), get(third))


#: ``raw_values()``: see ``_raw_reader``.
raw_values = _raw_reader()


def interpreting() -> bool:
    """Triton kernels run on CPU tensors through the interpreter (a test mode)."""
    if raw_values()[2] is None:  # unset, the common case: no KeyError raised (``_raw_reader``)
        return False
    return (os.environ.get(TRITON_INTERPRET) or "").strip().lower() in _TRITON_TRUE


def hub_kernels_enabled() -> bool:
    """False when ``LIBREYOLO_HUB_KERNELS`` is 0/false/off/no (case- and space-insensitive)."""
    value = _normalized(HUB_KERNELS)
    return value is None or value not in _FALSE


_TRUE = frozenset({"1", "true", "on", "yes"})


def hub_unaudited_allowed() -> bool:
    """True when ``LIBREYOLO_HUB_KERNELS_UNAUDITED`` is 1/true/on/yes: a Hub build variant the
    lock holds no digest for may load (with one warning) instead of being refused."""
    return _normalized(HUB_UNAUDITED) in _TRUE


FP8_FAST_ACCUMULATION = "LIBREYOLO_FP8_FAST_ACCUMULATION"


def fp8_fast_accumulation() -> bool | None:
    """Whether the fused FP8 linear's GEMMs keep their sums in the FP8 tensor cores' own
    accumulator (``torch._scaled_mm(use_fast_accum=True)``) instead of promoting them to float32
    (docs/fp8_execute.md, "Accumulation"), from ``LIBREYOLO_FP8_FAST_ACCUMULATION``: True for
    1/true/on/yes (every GEMM), False for 0/false/off/no (none), None when unset, empty or
    ``auto`` (the reduction length decides: ``fp8_linear.fast_accumulation``). Any other value
    raises, naming the variable: a typo must not pick the accumulation silently."""
    value = _normalized(FP8_FAST_ACCUMULATION)
    if value is None or value == "auto":
        return None
    if value in _TRUE or value in _FALSE:
        return value in _TRUE
    raise ValueError(f"{FP8_FAST_ACCUMULATION} must be auto, 1/true/on/yes or 0/false/off/no, "
                     f"got {os.environ.get(FP8_FAST_ACCUMULATION)!r}")


#: ``plan_raw_values()``: the raw values of the settings an implementation's ``accepts`` may read
#: beside the selection (the Hub switches, the FP8 accumulation); with ``raw_values``, every
#: setting ``in_effect`` lists. A bound slot (``bound.py``) keeps its choice under both.
plan_raw_values = _raw_reader((HUB_KERNELS, HUB_UNAUDITED, FP8_FAST_ACCUMULATION))


def in_effect() -> dict[str, str | None]:
    """The raw values of every setting, for the CLI and for parity records."""
    variables = (KERNELS, LEGACY_KERNELS, HUB_KERNELS, HUB_UNAUDITED, FP8_FAST_ACCUMULATION,
                 TRITON_INTERPRET)
    return {name: os.environ.get(name) for name in variables}


_IN_EFFECT = (KERNELS, LEGACY_KERNELS, HUB_KERNELS, HUB_UNAUDITED, FP8_FAST_ACCUMULATION,
              TRITON_INTERPRET)
_ENCODE = getattr(os.environ, "encodekey", None)
_TRACED_KEYS = tuple(map(_ENCODE, _IN_EFFECT)) if callable(_ENCODE) else ()


def traced_values() -> tuple:
    """The raw values of every setting, read so that Dynamo can trace the reads: where a slot
    call is traced, each becomes a guard of the compiled graph (``registry._selection_guard``).
    ``raw_values`` keeps a dict's bound ``get`` in a closure, which torch 2.11's Dynamo refuses
    to call; a lookup in ``os.environ``'s own dict it traces, and ``os.environ.get`` it folds to
    a constant without a guard, so it is read only where that dict is missing."""
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict) and _TRACED_KEYS:
        return tuple(data.get(key) for key in _TRACED_KEYS)
    return tuple(os.environ.get(name) for name in _IN_EFFECT)

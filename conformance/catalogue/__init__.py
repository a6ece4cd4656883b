"""The suite's profiles of the declared slots: every module in this package exposes `SLOTS`, a
list of `SlotSpec`, each attached by name to a slot declared in `libreyolo/kernels/slots.py`.

Adding a slot family is adding a module here; nothing else in the suite names a slot.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import replace

from conformance.schema.spec import SlotSpec
from libreyolo.kernels.slots import get_slot


def _discover() -> dict[str, SlotSpec]:
    slots: dict[str, SlotSpec] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name == "spec":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for spec in getattr(module, "SLOTS", ()):
            if spec.name in slots:
                raise ValueError(f"slot {spec.name!r} is declared twice in the catalogue")
            get_slot(spec.name)  # a profile attaches to a declared slot, by name
            slots[spec.name] = replace(spec, family=info.name)
    return slots


CATALOGUE: dict[str, SlotSpec] = _discover()


def slot(name: str) -> SlotSpec:
    """The catalogue entry for `name`; an unknown name lists the known ones."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise ValueError(f"unknown slot {name!r}; the catalogue has {sorted(CATALOGUE)}") from None

"""The slot catalogue: every module in this package exposes `SLOTS`, a list of `SlotSpec`.

Adding a slot family is adding a module here; nothing else in the suite names a slot.
"""

from __future__ import annotations

import importlib
import pkgutil

from conformance.catalogue.spec import SlotSpec


def _discover() -> dict[str, SlotSpec]:
    slots: dict[str, SlotSpec] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name == "spec":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for spec in getattr(module, "SLOTS", ()):
            if spec.name in slots:
                raise ValueError(f"slot {spec.name!r} is declared twice in the catalogue")
            slots[spec.name] = spec
    return slots


CATALOGUE: dict[str, SlotSpec] = _discover()


def slot(name: str) -> SlotSpec:
    """The catalogue entry for `name`; an unknown name lists the known ones."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise ValueError(f"unknown slot {name!r}; the catalogue has {sorted(CATALOGUE)}") from None

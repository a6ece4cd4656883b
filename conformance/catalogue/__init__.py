"""The suite's profiles of the declared slots, built from data: every slot declared in
`libreyolo/kernels/slots.py` has a shape set, `conformance/shapes/<slot>.toml`, whose `[profile]`
table names its family (a module of this package), its kind and the kind's parameters
(`conformance/inputs/shapesets.py` has the schema). Each family module maps its kinds to
factories in `PROFILES`: `factory(slot, **parameters) -> SlotSpec`, the parameters being the
factory's keyword-only ones (an annotation of int, str, bool or a `Literal` of the values it
takes; no default: required).

So adding a slot whose profile is like an existing one touches only its shape set, and no module
here names a slot (`tests/conformance/test_profiles.py` holds both).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Literal, get_args, get_origin

from conformance.inputs import shapesets
from conformance.schema.spec import SlotSpec
from libreyolo.kernels.slots import slot_names

#: family (module name) -> kind -> factory
FAMILIES: dict[str, dict[str, Callable[..., SlotSpec]]] = {
    info.name: importlib.import_module(f"{__name__}.{info.name}").PROFILES
    for info in pkgutil.iter_modules(__path__)}


def parameters(factory: Callable[..., SlotSpec]) -> dict[str, inspect.Parameter]:
    """The parameters a kind takes: its factory's keyword-only ones, annotations evaluated."""
    return {p.name: p for p in inspect.signature(factory, eval_str=True).parameters.values()
            if p.kind is p.KEYWORD_ONLY}


def _mistyped(value, annotation) -> str | None:
    """What `value` should have been for `annotation`, or None when it fits (a bool is no int)."""
    if get_origin(annotation) is Literal:
        allowed = get_args(annotation)
        fits = any(type(value) is type(a) and value == a for a in allowed)
        return None if fits else f"one of {', '.join(map(repr, allowed))}"
    return None if type(value) is annotation else f"of type {annotation.__name__}"


def _factory(family, kind, params: dict, where: str) -> Callable[..., SlotSpec]:
    """The factory a `[profile]` table names, once its family, kind and parameters check out."""
    if family is None:
        raise ValueError(f"{where}: no family (one of {sorted(FAMILIES)})")
    if not isinstance(family, str) or family not in FAMILIES:
        raise ValueError(f"{where}: unknown family {family!r}; the families are "
                         f"{sorted(FAMILIES)}")
    kinds = FAMILIES[family]
    if kind is None:
        raise ValueError(f"{where}: no kind (family {family!r} has kinds {sorted(kinds)})")
    if not isinstance(kind, str) or kind not in kinds:
        raise ValueError(f"{where}: unknown kind {kind!r}; family {family!r} has kinds "
                         f"{sorted(kinds)}")
    taken = parameters(kinds[kind])
    if unknown := sorted(params.keys() - taken.keys()):
        raise ValueError(f"{where}: kind {kind!r} takes no parameter {', '.join(unknown)} (it "
                         f"takes {', '.join(taken) or 'none'})")
    for name, p in taken.items():
        if name not in params:
            if p.default is p.empty:
                raise ValueError(f"{where}: kind {kind!r} needs parameter {name!r}")
        elif (wanted := _mistyped(params[name], p.annotation)) is not None:
            raise ValueError(f"{where}: parameter {name!r} of kind {kind!r} must be {wanted}, "
                             f"got {params[name]!r}")
    return kinds[kind]


def profile(name: str, directory: Path = shapesets.SHAPES_DIR) -> SlotSpec:
    """The suite's profile of declared slot `name`, as its shape set's `[profile]` declares it; a
    missing shape set or a malformed profile raises naming the slot, the file and the defect."""
    where = f"slot {name!r}, {directory / f'{name}.toml'}"
    try:
        table = shapesets.profile(f"{name}.toml", directory)
    except FileNotFoundError:
        raise FileNotFoundError(f"{where}: the slot is declared but has no shape set") from None
    if table is None:
        raise ValueError(f"{where}: no [profile] table (the slot's conformance profile: family, "
                         f"kind and the kind's parameters)")
    family, kind = table.pop("family", None), table.pop("kind", None)
    factory = _factory(family, kind, table, f"{where} [profile]")
    return replace(factory(name, **table), family=family)


def build(directory: Path = shapesets.SHAPES_DIR) -> dict[str, SlotSpec]:
    """Every declared slot's profile, by family (their modules' names in order), then in
    declaration order: the order of the docs' slot table and of the suite's cells. A shape set of
    no declared slot is an error: a profile attaches to a declared slot, by its file's name."""
    declared = slot_names()
    for path in sorted(directory.glob("*.toml")):
        if path.stem not in declared:
            raise ValueError(f"{path}: a shape set of no declared slot; libreyolo/kernels/"
                             f"slots.py declares {sorted(declared)}")
    specs = sorted((profile(name, directory) for name in declared), key=lambda s: s.family)
    return {spec.name: spec for spec in specs}


CATALOGUE: dict[str, SlotSpec] = build()


def slot(name: str) -> SlotSpec:
    """The catalogue entry for `name`; an unknown name lists the known ones."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise ValueError(f"unknown slot {name!r}; the catalogue has {sorted(CATALOGUE)}") from None

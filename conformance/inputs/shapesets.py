"""Shape sets: a slot's named cases and its conformance profile, read from
`conformance/shapes/<slot>.toml`.

Schema:

- a `[profile]` table: which of the suite's profiles the slot has, as data, so a slot whose
  profile is like an existing one is added by its shape set alone. `family` names a module of
  `conformance/catalogue/` (`fake_quant`, `packing`, ...), `kind` one of that module's `PROFILES`
  (a general shape of profile: `per_channel`, `blocked`, ...), and the other keys are the kind's
  parameters (e.g. `bits = 8`), which its factory names, types and defaults
  (`conformance.catalogue` checks them);
- a list of `[[case]]` tables, each with `name` (unique in the file, `[a-z0-9_]+`), `source`
  (the model configuration or the awkwardness it stands for), `size` (small, medium or large:
  small cases also run under the Triton interpreter), and the slot's generator parameters.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from conformance.schema.spec import Case

SHAPES_DIR = Path(__file__).resolve().parents[1] / "shapes"
SIZES = ("small", "medium", "large")
_NAME = re.compile(r"[a-z0-9_]+")


def _read(file: str, directory: Path) -> tuple[Path, dict]:
    path = directory / file
    if not path.exists():
        raise FileNotFoundError(f"shape set {path} does not exist")
    with path.open("rb") as f:
        return path, tomllib.load(f)


def load(file: str, directory: Path = SHAPES_DIR) -> list[Case]:
    """The cases in one shape-set file, validated against the schema."""
    path, data = _read(file, directory)
    cases, seen = [], set()
    for i, table in enumerate(data.get("case", [])):
        where = f"{path.name}, case #{i + 1}"
        params = dict(table)
        name, source, size = (params.pop(key, None) for key in ("name", "source", "size"))
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValueError(f"{where}: name must match [a-z0-9_]+, got {name!r}")
        if name in seen:
            raise ValueError(f"{where}: duplicate case name {name!r}")
        if not isinstance(source, str) or not source:
            raise ValueError(f"{where} ({name}): source must say where the shape comes from")
        if size not in SIZES:
            raise ValueError(f"{where} ({name}): size must be one of {SIZES}, got {size!r}")
        seen.add(name)
        cases.append(Case(name, source, size, params))
    return cases


def profile(file: str, directory: Path = SHAPES_DIR) -> dict | None:
    """A copy of the shape set's `[profile]` table (None when it has none); what its keys must be
    is the catalogue's to check (`conformance.catalogue.profile`)."""
    table = _read(file, directory)[1].get("profile")
    return dict(table) if isinstance(table, dict) else None

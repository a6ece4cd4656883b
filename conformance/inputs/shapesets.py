"""Shape sets: named cases per slot, read from `conformance/shapes/<file>.toml`.

Schema: a list of `[[case]]` tables, each with `name` (unique in the file, `[a-z0-9_]+`),
`source` (the model configuration or the awkwardness it stands for), `size` (small, medium or
large: small cases also run under the Triton interpreter), and the slot's generator parameters.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from conformance.schema.spec import Case

SHAPES_DIR = Path(__file__).resolve().parents[1] / "shapes"
SIZES = ("small", "medium", "large")
_NAME = re.compile(r"[a-z0-9_]+")


def load(file: str, directory: Path = SHAPES_DIR) -> list[Case]:
    """The cases in one shape-set file, validated against the schema."""
    path = directory / file
    if not path.exists():
        raise FileNotFoundError(f"shape set {path} does not exist")
    with path.open("rb") as f:
        tables = tomllib.load(f).get("case", [])
    cases, seen = [], set()
    for i, table in enumerate(tables):
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

"""Matrix cells, their JSON form, and the tables people read (terminal and markdown)."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from libreyolo.kernels.capabilities import described

STATES = ("pass", "fail", "not-applicable", "crash")
#: What tables count: the states, with the not-applicable cells outside an implementation's own
#: declaration (`declined_by == "declaration"`) apart from the others (environment, catalogue,
#: an input outside what the implementation is held to).
DECLARED = "declared unsupported"
COUNTED = ("pass", "fail", "not-applicable", DECLARED, "crash")
FORMAT_VERSION = 1


@dataclass
class Cell:
    """One slot x implementation x mode x dtype x case result; `case` is `name@layout`."""

    slot: str
    impl: str
    mode: str
    dtype: str
    case: str
    size: str
    state: str
    failed_checks: list = field(default_factory=list)
    reason: str | None = None
    measurements: dict = field(default_factory=dict)
    seconds: float = 0.0
    origin: str = "suite"
    reproduce: str | None = None  # the command that re-runs this cell
    #: why a not-applicable cell is: "declaration", "environment", "catalogue" or "input"
    declined_by: str | None = None

    def __post_init__(self):
        if self.state not in STATES:
            raise ValueError(f"state: expected one of {STATES}, got {self.state!r}")

    @property
    def counted_as(self) -> str:
        """The table column this cell counts in (`COUNTED`)."""
        return DECLARED if self.declined_by == "declaration" else self.state

    @property
    def key(self) -> tuple:
        return (self.slot, self.impl, self.mode, self.dtype, self.case, self.origin)

    def to_json(self) -> str:
        return json.dumps(json_safe(asdict(self)), sort_keys=True, allow_nan=False, default=str)

    @classmethod
    def from_dict(cls, data: dict) -> Cell:
        return cls(**data)


def json_safe(data):
    """``data`` with every NaN or infinite float written as the string ``"nan"``, ``"inf"`` or
    ``"-inf"``: JSON has no such numbers, and a non-finite measurement is a result to keep (the
    cell that holds it has failed), not a reason to lose the cell."""
    if isinstance(data, float) and not math.isfinite(data):
        return "nan" if math.isnan(data) else ("inf" if data > 0 else "-inf")
    if isinstance(data, dict):
        return {key: json_safe(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [json_safe(value) for value in data]
    return data


def merge(*groups) -> list[Cell]:
    """Cells from several processes; a later cell with the same key replaces an earlier one."""
    merged: dict[tuple, Cell] = {}
    for group in groups:
        for cell in group:
            merged[cell.key] = cell
    return sorted(merged.values(), key=lambda c: c.key)


def write(path: str | Path, cells: list[Cell], meta: dict) -> None:
    payload = {"format": FORMAT_VERSION, "meta": meta,
               "cells": [json.loads(c.to_json()) for c in cells]}
    Path(path).write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")


def read(path: str | Path) -> tuple[list[Cell], dict]:
    payload = json.loads(Path(path).read_text())
    if payload.get("format") != FORMAT_VERSION:
        raise ValueError(f"{path}: matrix format {payload.get('format')!r}, expected "
                         f"{FORMAT_VERSION}")
    return [Cell.from_dict(c) for c in payload["cells"]], payload.get("meta", {})


def summary_rows(cells: list[Cell]) -> list[list[str]]:
    """One row per slot x implementation x mode: counts per state and the first failure."""
    groups: dict[tuple, list[Cell]] = defaultdict(list)
    for cell in cells:
        groups[(cell.slot, cell.impl, cell.mode)].append(cell)
    rows = []
    for (slot, impl, mode), group in sorted(groups.items()):
        counts = Counter(c.counted_as for c in group)
        bad = next((c for c in group if c.state in ("fail", "crash")), None)
        na = next((c for c in group if c.counted_as == "not-applicable"), None) or \
            next((c for c in group if c.state == "not-applicable"), None)
        note = (f"{bad.dtype} {bad.case}: {', '.join(bad.failed_checks) or bad.reason}" if bad
                else f"n/a: {na.reason}" if na else "")
        rows.append([slot, impl, mode, *(str(counts.get(s, 0)) for s in COUNTED), note])
    return rows


def count_line(cells: list[Cell]) -> str:
    """`N cells: a pass, b fail, ...` over the given cells (columns with no cell omitted)."""
    counts = Counter(c.counted_as for c in cells)
    states = ", ".join(f"{counts[s]} {s}" for s in COUNTED if counts[s])
    return f"{len(cells)} cells" + (f": {states}" if states else "")


HEADER = ["slot", "implementation", "mode", *COUNTED, "first failure / reason"]


def declaration_lines(declarations: dict) -> list[str]:
    """One line per implementation: what it declared, and what the run held it to."""
    lines = []
    for key, entry in sorted(declarations.items()):
        declared = entry["declared"]
        said = described(declared) if declared else ""
        held = "; ".join(f"{k} {', '.join(v)}" for k, v in entry["held_to"].items())
        bar = ("held to the catalogue (in tree)" if entry["bar"] == "catalogue" and declared
               else "held to the catalogue" if entry["bar"] == "catalogue"
               else "held to its declaration within the catalogue")
        lines.append(f"{key} ({entry['origin']}): declares {said or 'nothing'}; {bar}: {held}")
    return lines


def render_text(cells: list[Cell]) -> str:
    rows = [HEADER, *summary_rows(cells)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER) - 1)]
    return "\n".join("  ".join([*(v.ljust(w) for v, w in zip(row, widths, strict=False)), row[-1]])
                     for row in rows)


def render_markdown(cells: list[Cell], meta: dict | None = None) -> str:
    out = []
    meta = dict(meta or {})
    declarations = meta.pop("declarations", None)
    if meta:
        out.append(", ".join(f"{k}: {v}" for k, v in sorted(meta.items())) + "\n")
    out.append(count_line(cells) + "\n")
    out.append("| " + " | ".join(HEADER) + " |")
    out.append("|" + " --- |" * len(HEADER))
    for row in summary_rows(cells):
        out.append("| " + " | ".join(v.replace("|", "\\|") for v in row) + " |")
    if declarations:
        out.append("\n### Declared capabilities\n")
        out += [f"- {line}" for line in declaration_lines(declarations)]
    failures = [c for c in cells if c.state in ("fail", "crash")]
    if failures:
        out.append("\n### Failing cells\n")
        out.append("| slot | implementation | mode | dtype | case | state | checks | reproduce |")
        out.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for c in failures:
            checks = ", ".join(c.failed_checks) or (c.reason or "")
            command = f"`{c.reproduce}`" if c.reproduce else ""
            out.append(f"| {c.slot} | {c.impl} | {c.mode} | {c.dtype} | {c.case} | {c.state} "
                       f"| {checks.replace('|', '/')} | {command.replace('|', '/')} |")
    return "\n".join(out) + "\n"

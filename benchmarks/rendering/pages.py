"""The pages holding generated tables, and rendering them: each table sits between
``<!-- table: NAME -->`` and ``<!-- end table -->``; what is between the markers is a table
function's output and nothing else."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.rendering.attention_tables import (
    ATTENTION,
    HUB,
    MSDA,
    RAGGED,
    attention,
    hub,
    msda,
    ragged,
)
from benchmarks.rendering.host_tables import COMPILE, HOST, HOST_BASE, compiled, host
from benchmarks.rendering.quant_tables import (
    FAKE_QUANT,
    FINALIZED,
    FP8,
    UNPACK,
    fake_quant,
    finalized,
    fp8_layers,
    fp8_mlp,
    unpack,
)
from benchmarks.rendering.results import ROOT
from benchmarks.rendering.status import status

DOC = ROOT / "docs" / "performance.md"
MARKER = re.compile(r"(<!-- table: (?P<name>[a-z0-9_]+) -->\n)(?P<body>.*?)(<!-- end table -->)",
                    re.S)
REGENERATE = "python -m benchmarks.rendering"


TABLES: dict[str, Callable[[], list[str]]] = {
    "fake_quant": fake_quant, "unpack": unpack, "host": host, "msda": msda, "ragged": ragged,
    "hub": hub, "attention": attention, "fp8_layers": fp8_layers, "fp8_mlp": fp8_mlp,
    "finalized": finalized, "compiled": compiled, "status": status,
}


#: Every results file a table reads (the index's test holds them to the folder).
CITED = sorted({FAKE_QUANT, UNPACK, HOST, HOST_BASE, *MSDA, RAGGED, HUB, ATTENTION, FP8, FINALIZED,
                COMPILE})


def render(text: str) -> str:
    """``text`` with every marked table re-rendered; an unknown table name raises KeyError."""
    return MARKER.sub(lambda m: m.group(1) + "\n".join(TABLES[m.group("name")]()) + "\n"
                      + m.group(4), text)


def names(text: str) -> list[str]:
    return [m.group("name") for m in MARKER.finditer(text)]


#: The pages holding generated tables.
PAGES = (DOC, ROOT / "README.md")


def stale() -> list[Path]:
    """The pages whose tables differ from what their results files render."""
    return [page for page in PAGES if render(page.read_text()) != page.read_text()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Re-render the tables of docs/performance.md and the README from their files.")
    parser.add_argument("--check", action="store_true", help="exit 1 if a page differs")
    args = parser.parse_args(argv)
    if args.check:
        pages = stale()
        for page in pages:
            print(f"{page.relative_to(ROOT)}: its tables differ from their results files; run "
                  f"`{REGENERATE}`", file=sys.stderr)
        return 1 if pages else 0
    for page in PAGES:
        page.write_text(render(page.read_text()))
    return 0

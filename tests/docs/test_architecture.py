"""docs/architecture.md's table "Where each slot lives" covers the tree: every declared slot falls
in exactly one row, and each row names the in-tree providers, the profile family and the negative
controls of its slots, a shape set of one of them, a benchmark and a docs page. (That every path
it names exists is ``test_links.py``'s check, which reads every page.)"""

from __future__ import annotations

import fnmatch
import re

import pytest
from doc_paths import ROOT

from conformance.catalogue import CATALOGUE
from libreyolo.kernels.providers import IN_TREE_PROVIDERS
from libreyolo.kernels.slots import slot_names

PAGE = ROOT / "docs" / "architecture.md"
SECTION = "## Where each slot lives"


def table_rows(text: str) -> list[tuple[list[str], str]]:
    """Each row of the section's table as (its slot patterns, the whole row's text)."""
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][2:]  # no header
    return [(re.findall(r"`([a-z0-9_*]+)`", row.split(" | ")[0]), row) for row in rows]


ROWS = table_rows(PAGE.read_text())


def row_of(slot: str, rows=ROWS) -> list[str]:
    """The rows whose slot patterns match ``slot``."""
    return [row for patterns, row in rows if any(fnmatch.fnmatchcase(slot, p) for p in patterns)]


def test_the_table_has_one_row_per_family():
    assert len(ROWS) == len({spec.family for spec in CATALOGUE.values()})


@pytest.mark.parametrize("slot", slot_names())
def test_every_declared_slot_is_in_exactly_one_row(slot):
    assert len(row_of(slot)) == 1, f"{slot} is in {len(row_of(slot))} rows of {PAGE.name}"


@pytest.mark.parametrize("slot", slot_names())
def test_a_slots_row_names_its_profile_negative_controls_and_a_shape_set(slot):
    (row,) = row_of(slot)
    family = CATALOGUE[slot].family
    assert f"`conformance/catalogue/{family}.py`" in row
    assert f"`conformance/negative/{family}.py`" in row
    shapes = re.findall(r"`conformance/shapes/(\w+)\.toml`", row)
    assert any(row_of(name) == [row] for name in shapes), f"{slot}'s row names no shape set"
    assert "`benchmarks/" in row and "`docs/" in row


@pytest.mark.parametrize("module", IN_TREE_PROVIDERS)
def test_every_in_tree_provider_is_named_with_its_folder(module):
    folder, _, name = module.replace(".", "/").rpartition("/")
    assert any(f"`{folder}/" in row and f"`{name}.py`" in row for _, row in ROWS), \
        f"no row of {PAGE.name} names {folder}/{name}.py"


def test_a_row_is_found_by_its_slot_patterns_alone():
    """The parser's own check: a pattern in the first column matches, prose elsewhere does not."""
    row = "| Unpack (`unpack_*`) | `fake_quant_fp8` |"
    rows = table_rows(f"{SECTION}\n\n| a | b |\n| --- | --- |\n{row}\n")
    assert row_of("unpack_mxfp4", rows) == [row]
    assert row_of("fake_quant_fp8", rows) == []

"""docs/performance.md's tables (and the README's status table) are what their results files
render: a number on the page that no committed run gives fails here."""

from __future__ import annotations

import re

import pytest
from doc_paths import ROOT

from benchmarks.rendering import pages, results


@pytest.mark.parametrize("page", pages.PAGES, ids=lambda p: p.name)
def test_the_tables_are_what_their_results_files_render(page):
    text = page.read_text()
    assert pages.render(text) == text, (
        f"{page.relative_to(ROOT)}'s tables differ from their results files: run "
        f"`{pages.REGENERATE}` and commit the page (or the results file and its "
        f"benchmarks/results/README.md row)")


def test_every_table_is_on_a_page_once():
    on_pages = [n for page in pages.PAGES for n in pages.names(page.read_text())]
    assert sorted(on_pages) == sorted(pages.TABLES)


def test_every_file_a_table_reads_has_an_index_row():
    assert not set(pages.CITED) - set(results.index())


def test_the_page_is_short():
    """Today's numbers, not their history (benchmarks/HISTORY.md holds that): about 400 lines
    for the areas of wave 2, and torch.compile's and the whole detectors' tables since (the
    detectors' full table is in docs/detectors.md)."""
    assert len(pages.DOC.read_text().splitlines()) <= 480


def test_an_edited_number_is_caught():
    """Negative control: one digit changed in a table, and the check fails."""
    text = pages.DOC.read_text()
    body = pages.MARKER.search(text).group("body")
    edited_body = re.sub(r"\d", lambda m: str((int(m.group()) + 1) % 10), body, count=1)
    edited = text.replace(body, edited_body, 1)
    assert edited != text and pages.render(edited) != edited


def test_an_unknown_table_name_is_an_error():
    with pytest.raises(KeyError):
        pages.render("<!-- table: no_such_table -->\n<!-- end table -->")


@pytest.mark.parametrize(("yardstick", "verdict"), [(None, "**missed**"), ("declined", "met")])
def test_an_engaged_fp8_layer_is_held_to_what_it_replaces(monkeypatch, yardstick, verdict):
    """An FP8 layer engaged at 0.90x bf16 but 1.30x its declined path (its input's fake
    quantization, then bf16): in a run held to the declined path that meets "never slower than
    what it replaces"; in an earlier run, held to bf16, it is a miss."""
    from benchmarks.rendering import quant_tables

    run = results.load(quant_tables.FP8)
    layer = {**run["layers"][0], "engage": True, "speedup_fused": 0.90, "speedup_declined": 1.30}
    run = {**run, "layers": [layer]} | ({"yardstick": yardstick} if yardstick else {})
    monkeypatch.setattr(quant_tables, "load", lambda name: run)
    row = next(line for line in quant_tables.fp8_layers() if line.startswith(f"| {layer['layer']}"))
    assert row.endswith(f"| {verdict} |")

"""benchmarks/results/ keeps the runs the docs cite, each with its row in the folder's index
(README.md: file, benchmark, commit, date, what it shows, kept because); superseded runs leave
the tree (git keeps them)."""

from __future__ import annotations

import re

from doc_paths import PAGES, RESULT_NAME, ROOT, prose

from benchmarks.rendering import quant_tables, results

RESULTS = ROOT / "benchmarks" / "results"
COLUMNS = ["file", "benchmark", "commit", "date", "what it shows", "kept because"]
#: A repository path in a "kept because" cell.
_CITER = re.compile(r"`([A-Za-z0-9_./\-]+)`")


def files_in_folder() -> set[str]:
    return {str(p.relative_to(RESULTS)) for p in RESULTS.rglob("*")
            if p.is_file() and p.name != "README.md"}


def problems(folder: set[str], rows: dict[str, dict[str, str]]) -> list[str]:
    """What is wrong between the folder's files and the index's rows."""
    out = [f"{name}: in the folder, not in the index" for name in sorted(folder - set(rows))]
    out += [f"{name}: in the index, not in the folder" for name in sorted(set(rows) - folder)]
    for name, row in sorted(rows.items()):
        if list(row) != COLUMNS or not all(row.values()):
            out.append(f"{name}: its row needs every column of {COLUMNS}")
            continue
        citers = _CITER.findall(row["kept because"])
        if not citers:
            out.append(f"{name}: 'kept because' names no page or file that cites it")
        for citer in citers:
            path = ROOT / citer
            if not path.is_file() or name not in path.read_text():
                out.append(f"{name}: 'kept because' names {citer}, which does not cite it")
        if not re.fullmatch(r"\d{4}-\d\d-\d\d", row["date"]):
            out.append(f"{name}: date {row['date']!r} is not YYYY-MM-DD")
    return out


def test_every_file_has_a_row_and_every_row_a_file_and_a_reason():
    assert not problems(files_in_folder(), results.index())


def test_every_results_file_a_page_names_is_kept():
    named = {n for page in PAGES for n in RESULT_NAME.findall(prose(page.read_text()))}
    assert not named - files_in_folder()


def test_a_stray_file_and_a_dead_row_are_caught():
    """Negative controls: a file the index lacks, a row whose file is gone, a row whose page
    does not cite it."""
    rows = results.index()
    folder = files_in_folder()
    assert problems(folder | {"stray_v0_h200_2026-01-01.json"}, rows) == [
        "stray_v0_h200_2026-01-01.json: in the folder, not in the index"]
    name = quant_tables.FAKE_QUANT
    assert problems(folder - {name}, rows) == [f"{name}: in the index, not in the folder"]
    uncited = {**rows, name: {**rows[name], "kept because": "`docs/kernels.md`"}}
    assert problems(folder, uncited) == [
        f"{name}: 'kept because' names docs/kernels.md, which does not cite it"]

"""Every relative link and every cited repository path in the README and docs/ resolves.

A link's file must exist and, for a markdown page with ``#anchor``, the anchor must be one of its
headings; a backticked path under benchmarks/, docs/, conformance/, libreyolo/, tests/ or
examples/ must name a file or folder of the tree, and a results file named anywhere in a page
must be in ``benchmarks/results/``. A path the page introduces as `` `path`, a new file`` (the
worked example of docs/conformance.md) is exempt.
"""

from __future__ import annotations

import re

import pytest
from doc_paths import PAGES, RESULT_NAME, ROOT, anchors, cited_paths, links, prose

IDS = [str(p.relative_to(ROOT)) for p in PAGES]


def broken_links(page) -> list[str]:
    bad = []
    for link in links(page.read_text()):
        if link.startswith(("http://", "https://", "mailto:")):
            continue
        name, _, anchor = link.partition("#")
        target = (page.parent / name).resolve() if name else page
        if not target.exists():
            bad.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            bad.append(f"{link}: no heading with that anchor")
    return bad


def missing_paths(page) -> list[str]:
    text = page.read_text()
    new = set(re.findall(r"`([^`\s]+)`, a new file", text))
    bad = [p for p in cited_paths(text) if not (ROOT / p).exists() and p not in new]
    bad += [f"results file {n}" for n in sorted(set(RESULT_NAME.findall(prose(text))))
            if not (ROOT / "benchmarks" / "results" / n).exists()]
    return bad


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_relative_link_resolves(page):
    assert not broken_links(page), broken_links(page)


@pytest.mark.parametrize("page", PAGES, ids=IDS)
def test_every_cited_path_exists(page):
    assert not missing_paths(page), missing_paths(page)


def test_the_checks_catch_a_broken_link_and_a_missing_path(tmp_path):
    """Negative control: a page with a dead link, a dead anchor, a missing path and a missing
    results file fails every check it should."""
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[a](nowhere.md) [b](#no-such-heading) [c](#title)\n"
                    "`benchmarks/no_such_script.py` `tests/no_such_test.py::test_x`\n"
                    "`gone_v1_h200_2026-01-01.json`\n```bash\n[not a link](nowhere.md)\n```\n"
                    "`benchmarks/made_here.py`, a new file\n")
    assert broken_links(page) == ["nowhere.md: no such file",
                                  "#no-such-heading: no heading with that anchor"]
    assert missing_paths(page) == ["benchmarks/no_such_script.py", "tests/no_such_test.py",
                                   "results file gone_v1_h200_2026-01-01.json"]

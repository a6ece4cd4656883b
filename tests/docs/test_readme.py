"""The README's first screen: what this is, the two commands (CI runs the second), a short
status table, the command list and the docs index."""

from __future__ import annotations

from doc_paths import ROOT

from benchmarks.rendering import pages

README = (ROOT / "README.md").read_text()


def _commands() -> list[str]:
    block = README.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_the_first_code_block_is_the_two_commands_and_ci_runs_the_second():
    commands = _commands()
    assert len(commands) == 2
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line and not line.startswith(("#", "set ", "cd "))]
    assert ci == [commands[1]]


def test_the_commands_come_before_anything_else_but_what_this_is():
    before = README.split("```bash", 1)[0]
    assert len(before.splitlines()) <= 10 and "## " not in before


def test_the_status_table_is_short_and_generated():
    (name,) = pages.names(README)
    assert name == "status"
    body = pages.MARKER.search(README).group("body")
    assert 3 <= len(body.splitlines()) <= 15


def test_the_docs_index_names_every_page():
    index = README.split("## Documentation", 1)[1]
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert [p for p in pages if f"(docs/{p})" not in index] == []

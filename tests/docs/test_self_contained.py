"""The repository stands alone: no file cites the design brief that lived beside it, or the
folder it lived in. The design is docs/architecture.md; a citation points to one of its sections
or to the docs page that holds the fact."""

from __future__ import annotations

import subprocess

import pytest
from doc_paths import ROOT

#: What a citation of the outside brief looks like (spelled apart, so this file cites nothing).
OUTSIDE = ("DESIGN" + ".md", "../" + "shared", "/work/" + "shared")


def citing_files(root, paths) -> list[str]:
    """The files among ``paths`` (relative to ``root``) whose text names anything in OUTSIDE."""
    found = []
    for path in paths:
        try:
            text = (root / path).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary files, and files listed but deleted in the work tree
        found += [f"{path}: {name}" for name in OUTSIDE if name in text]
    return found


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the git checkout to list files")
def test_no_file_of_the_repository_cites_a_document_outside_it():
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    assert not citing_files(ROOT, filter(None, listed))


def test_a_citation_is_found(tmp_path):
    """The check's own control: a file naming the brief is reported, one that does not is not."""
    (tmp_path / "cites.py").write_text("# see " + OUTSIDE[0] + ", 'Facts'\n")
    (tmp_path / "clean.md").write_text("see docs/architecture.md\n")
    assert citing_files(tmp_path, ["cites.py", "clean.md"]) == [f"cites.py: {OUTSIDE[0]}"]

"""What the docs tests read: the pages, their links, the repository paths they cite."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The pages a user reads.
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
#: Top-level folders whose files a page may cite by path.
CITABLE = ("benchmarks", "docs", "conformance", "libreyolo", "tests", "examples")

_LINK = re.compile(r"(?<!!)\[[^\]\n]*\]\(([^)\s]+)\)")
_CODE = re.compile(r"`([^`\n]+)`")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_PATH = re.compile(rf"(?:{'|'.join(CITABLE)})/[A-Za-z0-9_.\-/]*")
#: A results file's name, cited bare or under results/.
RESULT_NAME = re.compile(r"[A-Za-z0-9_\-]+_h200_20\d\d-\d\d-\d\d[A-Za-z0-9_\-]*\.(?:json|md|txt)")


def prose(text: str) -> str:
    """``text`` without its fenced code blocks (shell commands, code)."""
    return _FENCE.sub("", text)


def links(text: str) -> list[str]:
    """Every markdown link target in ``text``, outside code blocks."""
    return _LINK.findall(prose(text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in prose(path.read_text()).splitlines()
            if line.startswith("#")}


def cited_paths(text: str) -> list[str]:
    """Repository paths in backticks (``benchmarks/x.py``, ``tests/y.py::test``), those that
    name one file or folder: not a placeholder (``...``, ``FILE``, ``NAME``), not a glob."""
    out = []
    for code in _CODE.findall(prose(text)):
        for token in code.split():
            token = token.split("::")[0].rstrip(".,;:)")
            match = _PATH.fullmatch(token)
            if match and "..." not in token and not re.search(r"[A-Z]{3,}|\*", token):
                out.append(token)
    return out

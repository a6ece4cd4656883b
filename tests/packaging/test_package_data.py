"""Every data file the package reads at run time ships in its wheel.

setuptools packages ``.py`` files only; a data file (a policy table, a tile table, a lock) is in the
wheel only when ``[tool.setuptools.package-data]`` in ``pyproject.toml`` names it, and a file left
out makes an installed ``libreyolo`` fail at import where a source checkout works.
"""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA_SUFFIXES = (".toml", ".json")


def package_data() -> dict[str, list[str]]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]["package-data"]


def shipped(path: Path, globs: dict[str, list[str]]) -> bool:
    """Whether a package-data entry of the file's own package matches its name."""
    package = ".".join(path.parent.relative_to(ROOT).parts)
    return any(fnmatch.fnmatch(path.name, g) for g in globs.get(package, []))


def test_every_data_file_under_libreyolo_is_package_data():
    globs = package_data()
    files = sorted(p for p in (ROOT / "libreyolo").rglob("*")
                   if p.suffix in DATA_SUFFIXES and "__pycache__" not in p.parts)
    assert files, "no data file found: the walk itself is wrong"
    missing = [str(p.relative_to(ROOT)) for p in files if not shipped(p, globs)]
    assert not missing, f"not in pyproject.toml's package-data, so not in the wheel: {missing}"


def test_shipped_tells_a_matching_glob_from_another_packages():
    globs = {"libreyolo.kernels": ["*.toml"]}
    assert shipped(ROOT / "libreyolo" / "kernels" / "a.toml", globs)
    assert not shipped(ROOT / "libreyolo" / "kernels" / "quant" / "a.toml", globs)
    assert not shipped(ROOT / "libreyolo" / "kernels" / "a.json", globs)

"""What a parity verdict depends on, as a digest, and where it was produced (git, GPU, versions).

The source digest covers the implementation's declared files and, transitively, every module of
this repository (`libreyolo`, `conformance`) they import, with the `__init__` module of every
package on the way (importing a module runs them); the slot's reference and catalogue module
with theirs (the input generators included); the cell runner and contracts; the catalogue
entry's contract and expectations; and the shape set. Change any of them and the record no
longer matches.

What cannot change behaviour does not count: a Python file is hashed through its syntax tree
with docstrings dropped (comments and formatting never reach the tree), written out by
`_canonical` so that Python 3.11, 3.12 and 3.13 give the same hash (records are made on the GPU
machine's Python and checked on CI's). Data files count by their bytes.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import platform
import subprocess
from pathlib import Path

from conformance.inputs import shapesets
from conformance.schema.spec import SlotSpec

ROOT = Path(__file__).resolve().parents[2]
IN_REPO_PACKAGES = ("libreyolo", "conformance")
# The suite's own machinery: what runs (plan, the test modules, the plugin) and how a verdict and
# its record are made. Any edit to these changes every record's digest.
ALWAYS = (
    "conformance/running/cells.py",
    "conformance/running/plan.py",
    "conformance/plugin.py",
    "conformance/running/outcomes.py",
    "conformance/evidence/recorder.py",
    "conformance/evidence/records.py",
    "conformance/inputs/shapesets.py",
    "conformance/catalogue/__init__.py",
    "conformance/test_matrix.py",
    "conformance/test_layouts.py",
)


def _module_file(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _module_name(path: Path) -> str:
    parts = list(path.resolve().relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[Path]:
    """In-repository files that `path` imports (absolute and relative imports)."""
    stat = path.stat()
    return _imports_of(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4096)
def _imports_of(path: Path, mtime_ns: int, size: int) -> frozenset[Path]:
    """`_imports`, once per version of a file (every implementation's closure shares most)."""
    package = _module_name(path) if path.name == "__init__.py" else \
        _module_name(path).rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        for name in names:
            if name.split(".")[0] in IN_REPO_PACKAGES and (file := _module_file(name)):
                found.add(file)
    return frozenset(found)


def _packages(path: Path) -> set[Path]:
    """The `__init__.py` of every in-repository package above `path`: importing it runs them."""
    found = set()
    for parent in path.parents:
        if parent == ROOT or ROOT not in parent.parents:
            break
        if (init := parent / "__init__.py").is_file():
            found.add(init)
    return found


def import_closure(files) -> list[Path]:
    """`files`, every in-repository module they import and the packages above each, transitively,
    sorted."""
    seen: set[Path] = set()
    todo = [Path(f).resolve() for f in files]
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        if path.suffix == ".py" and ROOT in path.parents:
            todo.extend((_imports(path) | _packages(path)) - seen)
    return sorted(seen)


def _body_without_docstring(body: list) -> list:
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str):
        return body[1:]
    return body


_DOCUMENTED = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
#: Fields that say nothing about behaviour (`kind`: the `u` prefix of a string literal) or that
#: newer Pythons add empty to every node of a kind (`type_params`, 3.12): skipped when empty.
_IGNORED_FIELDS = frozenset({"kind", "type_comment"})


def _canonical(node):
    """A syntax tree as nested lists of node names, fields and literal values: no positions, no
    docstrings, no empty or None fields, literals written with their type and repr."""
    if isinstance(node, ast.AST):
        fields = []
        for name, value in ast.iter_fields(node):
            if name == "body" and isinstance(node, _DOCUMENTED):
                value = _body_without_docstring(value)
            if value is None or value == [] or name in _IGNORED_FIELDS:
                continue
            fields.append([name, _canonical(value)])
        return [type(node).__name__, fields]
    if isinstance(node, list):
        return [_canonical(value) for value in node]
    return f"{type(node).__name__}:{node!r}"


def content_hash(name: str, data: bytes) -> str:
    """sha256 of what in file `name` can change behaviour: a Python source's canonical syntax
    tree (so comments, docstrings and formatting do not count), any other file's bytes."""
    if name.endswith(".py"):
        tree = ast.parse(data.decode(), name)
        data = json.dumps(_canonical(tree), separators=(",", ":")).encode()
    return hashlib.sha256(data).hexdigest()


@functools.lru_cache(maxsize=4096)
def _file_hash(path: Path, mtime_ns: int, size: int) -> str:
    """`content_hash` of a file on disk, once per version of it."""
    return content_hash(path.name, path.read_bytes())


def _origin(module_and_attr: str) -> Path:
    spec = importlib.util.find_spec(module_and_attr.partition(":")[0])
    return Path(spec.origin)


def digest_files(spec: SlotSpec, impl_sources) -> list[Path]:
    roots = [*impl_sources, *(ROOT / f for f in ALWAYS),
             _origin(f"conformance.catalogue.{spec.family}"),
             shapesets.SHAPES_DIR / spec.shapes]
    if spec.reference:
        roots.append(_origin(spec.reference))
    return import_closure(roots)


def catalogue_entry(spec: SlotSpec, impl: str) -> dict:
    return {"slot": spec.name, "signature": spec.signature, "reference": spec.reference,
            "contract": spec.contract.as_dict(), "expects": spec.expectation(impl).as_dict(),
            "dtypes": [str(d) for d in spec.dtypes], "layouts": list(spec.layouts)}


def combined_digest(files: dict, entry: dict) -> str:
    """The one digest of per-file hashes and a catalogue entry (what a record's is made of)."""
    return hashlib.sha256(json.dumps({"files": files, "entry": entry},
                                     sort_keys=True).encode()).hexdigest()


def source_digest(spec: SlotSpec, impl: str, impl_sources) -> dict:
    """{"digest": sha256, "files": {relative path: content hash}, "entry": catalogue entry} for
    one implementation of a slot."""
    files = {}
    for path in digest_files(spec, impl_sources):
        shown = str(path.relative_to(ROOT)) if ROOT in path.parents else str(path)
        stat = path.stat()
        files[shown] = _file_hash(path, stat.st_mtime_ns, stat.st_size)
    entry = catalogue_entry(spec, impl)
    return {"digest": combined_digest(files, entry), "files": files, "entry": entry}


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def in_history(commit: str) -> bool:
    """`commit` is a commit of this repository and an ancestor of (or equal to) HEAD."""
    if _git("cat-file", "-e", f"{commit}^{{commit}}") is None:
        return False
    return _git("merge-base", "--is-ancestor", commit, "HEAD") is not None


@functools.cache
def file_at(commit: str, path: str) -> bytes | None:
    """The bytes of `path` (relative to the repository root) at `commit`; None if absent."""
    try:
        done = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT,
                              capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(files) -> dict:
    """Commit and whether any digest-covered file differs from it (unknown counts as dirty)."""
    commit = _git("rev-parse", "HEAD")
    relative = [str(Path(f).relative_to(ROOT)) for f in files if ROOT in Path(f).parents]
    status = _git("status", "--porcelain", "--", *relative) if commit else None
    return {"commit": commit, "dirty": status is None or bool(status),
            "changed": status.splitlines() if status else []}


def machine() -> dict:
    import torch

    info = {"python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_uuid=str(getattr(props, "uuid", "")),
                    compute_capability=f"{props.major}.{props.minor}",
                    driver=_nvidia_smi("driver_version"))
    return info


def _nvidia_smi(field: str) -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout else None

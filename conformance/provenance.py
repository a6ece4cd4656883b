"""What a parity verdict depends on, as a digest, and where it was produced (git, GPU, versions).

The source digest covers the implementation's declared files and, transitively, every module of
this repository (`libreyolo`, `conformance`) they import; the slot's reference and catalogue
module with theirs (the input generators included); the cell runner and contracts; the
catalogue entry's contract and expectations; and the shape set. Change any of them and the
record no longer matches.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import platform
import subprocess
from pathlib import Path

from conformance import shapesets
from conformance.catalogue.spec import SlotSpec

ROOT = Path(__file__).resolve().parent.parent
IN_REPO_PACKAGES = ("libreyolo", "conformance")
# The suite's own machinery: what runs (plan, the test modules, the plugin) and how a verdict and
# its record are made. Any edit to these changes every record's digest.
ALWAYS = (
    "conformance/cells.py",
    "conformance/plan.py",
    "conformance/plugin.py",
    "conformance/outcomes.py",
    "conformance/recorder.py",
    "conformance/records.py",
    "conformance/shapesets.py",
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
    return found


def import_closure(files) -> list[Path]:
    """`files` and every in-repository module they import, transitively, sorted."""
    seen: set[Path] = set()
    todo = [Path(f).resolve() for f in files]
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        if path.suffix == ".py" and ROOT in path.parents:
            todo.extend(_imports(path) - seen)
    return sorted(seen)


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


def source_digest(spec: SlotSpec, impl: str, impl_sources) -> dict:
    """{"digest": sha256, "files": {relative path: sha256}} for one implementation of a slot."""
    files = {}
    for path in digest_files(spec, impl_sources):
        shown = str(path.relative_to(ROOT)) if ROOT in path.parents else str(path)
        files[shown] = hashlib.sha256(path.read_bytes()).hexdigest()
    h = hashlib.sha256(json.dumps({"files": files, "entry": catalogue_entry(spec, impl)},
                                  sort_keys=True).encode())
    return {"digest": h.hexdigest(), "files": files}


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


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

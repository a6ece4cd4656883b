"""The inputs of the tables: the results files, their index (benchmarks/results/README.md) and the
provenance line each table carries."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


RESULTS = ROOT / "benchmarks" / "results"


INDEX = RESULTS / "README.md"


def index() -> dict[str, dict[str, str]]:
    """The rows of benchmarks/results/README.md's index, by file name."""
    rows, header = {}, None
    for line in INDEX.read_text().splitlines():
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
            continue
        row = dict(zip(header, cells, strict=True))
        rows[row["file"].strip("`")] = row
    return rows


def load(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def toml_cases(path: Path) -> dict[str, dict]:
    return {c["name"]: c for c in tomllib.loads(path.read_text())["case"]}


def _environment(data: dict) -> dict:
    env = data.get("environment") or data.get("machine") or data.get("meta") or {}
    return {"gpu": env.get("gpu") or data.get("device"), "torch": env.get("torch")
            or data.get("torch"), "triton": env.get("triton")}


def source(files: list[str], stage: str) -> str:
    """The provenance line under a table: files with their commit and date, the hardware, and
    the gpu_run.sh stage that reproduces the run."""
    rows, parts, env = index(), [], None
    for name in files:
        row = rows[name]
        parts.append(f"[`{name}`](../benchmarks/results/{name}) (commit {row['commit']}, "
                     f"{row['date']})")
        if env is None and name.endswith(".json"):
            env = _environment(load(name))
    stack = ", ".join(f"{k} {v}" for k, v in env.items() if v and k != "gpu")
    return (f"Measured: {'; '.join(parts)}; {env['gpu']} ({stack}). Reproduce: "
            f"`OUT=/tmp/out bash benchmarks/gpu_run.sh {stage}`.")

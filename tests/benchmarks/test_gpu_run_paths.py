"""Every script `benchmarks/gpu_run.sh` runs or names is where it says (a moved script otherwise
fails a paid GPU call, not CI). A path under an earlier commit's tree (``${OLD:-.old}/...``) is
that tree's, not this one's."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GPU_RUN = ROOT / "benchmarks" / "gpu_run.sh"
#: A repository path to a Python file, not one inside another tree (".../benchmarks/...").
SCRIPT = re.compile(r"(?<![\w/.])benchmarks/[\w/]+\.py\b")


def missing(text: str) -> list[str]:
    return sorted({p for p in SCRIPT.findall(text) if not (ROOT / p).is_file()})


def test_every_script_gpu_run_names_exists():
    text = GPU_RUN.read_text()
    assert len(SCRIPT.findall(text)) > 20
    assert missing(text) == []


def test_a_stale_path_is_found():
    """Negative control: a script at its old place is reported, another tree's is not."""
    text = ('run bench-fq 240 python3 benchmarks/bench_fake_quant.py "$OUT/x.json"\n'
            '"${OLD:-.old}/benchmarks/bench_host.py"\n')
    assert missing(text) == ["benchmarks/bench_fake_quant.py"]

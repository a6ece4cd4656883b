"""Every benchmark script loads as `benchmarks/gpu_run.sh` runs it (`python benchmarks/FOLDER/X.py`:
the script's folder first on the path), so a module moved elsewhere in the tree breaks CI here, not
a GPU call. Loading runs each script's imports and definitions, not its `__main__` block."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The scripts of every folder (benchmarks/README.md: what each holds), and any left at the top.
SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("**/*.py") if p.name != "__init__.py")
_LOAD = textwrap.dedent("""
    import runpy, sys, traceback
    failed = []
    for path in sys.argv[1:]:
        saved = list(sys.path)  # a script puts the repo root first: one folder's path never
        sys.path.insert(0, path.rsplit("/", 1)[0])  # lingers for the next folder's scripts
        try:
            runpy.run_path(path, run_name="loaded_by_test")
        except BaseException:
            failed.append(path + ": " + traceback.format_exc(limit=-1).strip().splitlines()[-1])
        finally:
            sys.path[:] = saved
    print("\\n".join(failed))
    sys.exit(1 if failed else 0)
""")


def load(paths: list[Path]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _LOAD, *map(str, paths)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""})


def test_every_benchmark_script_loads():
    assert len(SCRIPTS) > 10
    done = load(SCRIPTS)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]


def test_a_script_importing_a_moved_module_fails_to_load(tmp_path):
    broken = tmp_path / "bench_broken.py"
    broken.write_text("from libreyolo.kernels.attention.evidence import prepared\n")
    done = load([broken])
    assert done.returncode == 1 and "No module named 'libreyolo.kernels.attention.evidence'" \
        in done.stdout, done.stdout + done.stderr

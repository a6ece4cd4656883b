"""Gather the hub stage's outputs into the evidence file committed under benchmarks/results/.

Usage: ``python benchmarks/hub/evidence.py OUT RESULT [--commit SHA]``: ``OUT`` holds what the
``hub`` stage of benchmarks/gpu_run.sh wrote (hub_build.json, hub_test_lock.toml,
hub_matrix.json, hub_matrix.md). The result names the kernel's source commit, the build flags,
the test lock and the tree that ran, and says what it is: the `--impl hub` conformance matrix of
a local build of the Hub kernel's source, not a parity record (the gate never reads it) and not
the upstream binary.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

WHAT = ("conformance matrix (`pytest conformance/ --gpu --impl hub`) of the ms_deform_attn hub "
        "implementation against a LOCAL BUILD of huggingface/kernels-community deformable-detr/, "
        "served offline under a test lock: evidence, not a parity record, and not the upstream "
        "binary that libreyolo/kernels/hub/hub_kernels.lock.toml pins")


def tree_commit() -> str | None:
    done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None if done.returncode == 0 else None


def gather(out: Path, commit: str | None) -> dict:
    matrix = json.loads((out / "hub_matrix.json").read_text())
    states: dict[str, int] = {}
    for cell in matrix["cells"]:
        states[cell["state"]] = states.get(cell["state"], 0) + 1
    return {"what": WHAT, "tree_commit": commit,
            "build": json.loads((out / "hub_build.json").read_text()),
            "test_lock": (out / "hub_test_lock.toml").read_text(),
            "counts": states, "summary": (out / "hub_matrix.md").read_text(),
            "matrix": matrix}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the hub stage's output folder")
    parser.add_argument("result", type=Path, help="the evidence JSON to write")
    parser.add_argument("--commit", help="the tree's commit (default: git rev-parse HEAD)")
    args = parser.parse_args(argv)
    evidence = gather(args.out, args.commit or tree_commit())
    args.result.write_text(json.dumps(evidence, indent=1))
    print(f"{args.result}: {evidence['counts']}")


if __name__ == "__main__":
    main()

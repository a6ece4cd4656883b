"""Gather ``gpu_run.sh sweep-unpack``'s runs (one ``bench_unpack.py`` process per kernel
configuration and bfloat16 rounding) into one JSON and say, per format and dtype, which
configuration came closest to the device copy.

    python benchmarks/sweeps/sweep_unpack_tiles.py OUT.json RUN.json [RUN.json ...]

A configuration counts for a row only where its bits equal the reference and the slot call took
one launch (the kernel ran); the pick is the highest share of the copy among runs with the
rounding the kernel ships (``unpack_plan.BF16_ROUNDING``; ``unpack_tiles.toml`` has no rounding
column, so a pick under the other would not be what runs). Prints the matrix (rows x
configurations, share of the copy; a column per tiling and rounding, "shipped tiles" where the
run kept ``unpack_tiles.toml``'s rows) and the picks as ``unpack_tiles.toml`` rows, to be copied
by hand: rows the sweep did not measure (int2, float16) are a person's decision, said in the file.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from libreyolo.kernels.quant.execute.unpack_plan import BF16_ROUNDING as SHIPPED_ROUNDING

#: Runs recorded before ``bench_unpack.py --bf16-rounding`` existed rounded in integer arithmetic.
OLD_ROUNDING = "integer"


def rounding(run: dict) -> str:
    return run.get("environment", {}).get("bf16_rounding", OLD_ROUNDING)


def config_label(run: dict, config: dict) -> str:
    """A matrix column: the run's tiling (its rows' configuration, or the shipped file's) and
    its bfloat16 rounding."""
    if run.get("environment", {}).get("kernel_config") == "unpack_tiles.toml":
        tiles = "shipped tiles"
    else:
        tiles = f"{config['tile_bytes'] // 1024} KB, {config['num_warps']} warps"
    return f"{tiles}, {rounding(run)} bf16"


def best(runs: dict) -> dict[tuple[str, str], dict]:
    """Per (format, dtype): the valid row with the highest share of the copy, among runs with
    the shipped bfloat16 rounding."""
    picks = {}
    for run in runs.values():
        if rounding(run) != SHIPPED_ROUNDING:
            continue
        for row in run["rows"]:
            if not row["bits_equal"] or row["launches_slot_call"] != 1:
                continue
            key = (row["format"], row["dtype"])
            if key not in picks or row["fraction_of_copy"] > picks[key]["fraction_of_copy"]:
                picks[key] = row
    return picks


def matrix(runs: dict) -> str:
    labels, cells = [], {}
    for run in runs.values():
        for row in run["rows"]:
            label = config_label(run, row["config"])
            if label not in labels:
                labels.append(label)
            mark = "" if row["bits_equal"] and row["launches_slot_call"] == 1 else " **invalid**"
            cells[row["format"], row["dtype"], label] = f"{row['fraction_of_copy']:.1%}{mark}"
    keys = list(dict.fromkeys((f, d) for f, d, _ in cells))
    lines = ["| format | out | " + " | ".join(labels) + " |",
             "|---|---|" + "---|" * len(labels)]
    for fmt, dtype in keys:
        lines.append(f"| {fmt} | {dtype} | "
                     + " | ".join(cells.get((fmt, dtype, label), "") for label in labels) + " |")
    return "\n".join(lines)


def toml_rows(picks: dict) -> str:
    names = {"int4 grouped g128": "int4", "int8 grouped g128": "int8"}
    out = []
    for (fmt, dtype), row in picks.items():
        config = row["config"]
        out.append(f"[{names.get(fmt, fmt)}.{dtype}]  # {row['fraction_of_copy']:.1%} of the copy\n"
                   f"tile_bytes = {config['tile_bytes']}\nnum_warps = {config['num_warps']}\n")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("runs", type=Path, nargs="+")
    options = parser.parse_args()
    runs = {path.stem: json.loads(path.read_text()) for path in options.runs}
    picks = best(runs)
    options.out.write_text(json.dumps({
        "what": "bench_unpack.py at 4096x4096, one process per kernel configuration and "
                "bfloat16 rounding (gpu_run.sh sweep-unpack); picks: per format and dtype, the "
                f"valid row with the highest share of the copy, {SHIPPED_ROUNDING} rounding",
        "runs": runs,
        "picks": {f"{fmt} {dtype}": row for (fmt, dtype), row in picks.items()},
    }, indent=1) + "\n")
    print(matrix(runs))
    print()
    print(f"picks among {SHIPPED_ROUNDING}-rounding runs:" if picks else
          f"no pick: no valid row of a {SHIPPED_ROUNDING}-rounding run")
    print(toml_rows(picks))


if __name__ == "__main__":
    main()

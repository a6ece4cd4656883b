"""``python -m benchmarks.rendering.fp8_policy --from RESULTS.json [--policy TOML]``: the
``fp8_policy.toml`` entry one card's measurement supports, and what adding it takes.

RESULTS.json is ``benchmarks/bench/measure_fp8_policy.py``'s (``gpu_run.sh fp8-policy``), or
``bench_fp8.py``'s: both carry the device as ``torch.cuda.get_device_name`` names it, which is
how the toml keys its ``[[device]]`` tables (``fp8_linear`` takes the regions of the one whose
name the device's contains), the GPU checks, and the layers, each with whether the fused path
engaged (took at most ``MARGIN`` of the yardstick's time: the declined path, a finalized layer's
input fake quantization then bf16 ``F.linear``, in runs that say ``"yardstick": "declined"``;
bf16 ``F.linear`` alone in the runs before them). ``device_table`` turns those layers into the
card's table; the benchmarks write it into their JSON and their policy file with it. Standard
library only, like the tables.

Prints the card's entry on stdout (its ``[[device]]`` table, each layer's fused / bf16 as
comments), and on stderr what to do with it against the current toml: nothing (the card is
listed with the same regions), add the entry (no table names the card), or replace the card's
entry (it is listed with other regions). ``--write`` does that to the toml itself (the
``fp8-policy`` stage of ``gpu_run.sh`` writes the device's copy, so that later stages of the same
call run the card as measured; the shipped entry keeps its provenance comments by hand). A card
whose checks failed gets no entry (exit status 1): the fused path must give its bits there first.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path

from benchmarks.rendering.results import ROOT

POLICY = ROOT / "libreyolo" / "kernels" / "quant" / "execute" / "fp8_policy.toml"
#: The bounds a region table may hold (``fp8_linear.BOUNDS``).
BOUNDS = tuple(f"{side}_{d}" for d in "mnk" for side in ("min", "max"))


def failed_checks(verify: dict) -> list[str]:
    """The GPU checks that failed: a code, scale or epilogue mismatch against the CPU reference,
    or a graph replay that differed from eager (the GELU fold's codes are compared with
    float32 GELU and may differ by one: not a failure, docs/fp8_execute.md)."""
    failed = []
    for case, checks in verify.items():
        for name, value in checks.items():
            if (name.endswith("_mismatches") and case.startswith("torch.") and value) or (
                    value is False):
                failed.append(f"{case}: {name} = {value}")
    return failed


def device_table(device: str, layers: list[dict], notes=()) -> str:
    """The ``[[device]]`` table of ``fp8_policy.toml`` for ``device``, ``notes`` as its comment
    lines: a region for each engaging layer's (N, K), every M at least as large (the GEMM only
    gets more compute-bound with M, and the prologue's share stays); no region where none
    engaged (the card was measured and never engages)."""
    lines = ["[[device]]", *(f"# {note}" for note in notes), f"name = {json.dumps(device)}"]
    for row in layers:
        if row["engage"]:
            than = "the declined path" if "declined_ms" in row else "bf16 F.linear"
            lines += ["", "[[device.region]]", f"# {row['layer']}: {row['m']} x {row['k']} -> "
                      f"{row['n']}, fused faster than {than}", f"min_m = {row['m']}",
                      f"min_n = {row['n']}", f"max_n = {row['n']}", f"min_k = {row['k']}",
                      f"max_k = {row['k']}"]
    return "\n".join(lines) + "\n"


def regions(device: dict) -> set[tuple]:
    """A device table's regions, comparable: each its bounds, comments and order aside."""
    return {tuple(region.get(b) for b in BOUNDS) for region in device.get("region", ())}


def speedup_key(run: dict) -> str:
    """The key of a layer row's fused speedup over the path an engaged layer replaces:
    ``speedup_declined`` in runs held to the declined path (``"yardstick": "declined"``),
    ``speedup_fused`` (over bf16 ``F.linear``) in the runs before them."""
    return "speedup_declined" if run.get("yardstick") == "declined" else "speedup_fused"


def entries(result: dict) -> str:
    """The toml entry for this card: its ``device_table``, its comments naming the measurement
    with every layer's fused time over its yardstick's (the declined path's, or bf16's in runs
    made before the declined path was measured)."""
    speedup = speedup_key(result)
    yardstick, key = (("the declined path", "declined") if speedup == "speedup_declined"
                      else ("bf16", "bf16"))
    margin = (f" (engages where fused takes at most {result['margin']} of {yardstick}'s time)"
              if "margin" in result else "")
    notes = [f"torch {result.get('torch', '?')}, fused / {yardstick} per layer{margin}:"]
    notes += [f"  {r['layer']} {r['m']}x{r['k']}->{r['n']}: {r['fused_ms']:.4f} / "
              f"{r[f'{key}_ms']:.4f} ms ({r[speedup]:.2f}x){' engage' * r['engage']}"
              for r in result["layers"]]
    return device_table(result["device"], result["layers"], notes)


def listed(result: dict, current: dict) -> list[dict]:
    """The toml's tables that name this card (``fp8_linear`` takes the first)."""
    return [table for table in current.get("device", ()) if table["name"] in result["device"]]


def verdict(result: dict, current: dict) -> str:
    """What the current toml needs for this card's measurement: its entry is the table whose
    name the card's contains, as ``fp8_linear`` finds it."""
    device = result["device"]
    measured = regions(tomllib.loads(device_table(device, result["layers"]))["device"][0])
    tables = listed(result, current)
    if not tables:
        return f"{device} is not listed: add this device entry"
    name, theirs = tables[0]["name"], regions(tables[0])
    if theirs == measured:
        return f"{device} is listed (as {name!r}) with the same regions: no change"
    return (f"{device} is listed (as {name!r}) with other regions ({len(measured)} measured "
            f"against {len(theirs)} listed): replace its entry with these")


def written(text: str, name: str | None, entry: str) -> str:
    """The toml ``text`` with the ``[[device]]`` table named ``name`` replaced by ``entry`` (its
    lines from its ``[[device]]`` header to the next one's), or ``entry`` appended where ``name``
    is None."""
    blocks, block = [], []
    for line in text.splitlines(keepends=True):
        if line.strip() == "[[device]]" and block:
            blocks.append(block)
            block = []
        block.append(line)
    blocks.append(block)
    if name is None:
        return text.rstrip("\n") + "\n\n" + entry
    header = f"name = {json.dumps(name)}\n"
    found = [i for i, lines in enumerate(blocks) if lines[0].strip() == "[[device]]"
             and header in lines]
    if len(found) != 1:
        raise ValueError(f"--write: no single [[device]] table holds the line {header.strip()!r} "
                         "as this renderer writes it; edit the toml by hand")
    [index] = found
    tail = "\n" if index < len(blocks) - 1 else ""
    blocks[index] = [entry + tail]
    return "".join("".join(lines) for lines in blocks)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="results", required=True, type=Path,
                        help="measure_fp8_policy.py's (or bench_fp8.py's) results JSON")
    parser.add_argument("--policy", type=Path, default=POLICY,
                        help="the toml to compare with (default: the shipped one)")
    parser.add_argument("--write", action="store_true",
                        help="add or replace the card's entry in that toml")
    args = parser.parse_args(argv)
    result = json.loads(args.results.read_text())
    if "skipped" in result:
        print(f"{args.results}: nothing was measured ({result['skipped']})", file=sys.stderr)
        return 1
    if failed := failed_checks(result["verify"]):
        print(f"{result['device']}: the GPU checks failed, no entries: " + "; ".join(failed),
              file=sys.stderr)
        return 1
    entry = entries(result)
    print(entry, end="")
    text = args.policy.read_text()
    current = tomllib.loads(text)
    print(verdict(result, current), file=sys.stderr)
    if args.write:
        tables = listed(result, current)
        args.policy.write_text(written(text, tables[0]["name"] if tables else None, entry))
        print(f"written into {args.policy}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

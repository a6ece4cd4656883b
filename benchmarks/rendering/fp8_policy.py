"""``python -m benchmarks.rendering.fp8_policy --from RESULTS.json [--policy TOML]``: the
``fp8_policy.toml`` entries one card's measurement supports, and what adding them takes.

RESULTS.json is ``benchmarks/bench/measure_fp8_policy.py``'s (``gpu_run.sh fp8-policy``), or
``bench_fp8.py``'s: both carry the device as ``torch.cuda.get_device_name`` names it, which is
how the toml keys its ``devices`` (``fp8_linear`` engages on a device whose name contains one),
the GPU checks, the layers, and the policy table they support. Standard library only, like the
tables.

Prints the card's entries on stdout (the measured table, each layer's fused / bf16 as comments),
and on stderr what to do with them against the current toml: nothing (the card is listed and its
regions are the toml's), list the card (same regions), or a note that the regions differ, which
one ``devices`` list over one ``region`` list cannot hold. A card whose checks failed gets no
entries (exit status 1): the fused path must give its bits there first.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from pathlib import Path

from benchmarks.rendering.results import ROOT

POLICY = ROOT / "libreyolo" / "kernels" / "quant" / "execute" / "fp8_policy.toml"
#: The region bounds a region table may hold (``fp8_linear.engages``).
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


def regions(policy: dict) -> set[tuple]:
    """A policy's regions, comparable: each its bounds, comments and order aside."""
    return {tuple(region.get(b) for b in BOUNDS) for region in policy.get("region", ())}


def entries(result: dict) -> str:
    """The toml text for this card: ``result["policy"]`` (bench_fp8's ``policy_toml``) under a
    line naming the measurement, with every layer's fused / bf16 time."""
    margin = f" (engages at <= {result['margin']})" if "margin" in result else ""
    lines = [f"# {result['device']}: torch {result.get('torch', '?')}, fused / bf16 per "
             f"layer{margin}:"]
    lines += [f"#   {r['layer']} {r['m']}x{r['k']}->{r['n']}: {r['fused_ms']:.4f} / "
              f"{r['bf16_ms']:.4f} ms ({r['speedup_fused']:.2f}x){' engage' * r['engage']}"
              for r in result["layers"]]
    return "\n".join(lines) + "\n" + result["policy"]


def verdict(result: dict, current: dict) -> str:
    """What the current toml needs for this card's measurement."""
    device = result["device"]
    measured = tomllib.loads(result["policy"])
    listed = [d for d in current.get("devices", ()) if d in device]
    same = regions(measured) == regions(current)
    if listed and same:
        return f"{device} is listed (as {listed[0]!r}) and measured the toml's regions: no change"
    if same:
        devices = json.dumps([*current.get("devices", ()), device])
        return f"{device} measured the toml's regions: list it, devices = {devices}"
    return (f"{device} measured other regions than the toml's ({len(regions(measured))} against "
            f"{len(regions(current))}): the toml's one region list serves every device in "
            "'devices', so listing this card would give it the others' regions (and its own "
            "to them); the policy needs regions per device first")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="results", required=True, type=Path,
                        help="measure_fp8_policy.py's (or bench_fp8.py's) results JSON")
    parser.add_argument("--policy", type=Path, default=POLICY,
                        help="the toml to compare with (default: the shipped one)")
    args = parser.parse_args(argv)
    result = json.loads(args.results.read_text())
    if "skipped" in result:
        print(f"{args.results}: nothing was measured ({result['skipped']})", file=sys.stderr)
        return 1
    if failed := failed_checks(result["verify"]):
        print(f"{result['device']}: the GPU checks failed, no entries: " + "; ".join(failed),
              file=sys.stderr)
        return 1
    print(entries(result), end="")
    with args.policy.open("rb") as file:
        print(verdict(result, tomllib.load(file)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

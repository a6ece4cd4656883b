"""Markdown for people: `python -m conformance.reporting.render MATRIX.json` renders a saved matrix;
`--catalogue` prints the slot table docs/conformance.md carries, `--records` its table of the
committed parity records."""

from __future__ import annotations

import argparse
import sys

from conformance.running import matrix


def generated_block(text: str, marker: str) -> str:
    """What a doc page holds between ``<!-- marker -->`` and ``<!-- /marker -->``: the tables
    this module generates, which tests compare with what it generates now."""
    return text.split(f"<!-- {marker} -->\n")[1].split(f"<!-- /{marker} -->")[0]


def catalogue_table() -> str:
    from conformance.catalogue import CATALOGUE

    rows = ["| slot | signature | reference | contract | shape set | dtypes | layouts |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for spec in CATALOGUE.values():
        contract = spec.contract.kind + (" + ste" if spec.contract.ste else "")
        if spec.contract.kind == "bounded":
            contract += f" (k={spec.contract.k:g}, floor={spec.contract.floor:g} eps)"
        dtypes = ", ".join(str(d).removeprefix("torch.") for d in spec.dtypes)
        rows.append(f"| `{spec.name}` | `{spec.signature}` | {spec.reference or 'none'} | "
                    f"{contract} | `{spec.shapes}` | {dtypes} | {', '.join(spec.layouts)} |")
    return "\n".join(rows) + "\n"


def records_table() -> str:
    """One row per in-tree implementation and slot: what its committed record says, or that it
    awaits one (docs/conformance.md carries this table; a test keeps it current). Rows go in
    the slots' declared order, then by name: registration order depends on what the process
    imported first, and a committed table must not."""
    from conformance.evidence import records, scan
    from libreyolo.kernels import slot_names

    rows = ["| slot | impl | cells | passed per mode (cuda / cuda-graph) | worst | sources "
            "| commit | GPU | torch / triton | written |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    order = {slot: i for i, slot in enumerate(slot_names())}
    for target in sorted(scan.in_tree_targets(), key=lambda t: (order[t.slot], t.impl)):
        record = records.load(target.slot, target.impl)
        if record is None:
            rows.append(f"| `{target.slot}` | {target.impl} | **awaiting a record** "
                        "| | | | | | | |")
            continue
        modes = record["counts"]["mode"]
        passed = " / ".join(str(modes.get(f"{m}/pass", 0)) for m in ("cuda", "cuda-graph"))
        # what the record counted; whether it still holds for today's sources is the gate's call
        states = ", ".join(f"{n} {s}" for s, n in sorted(record["counts"]["state"].items()))
        worst = max(((v["value"], k.removesuffix("_error_over_bound"))
                     for k, v in record["worst"].items() if k.endswith("_error_over_bound")),
                    default=None)
        shown = (f"{worst[0]:.2f} of the bound ({worst[1]})" if worst
                 else "bits equal" if not record["worst"] else "see record")
        machine = record["machine"]
        rows.append(f"| `{target.slot}` | {target.impl} | {states} ({record['profile']}) "
                    f"| {passed} | {shown} | `{record['source_digest'][:12]}` "
                    f"| {str(record['git'].get('commit') or 'none')[:7]} "
                    f"| {machine.get('gpu')} (sm {machine.get('compute_capability')}) "
                    f"| {machine['torch']} / {machine['triton']} | {record['written'][:10]} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.reporting.render",
                                     description=__doc__)
    parser.add_argument("matrix", nargs="?", help="a JSON file written by `--matrix PATH`")
    parser.add_argument("--catalogue", action="store_true", help="print the slot table")
    parser.add_argument("--records", action="store_true",
                        help="print the table of committed parity records")
    args = parser.parse_args(argv)
    if args.catalogue + args.records + bool(args.matrix) != 1:
        parser.error("give one of MATRIX.json, --catalogue or --records")
    if args.catalogue:
        sys.stdout.write(catalogue_table())
    elif args.records:
        sys.stdout.write(records_table())
    else:
        cells, meta = matrix.read(args.matrix)
        sys.stdout.write(matrix.render_markdown(cells, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())

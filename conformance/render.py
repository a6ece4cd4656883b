"""Markdown for people: `python -m conformance.render MATRIX.json` renders a saved matrix;
`python -m conformance.render --catalogue` prints the slot table docs/conformance.md carries."""

from __future__ import annotations

import argparse
import sys

from conformance import matrix


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.render", description=__doc__)
    parser.add_argument("matrix", nargs="?", help="a JSON file written by `--matrix PATH`")
    parser.add_argument("--catalogue", action="store_true", help="print the slot table")
    args = parser.parse_args(argv)
    if args.catalogue == bool(args.matrix):
        parser.error("give either a MATRIX.json or --catalogue")
    if args.catalogue:
        sys.stdout.write(catalogue_table())
    else:
        cells, meta = matrix.read(args.matrix)
        sys.stdout.write(matrix.render_markdown(cells, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())

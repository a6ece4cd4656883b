"""Sweep the MSDA kernels' query block on the H200: which ``BLOCK_Q`` a small decoder wants,
and whether its backward wants one level a program.

    python benchmarks/sweeps/sweep_ms_deform_attn_blocks.py OUT.json [--iters 30] [--split]

The kernels cover ``BLOCK_Q`` queries x ``BLOCK_C`` channels per program
(``triton_common.blocks``: 512 elements, so 32 queries at 16 channels). A decoder call of 300
queries and 16 heads then runs 160 programs on 132 SMs, one wave with little in flight; smaller
blocks give more, shorter programs. For every medium and large case of the classic and ragged
shape sets and each candidate block (at most the shipped tile), this times CUDA-graph replays of
the forward and of forward+backward (``bench_ms_deform_attn.time_graph_ms``: GPU work only) and
checks the forward against the shipped block's output (same kernel, other tiling: equal up to
the order of float32 sums, which does not change with the query block, so bit-equal). It changes
nothing in the package: the choice it supports is made in ``triton_common.blocks`` and
recorded in ``benchmarks/NOTES.md``.

``--split`` adds, for every block, the classic backward with its levels split over programs
(``triton_provider.SPLIT_LEVELS_BELOW``) forced on and forced off (labels ``B/split`` and
``B/joined``; the plain ``B`` keeps the shipped rule).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("LIBREYOLO_KERNELS", "triton")

from benchmarks.bench.bench_ms_deform_attn import steps, time_graph_ms  # noqa: E402
from benchmarks.bench.bench_ms_deform_attn_ragged import steps as ragged_steps  # noqa: E402
from conformance.catalogue import CATALOGUE  # noqa: E402
from conformance.catalogue.ms_deform_attn_ragged import draw_inputs  # noqa: E402
from conformance.inputs import shapesets  # noqa: E402
from conformance.inputs.ms_deform_attn_cases import load_cases, make_inputs  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn import memo  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn import ragged_triton_provider as ragged  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn import triton_common as common  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn import triton_provider as classic  # noqa: E402

CANDIDATES = (4, 8, 16, 32, 64)


SHIPPED_SPLIT = classic.SPLIT_LEVELS_BELOW
SPLITS = {None: SHIPPED_SPLIT, "split": 2**62, "joined": 0}


def _with_block(block_q: int | None, split: str | None = None):
    """Make the kernels plan with this query block (None: the shipped rule) and levels split
    over the backward's programs or not (None: the shipped rule)."""
    shipped = _with_block.shipped
    common.blocks = shipped if block_q is None else (
        lambda channels: (min(block_q, shipped(channels)[0]), shipped(channels)[1]))
    classic.SPLIT_LEVELS_BELOW = SPLITS[split]
    memo._plans.clear()


_with_block.shipped = common.blocks


def _classic(case):
    inputs = make_inputs(case, device="cuda")
    return inputs, lambda *a: classic.ms_deform_attn_triton(*a), steps


def _ragged(case):
    inputs = draw_inputs({**case.params, "spatial_shapes": "pairs"}, torch.float32,
                         device="cuda")
    # raises if the kernels decline
    return inputs, ragged.ms_deform_attn_ragged_triton, ragged_steps


def configurations(blocks, split: bool) -> list[tuple[str, int | None, str | None]]:
    """(label, block, split) for every configuration a row times."""
    out = []
    for block_q in (None, *blocks):
        label = str(block_q or "shipped")
        out.append((label, block_q, None))
        if split:
            out += [(f"{label}/{mode}", block_q, mode) for mode in ("split", "joined")]
    return out


def sweep(name, make, iters, configs) -> dict:
    inputs, fn, make_steps = make()
    row = {"case": name}
    with torch.no_grad():
        _with_block(None)
        want = fn(*inputs)
    for label, block_q, split in configs:
        _with_block(block_q, split)
        with torch.no_grad():
            got = fn(*inputs)
        forward, forward_backward = make_steps(fn, *inputs)
        row[label] = {
            "bits_equal": bool(torch.equal(got, want)),
            "graph_forward_ms": statistics.median(time_graph_ms(forward, iters)),
            "graph_forward_backward_ms": statistics.median(time_graph_ms(forward_backward, iters)),
        }
    _with_block(None)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--sizes", default="medium,large",
                        help="which shape-set sizes to sweep (comma-separated)")
    parser.add_argument("--ragged", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--blocks", default=",".join(map(str, CANDIDATES)),
                        help="the candidate query blocks (each one compiles both kernels anew)")
    parser.add_argument("--split", action="store_true",
                        help="also each block with the backward's levels split and joined")
    args = parser.parse_args()
    sizes = tuple(args.sizes.split(","))
    blocks = tuple(int(b) for b in args.blocks.split(",") if b)
    configs = configurations(blocks, args.split)
    cases = [(c.name, lambda c=c: _classic(c)) for c in load_cases(sizes=sizes)]
    if args.ragged:
        cases += [(f"ragged/{c.name}", lambda c=c: _ragged(c))
                  for c in shapesets.load(CATALOGUE["ms_deform_attn_ragged"].shapes)
                  if c.size in sizes]
    labels = [label for label, _, _ in configs]
    print("| case | " + " | ".join(f"BLOCK_Q {b} fwd / fwd+bwd µs" for b in labels) + " |")
    print("|---|" + "---|" * len(labels), flush=True)
    rows = []
    for name, make in cases:  # each row printed and written as it ends (a stage may time out)
        row = sweep(name, make, args.iters, configs)
        rows.append(row)
        args.out.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows},
                                       indent=1))
        cells = [f"{row[b]['graph_forward_ms'] * 1e3:.1f} / "
                 f"{row[b]['graph_forward_backward_ms'] * 1e3:.1f}"
                 f"{'' if row[b]['bits_equal'] else ' (bits differ)'}" for b in labels]
        print(f"| {row['case']} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()

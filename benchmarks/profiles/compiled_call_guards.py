"""What a compiled slot call costs over its floor on the host, and how many guards Dynamo checks
on each call, on any machine (CPU included): issue 49's "compiled slot call within 1.2x of the
floor", taken apart without a GPU.

A stand-in implementation of ``fake_quant_fp8`` is registered as an in-tree traceable one (as
``tests/kernels/test_traced_kernels.py`` does); its body is one opaque custom op, so the compiled
slot call and the same op compiled bare (the floor) run the very same inductor code, and what
differs is what Dynamo checks before running it: the guards the slot's entry left (its Python
traced through ``ops``, ``dispatch`` and ``operators.call``). Printed, and written to OUT: each
side's guard count, the guards' names, and its host time a call in interleaved rounds (the median
of each round's mean).

    python benchmarks/profiles/compiled_call_guards.py OUT.json [--calls 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from libreyolo.kernels import ops, registry, traced  # noqa: E402
from libreyolo.kernels.providers import IN_TREE  # noqa: E402

SLOT = "fake_quant_fp8"


@torch.library.custom_op("libreyolo_guards::body", mutates_args=())
def body(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@body.register_fake
def _(x):
    return torch.empty_like(x)


def standin(x, *args, **kwargs):
    return body(x)


def compiled(fn, guards: list[str]):
    def keep_all(entries):
        guards.extend(entry.name for entry in entries)
        return [True] * len(entries)

    return torch.compile(fn, fullgraph=True, options={"guard_filter_fn": keep_all})


def per_call_us(fn, x: torch.Tensor, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        fn(x)
    return (time.perf_counter() - started) / calls * 1e6


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the JSON to write")
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)
    # no on-disk graph from an earlier process (gpu_run.sh and the tests turn them off too)
    torch._inductor.config.fx_graph_cache = False
    torch._functorch.config.enable_autograd_cache = False
    traced.validated = lambda: frozenset({f"{SLOT}/standin"})
    with registry.loading(IN_TREE):
        registry.register(SLOT, standin, name="standin", traceable=True)
    x = torch.randn(8, 32, device="cuda" if torch.cuda.is_available() else "cpu")
    guards = {"slot": [], "floor": []}
    calls = {"slot": compiled(lambda x: ops.fake_quant_fp8(x), guards["slot"]),
             "floor": compiled(lambda x: body(x), guards["floor"])}
    for fn in calls.values():
        fn(x)
    assert traced.decisions()[SLOT] == "traced: standin", traced.decisions()
    times = {name: [] for name in calls}
    for _ in range(args.rounds):
        for name, fn in calls.items():
            times[name].append(per_call_us(fn, x, args.calls))
    print(f"torch {torch.__version__}, {x.device}, {args.rounds} rounds of {args.calls} calls")
    median = {name: statistics.median(times[name]) for name in calls}
    for name in calls:
        print(f"{name:6s} {len(guards[name]):4d} guards  {median[name]:6.1f} µs a call "
              f"(rounds {min(times[name]):.1f}-{max(times[name]):.1f})")
    print(f"slot / floor: {median['slot'] / median['floor']:.2f}x")
    args.out.write_text(json.dumps({
        "torch": torch.__version__, "device": str(x.device), "calls": args.calls,
        "rounds": args.rounds, "ratio": median["slot"] / median["floor"],
        **{name: {"guards": guards[name], "us_per_call": times[name]} for name in calls}},
        indent=2))


if __name__ == "__main__":
    main()

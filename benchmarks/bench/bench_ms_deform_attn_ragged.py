"""Benchmark the ms_deform_attn_ragged Triton kernels against the portable path on a CUDA GPU.

Usage: ``python benchmarks/bench/bench_ms_deform_attn_ragged.py OUT.json [--dtype float32]
[--iters 50] [--cases NAME ...]``

For each family configuration of the shape set (medium and large cases: RT-DETRv2, its discrete
sampling, D-FINE, DEIM nano): run the suite's CUDA cell for the Triton implementation (bounded
contract, forward and gradients; the script stops on a failure) and spy that
``ms_deform_attn_ragged`` reaches the kernel; then time, with CUDA events and medians, forward
and forward+backward of the portable path and of ``ms_deform_attn_ragged`` (what families call:
slot dispatch, then the kernel), eager and as CUDA-graph replays (``null`` with the reason where
a capture fails), and the host time per eager call (``perf_counter`` around the call, no
synchronization) beside the classic ``ms_deform_attn`` kernel's on the same levels with every
level at the largest point count (``maybe_ms_deform_attn``): the two calls alternate, so drifts
of the host (another process, clock changes) fall on both alike, and each reports its median and
quartiles. Level sizes are passed as ``(H, W)`` pairs to both, as the families' decoders pass
them. ``LIBREYOLO_KERNELS`` is set
to ``triton`` (the implementation awaits its parity record). Writes the raw numbers as JSON and
prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ["LIBREYOLO_KERNELS"] = "triton"

from benchmarks.bench.bench_ms_deform_attn import time_graph_ms, time_ms  # noqa: E402
from benchmarks.bench.progress import each  # noqa: E402
from conformance.catalogue import CATALOGUE  # noqa: E402
from conformance.catalogue.ms_deform_attn_ragged import draw_inputs  # noqa: E402
from conformance.inputs import shapesets  # noqa: E402
from conformance.running.cells import CellPlan, input_seed, run_cell  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn import (  # noqa: E402
    maybe_ms_deform_attn,
    ms_deform_attn_ragged,
    ms_deform_attn_ragged_portable,
)
from libreyolo.kernels.attention.ms_deform_attn import (  # noqa: E402
    ragged_triton_provider as provider,
)

SLOT = "ms_deform_attn_ragged"
IMPLEMENTATIONS = {"portable": ms_deform_attn_ragged_portable, "triton": ms_deform_attn_ragged}
HOST_CALLS = 200


def steps(fn, value, shapes, locations, weights, points, method):
    """(forward, forward+backward) closures for one implementation on fixed inputs."""
    leaves = [t.detach().clone().requires_grad_() for t in (value, locations, weights)]
    grad = torch.randn(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3],
                       device=value.device, dtype=value.dtype)

    def forward():
        with torch.no_grad():
            return fn(value, shapes, locations, weights, points, method)

    def forward_backward():
        for leaf in leaves:
            leaf.grad = None
        fn(leaves[0], shapes, leaves[1], leaves[2], points, method).backward(grad)

    return forward, forward_backward


def host_us(*calls) -> list[dict]:
    """Host time of one eager call of each of ``calls``, alternating them, in microseconds:
    median and quartiles (the GPU runs behind; it is synchronized only around the loop)."""
    for call in calls:
        call()
    torch.cuda.synchronize()
    times = [[] for _ in calls]
    for _ in range(HOST_CALLS):
        for call, kept in zip(calls, times, strict=True):
            start = time.perf_counter()
            call()
            kept.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    summaries = []
    for kept in times:
        q1, median, q3 = statistics.quantiles([t * 1e6 for t in kept], n=4)
        summaries.append({"median": median, "q1": q1, "q3": q3})
    return summaries


def classic_call(value, shapes, locations, weights, points):
    """The classic slot on the same levels (pairs), every level at the largest point count."""
    n = max(points)
    batch, len_q, heads = locations.shape[:3]
    levels = [tuple(level) for level in shapes]
    loc = torch.rand(batch, len_q, heads, len(shapes), n, 2, device=value.device,
                     dtype=value.dtype)
    w = torch.rand(batch, len_q, heads, len(shapes), n, device=value.device, dtype=value.dtype)

    def call():
        with torch.no_grad():
            if maybe_ms_deform_attn(value, levels, loc, w) is None:
                raise SystemExit("the classic ms_deform_attn kernel did not take its input")

    return call


def verify(case, dtype) -> dict:
    """The suite's CUDA cell (bounded contract, forward and gradients) and a spied call."""
    seed = input_seed(0, SLOT, case.name, dtype, "contiguous")
    cell = run_cell(CATALOGUE[SLOT], CellPlan(SLOT, "triton", "cuda", dtype, case, "contiguous",
                                              seed))
    if cell.state != "pass":
        raise SystemExit(f"{case.name}: {cell.state}: {cell.reason}")
    runs = []
    original = provider._forward
    provider._forward = lambda *a: runs.append(1) or original(*a)
    try:
        ms_deform_attn_ragged(*draw_inputs(case.params, dtype, device="cuda"))
    finally:
        provider._forward = original
    if runs != [1]:
        raise SystemExit(f"{case.name}: ms_deform_attn_ragged did not reach the kernel")
    return {"cell": cell.measurements}


def graph_ms(step, iters):
    try:
        return time_graph_ms(step, iters)
    except Exception as exc:  # noqa: BLE001 - a path that cannot be captured is a result
        torch.cuda.synchronize()
        return f"{type(exc).__name__}: {str(exc)[:200]}"


def bench_case(case, dtype, iters) -> dict:
    inputs = draw_inputs({**case.params, "spatial_shapes": "pairs"}, dtype, device="cuda")
    result = {"case": case.name, "source": case.source, "method": case.params["method"],
              "dtype": str(dtype).removeprefix("torch."), "check": verify(case, dtype)}
    for name, fn in IMPLEMENTATIONS.items():
        forward, forward_backward = steps(fn, *inputs)
        result[name] = {"forward_ms": time_ms(forward, iters),
                        "forward_backward_ms": time_ms(forward_backward, iters),
                        "graph_forward_ms": graph_ms(forward, iters),
                        "graph_forward_backward_ms": graph_ms(forward_backward, iters)}
        if name == "triton":
            ragged, classic = host_us(forward, classic_call(*inputs[:5]))
            result[name]["host_us"], result["classic_host_us"] = ragged, classic
    return result


def _median(times) -> float | None:
    return statistics.median(times) if isinstance(times, list) else None


def _ratio(a, b) -> str:
    return f"{a / b:.1f}x" if a is not None and b else "n/a"


def _host(summary: dict) -> str:
    return f"{summary['median']:.0f} ({summary['q1']:.0f}-{summary['q3']:.0f})"


def table(results: list[dict]) -> str:
    rows = ["| case | dtype | fwd ms portable / triton | fwd speedup | fwd+bwd ms portable / "
            "triton | fwd+bwd speedup | graph fwd speedup | graph fwd+bwd speedup | host µs "
            "ragged / classic, median (quartiles) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        p, t = r["portable"], r["triton"]
        pf, tf = _median(p["forward_ms"]), _median(t["forward_ms"])
        pb, tb = _median(p["forward_backward_ms"]), _median(t["forward_backward_ms"])
        gpf, gtf = _median(p["graph_forward_ms"]), _median(t["graph_forward_ms"])
        gpb, gtb = _median(p["graph_forward_backward_ms"]), _median(t["graph_forward_backward_ms"])
        rows.append(f"| {r['case']} | {r['dtype']} | {pf:.3f} / {tf:.3f} | {_ratio(pf, tf)} "
                    f"| {pb:.3f} / {tb:.3f} | {_ratio(pb, tb)} | {_ratio(gpf, gtf)} "
                    f"| {_ratio(gpb, gtb)} | {_host(t['host_us'])} / "
                    f"{_host(r['classic_host_us'])} |")
    return "\n".join(rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where to write the raw JSON")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--cases", nargs="*", help="case names (default: medium and large)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU")
    dtype = getattr(torch, args.dtype)
    cases = shapesets.load(CATALOGUE[SLOT].shapes)
    cases = [c for c in cases if c.name in args.cases] if args.cases else \
        [c for c in cases if c.size in ("medium", "large")]
    results = [bench_case(case, dtype, args.iters) for case in each(cases, lambda c: c.name)]
    environment = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "cuda": torch.version.cuda, "triton": __import__("triton").__version__,
                   "python": platform.python_version()}
    args.out.write_text(json.dumps({"environment": environment, "results": results}, indent=1))
    print(table(results))


if __name__ == "__main__":
    main()

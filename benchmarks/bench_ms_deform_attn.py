"""Benchmark the ms_deform_attn Triton kernels against the portable core on a CUDA GPU.

Usage: ``python benchmarks/bench_ms_deform_attn.py OUT.json [--dtype float32] [--iters 50]``

For each real configuration of the shape set (medium and large cases): check the Triton
implementation against the float64 portable core on fresh random inputs (bounded contract,
forward and gradients, plus the backward's run-to-run spread over 20 runs), then time forward and
forward+backward of both with CUDA events and report medians; the Triton steps are also timed as
CUDA-graph replays, which leave only the GPU's work (the small configurations' eager times are
mostly host time, docs/performance.md; the portable core reads ``spatial_shapes`` on the host,
so it cannot be captured). Writes the raw numbers as JSON and prints a markdown table. Takes
about a minute on an H200, most of it Triton compilation.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conformance.ms_deform_attn.cases import load_cases, make_inputs  # noqa: E402
from conformance.ms_deform_attn.parity import bounded_check  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn.portable import (  # noqa: E402
    ms_deform_attn_portable,
)
from libreyolo.kernels.attention.ms_deform_attn.triton_provider import (  # noqa: E402
    ms_deform_attn_triton,
)

IMPLEMENTATIONS = {"portable": ms_deform_attn_portable, "triton": ms_deform_attn_triton}
SPREAD_RUNS = 20


def time_ms(step, iters: int, warmup: int = 5) -> list[float]:
    """Per-iteration times of ``step()`` in milliseconds, measured with CUDA events."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def time_graph_ms(step, iters: int, warmup: int = 3) -> list[float]:
    """Per-replay times of ``step`` captured in a CUDA graph (warmed up on a side stream first,
    as capture requires), in milliseconds."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return time_ms(graph.replay, iters)


def steps(fn, value, shapes, locations, weights):
    """(forward, forward+backward) closures for one implementation on fixed inputs."""
    leaves = [t.detach().clone().requires_grad_() for t in (value, locations, weights)]
    grad = torch.randn(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3],
                       device=value.device, dtype=value.dtype)

    def forward():
        with torch.no_grad():
            fn(value, shapes, locations, weights)

    def forward_backward():
        for leaf in leaves:
            leaf.grad = None
        fn(leaves[0], shapes, leaves[1], leaves[2]).backward(grad)

    return forward, forward_backward


def backward_spread(value, shapes, locations, weights) -> dict[str, float]:
    """Largest difference between runs of each gradient (atomic adds make them order-dependent)."""
    runs = []
    grad = torch.randn(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3],
                       device=value.device, dtype=value.dtype)
    for _ in range(SPREAD_RUNS):
        leaves = [t.detach().clone().requires_grad_() for t in (value, locations, weights)]
        ms_deform_attn_triton(leaves[0], shapes, leaves[1], leaves[2]).backward(grad)
        runs.append([leaf.grad for leaf in leaves])
    names = ("grad_value", "grad_sampling_locations", "grad_attention_weights")
    return {name: max((run[i] - runs[0][i]).abs().max().item() for run in runs)
            for i, name in enumerate(names)}


def verify(case, dtype) -> dict:
    """Bounded contract on fresh inputs, every one of 20 backward runs, and their spread."""
    inputs = make_inputs(case, dtype=dtype, device="cuda", seed=1234)
    verdicts = []
    for seed in range(SPREAD_RUNS):
        verdicts += bounded_check(ms_deform_attn_triton, *inputs, seed=seed)
    failed = [v for v in verdicts if not v.passed]
    if failed:
        raise SystemExit(f"{case.name}: Triton output outside the bounded contract: {failed[:4]}")
    worst = {}
    for v in verdicts:
        worst[v.quantity] = max(worst.get(v.quantity, 0.0), v.error / v.bound if v.bound else 0)
    return {"worst_error_over_bound": worst, "backward_spread": backward_spread(*inputs)}


def bench_case(case, dtype, iters) -> dict:
    inputs = make_inputs(case, dtype=dtype, device="cuda", seed=0)
    result = {"case": case.name, "source": case.source, "dtype": str(dtype).removeprefix("torch."),
              "check": verify(case, dtype)}
    for name, fn in IMPLEMENTATIONS.items():
        forward, forward_backward = steps(fn, *inputs)
        result[name] = {"forward_ms": time_ms(forward, iters),
                        "forward_backward_ms": time_ms(forward_backward, iters)}
    forward, forward_backward = steps(ms_deform_attn_triton, *inputs)
    result["triton"]["graph_forward_ms"] = time_graph_ms(forward, iters)
    result["triton"]["graph_forward_backward_ms"] = time_graph_ms(forward_backward, iters)
    return result


def median(times: list[float]) -> float:
    return statistics.median(times)


def table(results: list[dict]) -> str:
    rows = ["| case | dtype | portable fwd ms | triton fwd ms | fwd speedup | portable fwd+bwd ms "
            "| triton fwd+bwd ms | fwd+bwd speedup | triton graph fwd / fwd+bwd ms |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        p, t = r["portable"], r["triton"]
        pf, tf = median(p["forward_ms"]), median(t["forward_ms"])
        pb, tb = median(p["forward_backward_ms"]), median(t["forward_backward_ms"])
        gf, gb = median(t["graph_forward_ms"]), median(t["graph_forward_backward_ms"])
        rows.append(f"| {r['case']} | {r['dtype']} | {pf:.3f} | {tf:.3f} | {pf / tf:.1f}x "
                    f"| {pb:.3f} | {tb:.3f} | {pb / tb:.1f}x | {gf:.3f} / {gb:.3f} |")
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
    cases = load_cases(sizes=("medium", "large"))
    if args.cases:
        cases = [c for c in load_cases() if c.name in args.cases]
    results = [bench_case(case, dtype, args.iters) for case in cases]
    environment = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "cuda": torch.version.cuda, "triton": __import__("triton").__version__,
                   "python": platform.python_version()}
    args.out.write_text(json.dumps({"environment": environment, "results": results}, indent=1))
    print(table(results))


if __name__ == "__main__":
    main()

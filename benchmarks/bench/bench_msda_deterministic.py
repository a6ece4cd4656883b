"""The deterministic MSDA backward against the atomic one, on every row of the speed table.

Usage: ``python benchmarks/bench/bench_msda_deterministic.py OUT.json [--dtype float32] [--iters 60]
[--rounds 5] [--cases NAME ...] [--skip-check]``

Rows: the medium and large cases of both shape sets, the ones ``bench_ms_deform_attn.py`` and
``bench_ms_deform_attn_ragged.py`` time (Deformable-DETR encoder and decoder, RF-DETR, DINO,
RT-DETR, D-FINE-N; RT-DETRv2 bilinear and discrete, D-FINE, DEIM-N, D-FINE at its evaluation
batch), on the Triton implementations called directly (the classic ``ms_deform_attn`` kernels
and the ragged ones; level sizes as the case gives them, pairs for the ragged rows as in their
benchmark).

First each row is checked under ``torch.use_deterministic_algorithms(True)``: the suite's CUDA
cell (bounded contract against float64, output and gradients; the script stops on a failure),
``RUNS`` forward+backward runs equal bit for bit (stops otherwise), the worst-case fixed-point
term over the value gradient's limit, and (recorded, not judged) whether the atomic backward's
value gradient differed over the same runs. Then, with CUDA events and medians over
``--rounds`` rounds of ``--iters`` steps each (modes rotated each round, warm-up first):

* ``atomic``: the mode off, the float32 atomic backward;
* ``deterministic``: the mode on, torch's defaults (its ``fill_uninitialized_memory`` makes every
  ``torch.empty`` a NaN fill, the forward's and the backward's included);
* ``deterministic_no_fill``: the mode on with ``torch.utils.deterministic.
  fill_uninitialized_memory = False``, the fixed-point path's own cost.

each as forward+backward (eager, events around both), backward alone (events around
``backward()`` after a forward) and forward+backward replayed from a CUDA graph (captured in its
mode; the GPU's work alone). Prints the ratios deterministic / atomic and writes the raw numbers
as JSON. The item's target: within 1.5x of the atomic backward.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.bench.bench_ms_deform_attn import time_graph_ms, time_ms  # noqa: E402
from conformance.catalogue import CATALOGUE  # noqa: E402
from conformance.catalogue.ms_deform_attn_ragged import draw_inputs  # noqa: E402
from conformance.inputs import shapesets  # noqa: E402
from conformance.inputs.ms_deform_attn_cases import make_inputs as classic_inputs  # noqa: E402
from conformance.running.cells import CellPlan, _grad_generator, input_seed, run_cell  # noqa: E402
from conformance.running.cells import make_inputs as cell_inputs  # noqa: E402
from conformance.running.determinism import deterministic_algorithms, differing  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn import (  # noqa: E402
    deterministic,
    ragged_triton_provider,
    triton_provider,
)

SLOTS = ("ms_deform_attn", "ms_deform_attn_ragged")
MODES = ("atomic", "deterministic", "deterministic_no_fill")
RUNS = 10
TARGET = 1.5


@contextlib.contextmanager
def mode(name: str):
    """The backward's mode for a block: the flag, and torch's NaN fill of empty tensors."""
    from torch.utils import deterministic as torch_deterministic

    fill = torch_deterministic.fill_uninitialized_memory
    torch_deterministic.fill_uninitialized_memory = name != "deterministic_no_fill"
    try:
        with deterministic_algorithms(name != "atomic"):
            yield
    finally:
        torch_deterministic.fill_uninitialized_memory = fill


def rows(names) -> list[tuple[str, object]]:
    found = []
    for slot in SLOTS:
        for case in shapesets.load(CATALOGUE[slot].shapes):
            if (names and case.name in names) or (not names and case.size in ("medium", "large")):
                found.append((slot, case))
    return found


def row_inputs(slot, case, dtype):
    """(fn, args) of one row: the Triton implementation and seeded CUDA inputs."""
    if slot == "ms_deform_attn":
        from conformance.inputs.ms_deform_attn_cases import load_cases

        msda = next(c for c in load_cases() if c.name == case.name)
        return triton_provider.ms_deform_attn_triton, classic_inputs(msda, dtype=dtype,
                                                                     device="cuda", seed=0)
    return ragged_triton_provider.ms_deform_attn_ragged_triton, draw_inputs(
        {**case.params, "spatial_shapes": "pairs"}, dtype, device="cuda")


def check(slot, case, dtype) -> dict:
    """The row's checks in the mode (module docstring); SystemExit on a failure."""
    plan = CellPlan(slot, "triton", "cuda", dtype, case, "contiguous",
                    input_seed(0, slot, case.name, dtype, "contiguous"))
    with deterministic_algorithms():
        cell = run_cell(CATALOGUE[slot], plan)
    if cell.state != "pass":
        raise SystemExit(f"{slot} {case.name}: deterministic backward {cell.state}: "
                         f"{cell.reason}")
    inputs = cell_inputs(CATALOGUE[slot], plan)
    shape = (*inputs.args[2].shape[:2], inputs.args[0].shape[2] * inputs.args[0].shape[3])
    grad = torch.randn(shape, generator=_grad_generator(plan), dtype=torch.float64)
    term = deterministic.fixed_point_error_bound(grad.to(dtype).float(), inputs.args[3].float())
    fn, args = row_inputs(slot, case, dtype)
    with deterministic_algorithms():
        repeats = differing(fn, args, (0, 2, 3), runs=RUNS)
    if any(repeats.values()):
        raise SystemExit(f"{slot} {case.name}: deterministic runs differ: {repeats}")
    with deterministic_algorithms(False):
        atomic = differing(fn, args, (0, 2, 3), runs=RUNS)
    value = cell.measurements["grad_arg0"]
    return {"bounded": {k: {"error_over_limit": v["max_abs_err"] / v["bound"] if v["bound"]
                            else 0.0} for k, v in cell.measurements.items()
                        if isinstance(v, dict) and "bound" in v},
            "fixed_point_term": term, "value_gradient_limit": value["bound"],
            "fixed_point_term_over_limit": term / value["bound"] if value["bound"] else 0.0,
            "deterministic_runs_differing": repeats, "atomic_runs_differing": atomic}


def steps(fn, args):
    """(forward+backward, backward alone) closures on fixed inputs; the backward's closure
    returns its two events' time."""
    leaves = [args[i].detach().clone().requires_grad_() for i in (0, 2, 3)]
    call = list(args)
    call[0], call[2], call[3] = leaves
    value, locations = args[0], args[2]
    grad = torch.randn(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3],
                       device="cuda", dtype=value.dtype)

    def forward_backward():
        for leaf in leaves:
            leaf.grad = None
        fn(*call).backward(grad)

    def backward_ms():
        for leaf in leaves:
            leaf.grad = None
        out = fn(*call)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out.backward(grad)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    return forward_backward, backward_ms


def time_row(fn, args, iters: int, rounds: int) -> dict:
    times = {name: {"forward_backward_ms": [], "backward_ms": []} for name in MODES}
    closures = {name: steps(fn, args) for name in MODES}
    for round_ in range(rounds):
        for name in MODES[round_ % len(MODES):] + MODES[:round_ % len(MODES)]:
            forward_backward, backward_ms = closures[name]
            with mode(name):
                times[name]["forward_backward_ms"] += time_ms(forward_backward, iters)
                for _ in range(3):  # warm-up
                    backward_ms()
                times[name]["backward_ms"] += [backward_ms() for _ in range(iters)]
    for name in MODES:
        with mode(name):
            forward_backward, _ = steps(fn, args)
            try:
                times[name]["graph_forward_backward_ms"] = time_graph_ms(forward_backward, iters)
            except Exception as exc:  # noqa: BLE001 - a failed capture is a result
                torch.cuda.synchronize()
                times[name]["graph_forward_backward_ms"] = f"{type(exc).__name__}: {exc}"[:200]
    return times


def _median(times) -> float | None:
    return statistics.median(times) if isinstance(times, list) and times else None


def ratios(result: dict) -> dict:
    out = {}
    for name in MODES[1:]:
        for key in ("forward_backward_ms", "backward_ms", "graph_forward_backward_ms"):
            ours, atomic = _median(result[name][key]), _median(result["atomic"][key])
            out[f"{name}/{key}"] = ours / atomic if ours and atomic else None
    return out


def table(results: list[dict]) -> str:
    def cell(r, name, key):
        ours, atomic = _median(r[name][key]), _median(r["atomic"][key])
        return f"{atomic:.3f} / {ours:.3f} ({ours / atomic:.2f}x)" if ours and atomic else "n/a"

    lines = ["| slot | case | dtype | fwd+bwd ms atomic / det | bwd ms atomic / det "
             "| graph fwd+bwd ms atomic / det | det no fill: fwd+bwd, bwd, graph "
             f"| atomic value grad differed (of {RUNS - 1} runs) | fixed-point term / limit |",
             "|---" * 9 + "|"]
    for r in results:
        rt = r["ratios"]
        no_fill = ", ".join(f"{rt[f'deterministic_no_fill/{k}']:.2f}x"
                            if rt[f"deterministic_no_fill/{k}"] else "n/a"
                            for k in ("forward_backward_ms", "backward_ms",
                                      "graph_forward_backward_ms"))
        checked = r.get("check", {})
        lines.append(
            f"| {r['slot']} | {r['case']} | {r['dtype']} "
            f"| {cell(r, 'deterministic', 'forward_backward_ms')} "
            f"| {cell(r, 'deterministic', 'backward_ms')} "
            f"| {cell(r, 'deterministic', 'graph_forward_backward_ms')} | {no_fill} "
            f"| {checked.get('atomic_runs_differing', {}).get('grad_arg0', 'n/a')} "
            f"| {checked.get('fixed_point_term_over_limit', float('nan')):.1e} |")
    worst = max((v for r in results for k, v in r["ratios"].items()
                 if v and k.startswith("deterministic/") and "graph" not in k), default=None)
    if worst is not None:
        lines.append(f"\nworst eager deterministic / atomic: {worst:.2f}x (target {TARGET}x)")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where to write the raw JSON")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--iters", type=int, default=60)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cases", nargs="*", help="case names (default: medium and large)")
    parser.add_argument("--skip-check", action="store_true",
                        help="time without the checks (they compute the float64 reference on "
                             "the CPU)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU")
    dtype = getattr(torch, args.dtype)
    results = []
    for slot, case in rows(args.cases):
        fn, inputs = row_inputs(slot, case, dtype)
        result = {"slot": slot, "case": case.name, "dtype": args.dtype}
        if not args.skip_check:
            result["check"] = check(slot, case, dtype)
        result.update(time_row(fn, inputs, max(1, args.iters // args.rounds), args.rounds))
        result["ratios"] = ratios(result)
        results.append(result)
        print(f"{slot} {case.name}: " + ", ".join(
            f"{k} {v:.2f}x" for k, v in result["ratios"].items() if v), flush=True)
        environment = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "cuda": torch.version.cuda, "triton": __import__("triton").__version__,
                       "python": platform.python_version()}
        # rewritten after every row: a run cut by its limit keeps what it measured
        args.out.write_text(json.dumps({"environment": environment, "target": TARGET,
                                        "results": results}, indent=1))
    print(table(results))


if __name__ == "__main__":
    main()

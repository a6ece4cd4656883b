"""Whole transformers detectors, stock against wired to our deformable-attention slots, on CUDA.

Usage: ``python benchmarks/bench/bench_detectors.py OUT.json [--families rt_detr d_fine ...]
[--modes eager-infer eager-train compiled compiled-ro compiled-train] [--batches 1 8]
[--dtypes fp32 bf16] [--iters 20] [--warmup 5] [--budget SECONDS]``; ``--table OUT.json`` prints
the table of a run.

Each family is transformers' default configuration (``tests/integrations/detector_families.toml``,
``[[full]]``), random weights, at its input size (the entry's ``image``). Each row builds
two copies of one seeded model, one left stock and one wired
(``libreyolo.integrations.wire_deformable_attention``), makes both steps (compiling both in a
compiled mode), and times them in interleaved rounds (stock, wired, stock, ...: ``--rounds``, each
the median of ``--iters`` steps), so both see the same clocks, allocator state and neighbours; the
ratio is the median of the rounds' ratios, and its spread (lowest, highest) is kept: a ratio
inside it is noise. Modes:
- eager-infer: ``model.eval()`` under ``torch.no_grad()``;
- eager-train: ``model.train()``, forward, a loss on the logits and boxes, backward (no labels, so
  no denoising queries; no optimizer step: it does not touch attention);
- compiled / compiled-ro: ``torch.compile(model)`` in default mode / ``mode="reduce-overhead"``,
  inference; compiled-train: ``torch.compile(model)`` train step. Dynamo is reset between variants.
Dtypes: fp32, and bf16 autocast (``torch.autocast("cuda", torch.bfloat16)``).

Timing: CUDA events around each step after ``--warmup`` steps, the median of ``--iters``. Before
timing, a wired inference's outputs are compared with the stock ones (max abs difference recorded).

Device time: the stock and the wired step's own device time (``torch.profiler``, kernels and
copies), and its ratio, which the host cannot blur: where a step is host-bound (eager, batch 1)
the wall-clock ratio says what the user sees, and the device ratio what the kernels changed.

The ceiling (eager modes; issue 48): the step's real deformable-attention calls, captured at the
wired sites, are replayed alone through transformers' own core and through our slots (forward, and
backward for a train step) under ``torch.profiler``: their device time is A_stock and A_ours. With
T_stock the stock step's time, a wired model can at best be ``T_stock / (T_stock - A_stock +
A_ours)`` faster; the row's target is ``1 + 0.8 (ceiling - 1)``. The attention share is A_stock
over the stock step's device time (profiled). Writes the JSON after every row and prints a markdown
table.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import libreyolo.integrations.transformers as wiring  # noqa: E402
from benchmarks.bench.bench_ms_deform_attn import time_ms  # noqa: E402
from libreyolo.integrations import (  # noqa: E402
    unwire_deformable_attention,
    wire_deformable_attention,
)

# the wiring tests' helpers: the same recorder of real calls and the same stock cores
from tests.integrations.detectors import Recorder, inputs, load_families, stock_core  # noqa: E402
from tests.integrations.detectors import build as detector_build  # noqa: E402

#: The default configurations the GPU tests validate (``[[full]]``), as data.
DETECTOR_FAMILIES = load_families("full")
FAMILIES = list(DETECTOR_FAMILIES)
MODES = ("eager-infer", "eager-train", "compiled", "compiled-ro", "compiled-train")


def build(family: str, device):
    """The family's model with seeded random weights, in train mode (each step sets its own)."""
    model, _ = detector_build(DETECTOR_FAMILIES[family], device=device)
    return model


def make_step(model, mode: str, arguments: dict, dtype: str):
    """One step of ``mode`` on the forward's keyword ``arguments`` (pixels, and a prompt where the
    family reads text) as a no-argument callable (compiled modes compile here)."""
    train = mode in ("eager-train", "compiled-train")
    model.train(train)
    runner = model
    if mode in ("compiled", "compiled-train"):
        runner = torch.compile(model)
    elif mode == "compiled-ro":
        runner = torch.compile(model, mode="reduce-overhead")
    autocast = (torch.autocast("cuda", torch.bfloat16) if dtype == "bf16"
                else contextlib.nullcontext())

    def infer():
        with torch.no_grad(), autocast:
            return runner(**arguments)

    def train_step():
        with autocast:
            outputs = runner(**arguments)
            loss = outputs.logits.float().square().mean() + outputs.pred_boxes.float().sum()
        loss.backward()
        for parameter in model.parameters():
            parameter.grad = None
        return outputs

    return train_step if train else infer


def time_step(step, iters: int, warmup: int) -> float:
    """The median of ``iters`` steps' CUDA-event times (ms) after ``warmup`` steps."""
    return statistics.median(time_ms(step, iters, warmup))


def kernel_ms(work, reps: int = 3) -> float:
    """Device time of ``work``'s kernels (and copies), ms per call, from a profiled window."""
    from torch.profiler import ProfilerActivity, profile

    work()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            work()
        torch.cuda.synchronize()
    device = sum(event.time_range.elapsed_us() for event in prof.events()
                 if event.device_type == torch.autograd.DeviceType.CUDA)
    return device / reps / 1e3


def attention_ms(model, family, mode, arguments, dtype) -> tuple[float, float]:
    """(stock, ours): the device time of one step's deformable-attention calls, from the step's
    real calls (captured at the wired sites) replayed alone through transformers' own core and
    through our slots, forward (and backward for a train step), in the step's autocast."""
    monkeypatch = pytest.MonkeyPatch()
    recorder = Recorder(monkeypatch)
    wire_deformable_attention(model)
    try:
        make_step(model, mode, arguments, dtype)()
    finally:
        monkeypatch.undo()
        unwire_deformable_attention(model)
    core = stock_core(DETECTOR_FAMILIES[family])
    train = mode.endswith("train")
    autocast = (torch.autocast("cuda", torch.bfloat16) if dtype == "bf16"
                else contextlib.nullcontext())

    def replay(core_of):
        for call in recorder.calls:
            value, shapes, locations, weights, *rest = call.args
            tensors = [t.detach().requires_grad_(train) for t in (value, locations, weights)]
            with autocast:
                out = core_of(call.route)(tensors[0], shapes, tensors[1], tensors[2], *rest)
            if train:
                out.backward(torch.ones_like(out))

    stock = kernel_ms(lambda: replay(lambda route: core))
    ours = kernel_ms(lambda: replay(lambda route: getattr(wiring, f"_ask_{route}")))
    return stock, ours


def interleaved_ms(steps: dict, rounds: int, iters: int, warmup: int) -> dict[str, list]:
    """Each step's median time (ms) in each of ``rounds`` rounds, the steps taking turns."""
    for step in steps.values():
        time_ms(step, 1, warmup)
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            times[name].append(statistics.median(time_ms(step, iters, 0)))
    return times


def measure_row(model, family, mode, batch, dtype, args):
    arguments = inputs(DETECTOR_FAMILIES[family], batch, "cuda", seed=batch)
    row = {"family": family, "mode": mode, "batch": batch, "dtype": dtype}
    torch._dynamo.reset()
    wired = copy.deepcopy(model)
    row["sites"] = len(wire_deformable_attention(wired).wired)
    steps = {"stock": make_step(model, mode, arguments, dtype),
             "ours": make_step(wired, mode, arguments, dtype)}
    if not mode.endswith("train"):
        outs = {name: step() for name, step in steps.items()}
        ours, stock = (outs[name].logits.float() for name in ("ours", "stock"))
        # equal entries differ by 0, Grounding DINO's -inf past the prompt included
        difference = torch.where(ours == stock, 0.0, ours - stock)
        row["max_abs_logits_diff"] = difference.abs().max().item()
    times = interleaved_ms(steps, args.rounds, args.iters, args.warmup)
    ratios = sorted(s / o for s, o in zip(times["stock"], times["ours"], strict=True))
    row.update(stock_ms=statistics.median(times["stock"]), ours_ms=statistics.median(times["ours"]),
               speedup=statistics.median(ratios), spread=[ratios[0], ratios[-1]])
    if args.profile:
        gpu = {name: kernel_ms(step) for name, step in steps.items()}
        row.update(gpu_ms_stock=gpu["stock"], gpu_ms_ours=gpu["ours"],
                   device_speedup=gpu["stock"] / gpu["ours"] if gpu["ours"] else None)
        if not mode.startswith("compiled"):
            a_stock, a_ours = attention_ms(model, family, mode, arguments, dtype)
            ceiling = row["stock_ms"] / max(row["stock_ms"] - a_stock + a_ours, 1e-9)
            row.update(attn_ms_stock=a_stock, attn_ms_ours=a_ours,
                       attn_share=a_stock / gpu["stock"] if gpu["stock"] else None,
                       ceiling=ceiling, target=1 + 0.8 * (ceiling - 1))
    del steps, wired
    torch._dynamo.reset()
    return row


def environment() -> dict:
    import transformers
    import triton

    return {"python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "triton": triton.__version__,
            "transformers": transformers.__version__,
            "gpu": torch.cuda.get_device_name(), "written": time.strftime("%Y-%m-%d %H:%M:%S")}


def table(rows) -> str:
    """The markdown table docs/performance.md carries ("Whole detectors")."""
    lines = ["| family | mode | batch | dtype | stock ms | ours ms | stock/ours (rounds' spread) | "
             "device ms, stock -> ours | device stock/ours | attention ms, stock -> ours | "
             "attention share | ceiling | verdict |",
             "|" + "---|" * 13]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['family']} | {row['mode']} | {row['batch']} | {row['dtype']} | "
                         f"failed: {row['error'][:80]} |||||||||")
            continue
        share, ceiling = row.get("attn_share"), row.get("ceiling")
        low, high = row.get("spread") or (row["speedup"], row["speedup"])
        verdict = ("noise (the rounds straddle 1.00x)" if low < 1.0 <= high
                   else "below stock" if high < 1.0 else "faster")
        attention = ("" if share is None
                     else f"{row['attn_ms_stock']:.2f} -> {row['attn_ms_ours']:.2f}")
        device = ("" if row.get("gpu_ms_ours") is None
                  else f"{row['gpu_ms_stock']:.2f} -> {row['gpu_ms_ours']:.2f}")
        device_ratio = row.get("device_speedup")
        lines.append(
            f"| {row['family']} | {row['mode']} | {row['batch']} | {row['dtype']} | "
            f"{row['stock_ms']:.2f} | {row['ours_ms']:.2f} | {row['speedup']:.2f}x "
            f"({low:.2f}-{high:.2f}) | {device} | "
            f"{'' if device_ratio is None else f'{device_ratio:.2f}x'} | {attention} | "
            f"{'' if share is None else f'{share:.0%}'} | "
            f"{'' if ceiling is None else f'{ceiling:.2f}x'} | {verdict} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the JSON to write (with --table: to read)")
    parser.add_argument("--table", action="store_true",
                        help="print the markdown table of an existing OUT.json and exit")
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    parser.add_argument("--modes", nargs="+", default=["eager-infer", "eager-train"],
                        choices=MODES)
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--iters", type=int, default=10, help="steps a round")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds of stock and wired steps")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--no-profile", dest="profile", action="store_false")
    parser.add_argument("--budget", type=float, default=float("inf"),
                        help="seconds; rows left when it runs out are listed as not measured")
    args = parser.parse_args(argv)
    if args.table:
        print(table(json.loads(args.out.read_text())["rows"]))
        return
    report = {"environment": environment(), "arguments": vars(args) | {"out": str(args.out)},
              "rows": [], "not_measured": []}
    started = time.monotonic()
    for family in args.families:
        model = build(family, "cuda")
        for mode in args.modes:
            for batch in args.batches:
                for dtype in args.dtypes:
                    if time.monotonic() - started > args.budget:
                        report["not_measured"].append([family, mode, batch, dtype])
                        continue
                    try:
                        row = measure_row(model, family, mode, batch, dtype, args)
                    except Exception as exc:  # noqa: BLE001 - a failed row is reported
                        row = {"family": family, "mode": mode, "batch": batch, "dtype": dtype,
                               "error": f"{type(exc).__name__}: {exc}"}
                    print(json.dumps(row), flush=True)
                    report["rows"].append(row)
                    args.out.write_text(json.dumps(report, indent=2, default=str))
        del model
        torch.cuda.empty_cache()
    print(table(report["rows"]))
    if report["not_measured"]:
        print(f"not measured (budget): {report['not_measured']}")


if __name__ == "__main__":
    main()

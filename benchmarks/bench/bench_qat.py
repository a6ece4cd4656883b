"""Benchmark a QAT training step (forward, backward, optimizer) of detector-sized models on CUDA.

Usage: ``python benchmarks/bench/bench_qat.py OUT.json [--models yolo decoder] [--modes eager
compiled reduce-overhead graphed] [--steps 20] [--rounds 5] [--warmup 5] [--unbound]``

Models (``benchmarks/bench/qat_models.py``): the transformer blocks of an RT-DETR-like decoder (6
layers, d_model 256, FFN 1024, 300 queries, batch 8, memory of 8400 tokens) and a YOLO-like conv
stack (channels 64-256 at 80x80 to 20x20, batch 16); ``yolo_channels_last``, not run by default,
is the stack in channels-last memory. Every step runs under bf16 autocast (the
quantized layers compute in autocast's dtype, ``libreyolo/nn/quantized/modules.py``), SGD with
momentum. Rows per model:

- eager: unquantized bf16; w8a8_int8, fp8_dynamic, mxfp4 with the Triton kernels (the default
  selection) and with the references (``LIBREYOLO_KERNELS=reference``); with ``--unbound``, the
  kernels once more with every layer calling ``ops`` (the whole selection on every call) instead
  of its bound call sites (``libreyolo/nn/slot_sites.py``): what binding the layers saves, in the
  same rounds (below);
- compiled (``torch.compile(model)``): unquantized; the three recipes with the kernels (the
  slots are PyTorch operators, so the compiled graph calls the kernels);
- reduce-overhead (``torch.compile(model, mode="reduce-overhead")``: inductor's CUDA graphs,
  the optimizer outside them); the row counts the graphs inductor declined to make
  (``cudagraph_skips``), so a row that fell back to plain compiled code says so;
- graphed: the whole eager step (forward, backward, optimizer) captured in one
  ``torch.cuda.graph`` and replayed (PyTorch's whole-network capture), the slots' eager
  selection inside the capture.

Every QAT step here is host-bound eager (the GPU is busy for under half of it, benchmarks/NOTES.md),
and each fake-quant call adds host time the unquantized step does not pay; the two graph modes
replay the step without the host, so they show what the quantized step costs on the GPU.

Before timing a recipe, its first step runs with the kernels and with the references from the
same state, deterministic algorithms on: the losses must be equal bit for bit (``first_step``
in the JSON). Timing: CUDA events around each step after ``--warmup`` steps, the events of a
row's steps recorded back to back (the host runs ahead as in a training loop), one
synchronization at the end.

The eager rows compared with each other are timed in turns (``benchmarks/bench/turns.py``):
a host-bound step moves with the machine (clocks, other processes, the garbage collector) by
30% between rows timed minutes apart (an H100, 2026-12-07), more than the ratios the eager
targets are about. Per model, the unquantized step and each recipe's kernels (and, with
``--unbound``, its ``ops``-per-call step) are all built and warmed up, then run ``--rounds``
rounds in which each runs ``--steps`` steps in turn. A row's ``ms`` is the median of its
rounds' medians (``round_ms``, in round order); a ratio between two of them is the median of the
rounds' ratios with their spread (lowest, highest), and a ratio whose rounds straddle its
target reads "noise", neither met nor missed. The references' eager rows (2-5x slower, they
give only "x faster than references") and the other modes' rows (no host in the graph modes'
steps) are timed one after the other, the median of ``--steps`` (``--reference-steps`` for the
references). Building every eager step of the decoder at once holds each one's weights,
gradients, momentum (3 x 25 MB) and batch (76 MB, the memory's 8400 tokens): about 150 MB a
step, about 1 GB for the seven of ``--unbound``.

Targets: >= 2x faster per step than the references (issue 38); the eager step within 1.6x of
the unquantized eager step (issue 49 item 4), the other modes' within 1.3x of their unquantized
step (issue 38); compiled no slower than eager (the table gives every mode's step over the eager
one). Writes the JSON after every row, or every group of rows timed in turns (a run cut short
keeps what it measured), and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.bench.qat_models import (  # noqa: E402
    DetrLikeDecoder,
    YoloLikeStack,
    decoder_batch,
    selection,
    yolo_batch,
)
from benchmarks.bench.turns import interleaved_ms, round_ratios  # noqa: E402
from libreyolo.nn.quantized import calibrate, prepare  # noqa: E402
from libreyolo.nn.slot_sites import calling_ops_per_call  # noqa: E402

RECIPES = ("w8a8_int8", "fp8_dynamic", "mxfp4")
TARGET_VS_REFERENCE = 2.0
#: the quantized step over the unquantized one of its mode: eager (issue 49 item 4), the others
#: (issue 38)
TARGET_VS_UNQUANTIZED = {"eager": 1.6, "other modes": 1.3}
MODELS = {
    "yolo": (YoloLikeStack, lambda device: yolo_batch(16, device)),
    "decoder": (DetrLikeDecoder, lambda device: decoder_batch(8, device)),
}
#: models run in channels-last memory (``model.to(memory_format=torch.channels_last)`` and its
#: input): a per-pixel input format (fp8 dynamic, MXFP4) quantizes each pixel's channels, which
#: are then contiguous, so no layout copy surrounds the slot call
CHANNELS_LAST = {"yolo_channels_last": "yolo"}


def _inputs(batch):
    inputs, target = batch
    return (inputs if isinstance(inputs, tuple) else (inputs,)), target


def build(model_name, recipe, device):
    """(model, step function, optimizer) from seed 0; the recipe's static scales calibrated."""
    make, data = MODELS[CHANNELS_LAST.get(model_name, model_name)]
    torch.manual_seed(0)
    model = make().to(device)
    batch = data(device)
    inputs, target = _inputs(batch)
    if model_name in CHANNELS_LAST:
        model = model.to(memory_format=torch.channels_last)
        inputs = tuple(x.contiguous(memory_format=torch.channels_last) for x in inputs)
    if recipe is not None:
        prepare(model, recipe)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            calibrate(model, [inputs], progress=False)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    return model, optimizer, inputs, target


MODES = ("eager", "compiled", "reduce-overhead", "graphed")
#: the ``impl`` of an ``--unbound`` row, and how the table names the rows it lists apart
UNBOUND = "kernels-unbound"
APART = {"reference": "references", UNBOUND: "kernels, ops per call"}



def make_step(model, optimizer, inputs, target, mode="eager"):
    """One training step of ``mode`` (module docstring); returns the step's loss."""
    if mode == "graphed":
        return _graphed_step(model, optimizer, inputs, target)
    forward = model
    if mode != "eager":
        forward = torch.compile(model, mode=None if mode == "compiled" else mode)

    def step():
        if mode == "reduce-overhead":  # a new iteration: the last step's graph outputs are dead
            torch.compiler.cudagraph_mark_step_begin()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = forward(*inputs)
        loss = F.mse_loss(out.float(), target)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def _graphed_step(model, optimizer, inputs, target, warmup=3):
    """The eager step captured whole (PyTorch's whole-network capture: warm up on a side stream,
    gradients set to None before the capture so the backward writes them in the graph's pool,
    autocast's weight cache off inside it); each call replays it."""

    def body():
        with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
            out = model(*inputs)
        loss = F.mse_loss(out.float(), target)
        loss.backward()
        optimizer.step()
        return loss.detach()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            optimizer.zero_grad(set_to_none=True)
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    optimizer.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        loss = body()

    def step():
        graph.replay()
        return loss

    return step


def step_times(step, steps, warmup):
    """The times (ms) of ``steps`` steps after ``warmup``: CUDA events recorded back to back, one
    synchronization at the end (turns.interleaved_ms's timer for the eager rows)."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(steps)]
    for start, end in events:
        start.record()
        step()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in events]


def first_step_check(model_name, recipe, device):
    """One step from the same state with the kernels and with the references, deterministic
    algorithms on: equal losses (bits) and the largest weight difference after the step."""
    saved = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        results = {}
        for label, value in (("kernels", None), ("reference", "reference")):
            with selection(value):
                model, optimizer, inputs, target = build(model_name, recipe, device)
                loss = make_step(model, optimizer, inputs, target)()
                results[label] = (loss.cpu(), [p.detach().float().cpu()
                                               for p in model.parameters()])
    finally:
        torch.use_deterministic_algorithms(saved)
    (loss_k, params_k), (loss_r, params_r) = results["kernels"], results["reference"]
    return {"loss_kernels": loss_k.item(), "loss_reference": loss_r.item(),
            "loss_bits_equal": bool(torch.equal(loss_k.view(torch.int32),
                                                loss_r.view(torch.int32))),
            "max_weight_diff": max((a - b).abs().max().item()
                                   for a, b in zip(params_k, params_r, strict=True))}


def in_turns(recipes, unbound):
    """The eager rows timed in turns, as (recipe, impl): the unquantized step, each recipe's
    kernels and, with ``unbound``, its ops-per-call step."""
    variants = [("bf16", "-")]
    for recipe in recipes:
        variants.append((recipe, "kernels"))
        if unbound:
            variants.append((recipe, UNBOUND))
    return variants


def one_after_another(modes, recipes):
    """The rows timed one after the other, as (mode, recipe, impl, LIBREYOLO_KERNELS): eager,
    each recipe's references; every other mode, the unquantized step and each recipe's kernels."""
    plan = []
    for mode in modes:
        if mode != "eager":
            plan.append((mode, "bf16", "-", None))
        for recipe in recipes:
            if mode == "eager":
                plan.append((mode, recipe, "reference", "reference"))
            else:
                plan.append((mode, recipe, "kernels", None))
    return plan


def ready_step(row, device):
    """``row``'s step, built from seed 0 and run once (compiled or captured, for those modes):
    its time is ``first_step_s``, its loss the first of ``losses_first_last``."""
    recipe = None if row["recipe"] == "bf16" else row["recipe"]
    model, optimizer, inputs, target = build(row["model"], recipe, device)
    if row["impl"] == UNBOUND:
        calling_ops_per_call(model)
    started = time.time()
    step = make_step(model, optimizer, inputs, target, row["mode"])
    row["losses_first_last"] = [step().item()]
    row["first_step_s"] = time.time() - started
    return step


def timed(row, times):
    """``row`` with its step times (a row timed in turns: its rounds' medians), ``ms`` their
    median."""
    row["ms"] = statistics.median(times)
    rounds = ("" if "round_ms" not in row
              else ", rounds " + " / ".join(f"{t:.3f}" for t in row["round_ms"]))
    print(f"{row['model']:8} {row['mode']:15} {row['recipe']:12} {row['impl']:15} "
          f"{row['ms']:9.3f} ms (loss {row['losses_first_last'][0]:.5g} -> "
          f"{row['losses_first_last'][-1]:.5g}{rounds})", flush=True)


def failed(row, error):
    """``row`` with the error that stopped it: a mode a stack cannot run is a row that says why."""
    row["error"] = f"{type(error).__name__}: {error}"[:2000]
    print(f"{row['model']:8} {row['mode']:15} {row['recipe']:12} {row['impl']:15} failed: "
          f"{row['error'][:300]}", flush=True)


def measure_in_turns(model_name, variants, args, device):
    """The eager rows of ``variants`` (``in_turns``), every step built and warmed up, then timed
    in ``args.rounds`` rounds of ``args.steps`` steps each, taking turns: a row's ``round_ms``
    is its rounds' medians in round order, its ``ms`` their median."""
    rows = {key: {"model": model_name, "mode": "eager", "recipe": key[0], "impl": key[1]}
            for key in variants}
    steps = {}
    with selection(None):
        for key, row in rows.items():
            try:
                steps[key] = ready_step(row, device)
            except Exception as error:
                failed(row, error)
        try:
            times = interleaved_ms(steps, args.rounds, args.steps, args.warmup, timer=step_times)
            for key, step in steps.items():
                rows[key]["round_ms"] = times[key]
                rows[key]["losses_first_last"].append(step().item())
                timed(rows[key], times[key])
        except Exception as error:  # a step that fails in its turn stops the rounds
            for key in steps:
                failed(rows[key], error)
    return list(rows.values())


def measure_alone(model_name, mode, recipe, impl, value, args, device):
    """One row timed on its own: ``args.steps`` steps (``args.reference_steps`` for the
    references) under ``LIBREYOLO_KERNELS=value``."""
    if mode in ("compiled", "reduce-overhead"):
        torch._dynamo.reset()
    skips = counters["inductor"]["cudagraph_skips"]
    row = {"model": model_name, "mode": mode, "recipe": recipe, "impl": impl}
    try:
        with selection(value):
            step = ready_step(row, device)
            times = step_times(step, args.reference_steps if impl == "reference" else args.steps,
                               args.warmup)
            row["times_ms"] = times
            row["losses_first_last"].append(step().item())
    except Exception as error:
        failed(row, error)
        return row
    timed(row, times)
    if mode == "reduce-overhead":
        row["cudagraph_skips"] = counters["inductor"]["cudagraph_skips"] - skips
    return row


def _positive(text):
    """A count of steps or rounds: an integer of at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of steps or rounds, got "
                                         f"{text!r}")
    return int(text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--models", nargs="+", default=list(MODELS),
                        choices=[*MODELS, *CHANNELS_LAST])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES))
    parser.add_argument("--steps", type=_positive, default=20,
                        help="steps timed per row (eager rows in turns: per row and round)")
    parser.add_argument("--rounds", type=_positive, default=5,
                        help="rounds of the eager rows timed in turns")
    parser.add_argument("--reference-steps", type=_positive, default=5)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--unbound", action="store_true",
                        help="also time each recipe eager with the layers calling ops per call")
    args = parser.parse_args(argv)
    device = "cuda"
    torch.backends.cudnn.benchmark = True
    report = {"machine": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                          "python": platform.python_version()},
              "started": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": [], "checks": {},
              "eager_in_turns": {"rounds": args.rounds, "steps_per_round": args.steps,
                                 "warmup": args.warmup}}

    def save():
        args.out.write_text(json.dumps(report, indent=2))

    def cleared():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()

    for model_name in args.models:
        if "eager" in args.modes:
            for recipe in args.recipes:
                report["checks"][f"{model_name}/{recipe}"] = first_step_check(model_name, recipe,
                                                                              device)
                save()
            report["rows"] += measure_in_turns(model_name, in_turns(args.recipes, args.unbound),
                                               args, device)
            save()
            cleared()
        for plan in one_after_another(args.modes, args.recipes):
            report["rows"].append(measure_alone(model_name, *plan, args, device))
            save()
            cleared()
    report["verdicts"] = verdicts(report["rows"])
    save()
    print()
    print(table(report))


def _row(rows, model, mode, recipe, impl):
    """The measured row of (model, mode, recipe, impl), or None (not run, or failed)."""
    return next((r for r in rows if (r["model"], r["mode"], r["recipe"], r["impl"]) ==
                 (model, mode, recipe, impl) and "error" not in r), None)


def ratio(over, under):
    """``over``'s step over ``under``'s: the median of their rounds' ratios and the spread, for
    rows timed in turns; one ratio (its own spread) for rows timed alone."""
    return round_ratios({"over": over.get("round_ms", [over["ms"]]),
                         "under": under.get("round_ms", [under["ms"]])}, "over", "under")


def side(spread, line):
    """Where a ratio's rounds sit against ``line``: "under" (every round at or under it), "over"
    (every round over it) or "noise" (the rounds straddle it: which side the ratio falls on is
    the machine's moment as much as the steps')."""
    low, high = spread
    return "under" if high <= line else "over" if low > line else "noise"


def verdicts(rows):
    out = []
    for r in rows:
        if r["recipe"] == "bf16" or r["impl"] != "kernels" or "error" in r:
            continue
        m, mode, recipe = r["model"], r["mode"], r["recipe"]
        reference = _row(rows, m, "eager", recipe, "reference")
        unquantized = _row(rows, m, mode, "bf16", "-")
        eager = _row(rows, m, "eager", recipe, "kernels")
        unbound = _row(rows, m, mode, recipe, UNBOUND)
        entry = {"model": m, "mode": mode, "recipe": recipe, "ms": r["ms"]}
        if reference is not None:
            entry["vs_reference"] = reference["ms"] / r["ms"]
            entry["vs_reference_met"] = entry["vs_reference"] >= TARGET_VS_REFERENCE
        if unquantized is not None:
            target = TARGET_VS_UNQUANTIZED["eager" if mode == "eager" else "other modes"]
            entry["vs_unquantized"], entry["vs_unquantized_spread"] = ratio(r, unquantized)
            verdict = {"under": "met", "over": "missed"}.get(
                side(entry["vs_unquantized_spread"], target), "noise")
            entry.update(vs_unquantized_target=target, vs_unquantized_verdict=verdict,
                         vs_unquantized_met=verdict == "met")
        if mode != "eager" and eager is not None:
            entry["vs_eager"] = r["ms"] / eager["ms"]
            entry["no_slower_than_eager_met"] = r["ms"] <= eager["ms"]
        if unbound is not None:
            entry["unbound_over_bound"], entry["unbound_over_bound_spread"] = ratio(unbound, r)
            entry["binding"] = {"over": "saves", "under": "saves nothing"}.get(
                side(entry["unbound_over_bound_spread"], 1.0), "noise")
        out.append(entry)
    return out


def _ratio_cell(v, key, verdict):
    """A ratio, its rounds' spread where they differ, and its verdict."""
    if key not in v:
        return "-"
    low, high = v[f"{key}_spread"]
    spread = "" if low == high else f" ({low:.2f}-{high:.2f})"
    return f"{v[key]:.2f}{spread} {verdict}"


def table(report):
    targets = TARGET_VS_UNQUANTIZED
    lines = ["| model | mode | recipe | ms/step | x faster than references (>= 2) | "
             f"x unquantized, same mode (eager <= {targets['eager']}, "
             f"others <= {targets['other modes']}; rounds' spread) | "
             "this mode / eager (compiled: <= 1) | first step equal | "
             "unbound / bound (rounds' spread) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['mode']} | {r['recipe']} | failed: "
                         f"{r['error'][:120]} | | | | | |")
            continue
        if r["impl"] in APART:
            continue
        v = next((v for v in report["verdicts"] if (v["model"], v["mode"], v["recipe"]) ==
                  (r["model"], r["mode"], r["recipe"])), {})
        check = report["checks"].get(f"{r['model']}/{r['recipe']}", {})

        def fmt(key, v=v):
            return f"{v[key]:.2f}" if key in v else "-"

        equal = "-" if r["recipe"] == "bf16" or not check else str(check["loss_bits_equal"])
        unquantized = _ratio_cell(v, "vs_unquantized", v.get("vs_unquantized_verdict"))
        binding = _ratio_cell(v, "unbound_over_bound", f"binding {v.get('binding')}")
        lines.append(f"| {r['model']} | {r['mode']} | {r['recipe']} | {r['ms']:.3f} | "
                     f"{fmt('vs_reference')} | {unquantized} | {fmt('vs_eager')} | "
                     f"{equal} | {binding} |")
    for r in report["rows"]:
        if r["impl"] in APART and "error" not in r:
            lines.append(f"| {r['model']} | eager | {r['recipe']} ({APART[r['impl']]}) | "
                         f"{r['ms']:.3f} | | | | | |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

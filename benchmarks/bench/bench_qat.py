"""Benchmark a QAT training step (forward, backward, optimizer) of detector-sized models on CUDA.

Usage: ``python benchmarks/bench/bench_qat.py OUT.json [--models yolo decoder] [--modes eager
compiled reduce-overhead graphed] [--steps 20] [--warmup 5] [--unbound]``

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
  same run;
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
in the JSON). Timing: CUDA events around each step after ``--warmup`` steps, the median of
``--steps`` (fewer for the slow reference rows). Targets (issue 38): >= 2x faster per step
than the references, within 1.3x of the unquantized step in the same mode, compiled no slower
than eager (the table gives every mode's step over the eager one). Writes the JSON after every
row (a run cut short keeps what it measured) and prints a markdown table.
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
from libreyolo.nn.quantized import calibrate, prepare  # noqa: E402
from libreyolo.nn.slot_sites import calling_ops_per_call  # noqa: E402

RECIPES = ("w8a8_int8", "fp8_dynamic", "mxfp4")
TARGET_VS_REFERENCE, TARGET_VS_UNQUANTIZED = 2.0, 1.3
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


def time_steps(step, steps, warmup):
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
    times = [s.elapsed_time(e) for s, e in events]
    return statistics.median(times), times


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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--models", nargs="+", default=list(MODELS),
                        choices=[*MODELS, *CHANNELS_LAST])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--recipes", nargs="+", default=list(RECIPES))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--reference-steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--unbound", action="store_true",
                        help="also time each recipe eager with the layers calling ops per call")
    args = parser.parse_args(argv)
    device = "cuda"
    torch.backends.cudnn.benchmark = True
    report = {"machine": {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                          "python": platform.python_version()},
              "started": time.strftime("%Y-%m-%d %H:%M:%S"), "rows": [], "checks": {}}

    def save():
        args.out.write_text(json.dumps(report, indent=2))

    for model_name in args.models:
        for recipe in args.recipes:
            if "eager" in args.modes:
                report["checks"][f"{model_name}/{recipe}"] = first_step_check(model_name, recipe,
                                                                              device)
                save()
        plan = []
        for mode in args.modes:
            plan.append((mode, "bf16", None, None))
            for recipe in args.recipes:
                plan.append((mode, recipe, "kernels", None))
                if mode == "eager":
                    plan.append((mode, recipe, "reference", "reference"))
                    if args.unbound:
                        plan.append((mode, recipe, UNBOUND, None))
        for mode, recipe, impl, value in plan:
            if mode in ("compiled", "reduce-overhead"):
                torch._dynamo.reset()
            skips = counters["inductor"]["cudagraph_skips"]
            row = {"model": model_name, "mode": mode, "recipe": recipe, "impl": impl or "-"}
            try:
                with selection(value):
                    model, optimizer, inputs, target = build(
                        model_name, None if recipe == "bf16" else recipe, device)
                    if impl == UNBOUND:
                        calling_ops_per_call(model)
                    started = time.time()
                    step = make_step(model, optimizer, inputs, target, mode)
                    loss_first = step().item()  # compiles or captures, for those modes
                    first = time.time() - started
                    steps = args.reference_steps if impl == "reference" else args.steps
                    median, times = time_steps(step, steps, args.warmup)
                    loss_last = step().item()
            except Exception as error:  # a mode a stack cannot run is a row that says why
                row["error"] = f"{type(error).__name__}: {error}"[:2000]
                report["rows"].append(row)
                print(f"{model_name:8} {mode:15} {recipe:12} {impl or '-':9} failed: "
                      f"{row['error'][:300]}", flush=True)
                save()
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                continue
            row.update({"ms": median, "times_ms": times, "first_step_s": first,
                        "losses_first_last": [loss_first, loss_last]})
            if mode == "reduce-overhead":
                row["cudagraph_skips"] = counters["inductor"]["cudagraph_skips"] - skips
            report["rows"].append(row)
            print(f"{model_name:8} {mode:15} {recipe:12} {impl or '-':9} {median:9.3f} ms "
                  f"(loss {loss_first:.5g} -> {loss_last:.5g})", flush=True)
            save()
            del model, optimizer, step
            torch.cuda.empty_cache()
    report["verdicts"] = verdicts(report["rows"])
    save()
    print()
    print(table(report))


def _ms(rows, model, mode, recipe, impl):
    for r in rows:
        if (r["model"], r["mode"], r["recipe"], r["impl"]) == (model, mode, recipe, impl):
            return r.get("ms")
    return None


def verdicts(rows):
    out = []
    for r in rows:
        if r["recipe"] == "bf16" or r["impl"] != "kernels" or "error" in r:
            continue
        m, mode, recipe = r["model"], r["mode"], r["recipe"]
        reference = _ms(rows, m, "eager", recipe, "reference")
        unquantized = _ms(rows, m, mode, "bf16", "-")
        eager = _ms(rows, m, "eager", recipe, "kernels")
        entry = {"model": m, "mode": mode, "recipe": recipe, "ms": r["ms"]}
        if reference is not None:
            entry["vs_reference"] = reference / r["ms"]
            entry["vs_reference_met"] = entry["vs_reference"] >= TARGET_VS_REFERENCE
        if unquantized is not None:
            entry["vs_unquantized"] = r["ms"] / unquantized
            entry["vs_unquantized_met"] = entry["vs_unquantized"] <= TARGET_VS_UNQUANTIZED
        if mode != "eager" and eager is not None:
            entry["vs_eager"] = r["ms"] / eager
            entry["no_slower_than_eager_met"] = r["ms"] <= eager
        out.append(entry)
    return out


def table(report):
    lines = ["| model | mode | recipe | ms/step | x faster than references (>= 2) | "
             "x unquantized, same mode (<= 1.3) | this mode / eager (compiled: <= 1) | "
             "first step equal |",
             "|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['mode']} | {r['recipe']} | failed: "
                         f"{r['error'][:120]} | | | | |")
            continue
        if r["impl"] in APART:
            continue
        v = next((v for v in report["verdicts"] if (v["model"], v["mode"], v["recipe"]) ==
                  (r["model"], r["mode"], r["recipe"])), {})
        check = report["checks"].get(f"{r['model']}/{r['recipe']}", {})

        def fmt(key, v=v):
            return f"{v[key]:.2f}" if key in v else "-"

        equal = "-" if r["recipe"] == "bf16" or not check else str(check["loss_bits_equal"])
        lines.append(f"| {r['model']} | {r['mode']} | {r['recipe']} | {r['ms']:.3f} | "
                     f"{fmt('vs_reference')} | {fmt('vs_unquantized')} | {fmt('vs_eager')} | "
                     f"{equal} |")
    for r in report["rows"]:
        if r["impl"] in APART and "error" not in r:
            lines.append(f"| {r['model']} | eager | {r['recipe']} ({APART[r['impl']]}) | "
                         f"{r['ms']:.3f} | | | | |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

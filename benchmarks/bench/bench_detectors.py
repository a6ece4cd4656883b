"""Whole transformers detectors, stock against wired to our deformable-attention slots, on CUDA.

Usage: ``python benchmarks/bench/bench_detectors.py OUT.json [--families rt_detr d_fine ...]
[--modes eager-infer eager-train compiled compiled-ro compiled-train] [--batches 1 8]
[--dtypes fp32 bf16] [--iters 20] [--warmup 5] [--budget SECONDS] [--hub-build DIR]``;
``--table OUT.json`` prints the table of a run.

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
  inference; compiled-train: ``torch.compile(model)`` train step. Dynamo is reset between variants
  (and after a failed row). A compiled-ro step runs as a user runs a CUDA-graphed model:
  ``torch.compiler.cudagraph_mark_step_begin()`` before each invocation, which lets the next
  replay overwrite the step's outputs (they live in the graphs' memory pool), so an output kept
  across steps is cloned first.
Dtypes: fp32, and bf16 autocast (``torch.autocast("cuda", torch.bfloat16)``).

Timing: CUDA events around each step after ``--warmup`` steps, the median of ``--iters``. Before
timing, a wired inference's logits are compared with the stock ones (max abs difference recorded;
the stock logits cloned before the wired step runs).

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

The Hub kernel (``--hub-build DIR``: ``benchmarks/hub/build_msda.py``'s OUT folder, or a snapshot
folder holding ``build/``): a third copy of the row's model, kernelized as a transformers user gets
kernels-community's deformable-detr, from the local build instead of the Hub:
``kernels.use_kernel_mapping`` maps transformers' layer name ``MultiScaleDeformableAttention`` on
the device to a ``kernels.LocalLayerRepository`` of the build, then ``kernels.kernelize`` with the
row's mode (``Mode.INFERENCE`` or ``TRAINING``, ``| TORCH_COMPILE`` in a compiled mode). Where
transformers left its classes unmarked (it takes only some ``kernels`` versions: 5.17 takes
``>=0.16,<0.17``), they are marked for that call as its ``use_kernel_forward_from_hub`` would mark
them. Before timing, every classic site's forward must be the Hub layer's (a silent fallback to
stock is refused) and the copy's logits must match stock's (an inference forward in the row's
autocast, within ``HUB_TOLERANCE`` of the stock logits' magnitude; a train step's backward is run
once, not compared); the copy then takes its turn in the same rounds. A row the Hub kernel does not
serve says why instead: "no Hub kernel" (no site is that layer: D-FINE, DEIMv2, RT-DETRv2), "not
offered" (kernelize refuses the mode: the layer declares no ``can_torch_compile``, or
``has_backward = False``), "refused" (a check above), or "failed" (the error).
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
from benchmarks.bench.turns import interleaved_ms, round_ratios  # noqa: E402
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
#: The layer name transformers marks its classic core module with for ``kernels``' mappings.
HUB_LAYER = "MultiScaleDeformableAttention"
#: Where build_msda.py's OUT folder holds the Hub layout's snapshots.
HUB_SNAPSHOTS = Path("hf-cache", "kernels--kernels-community--deformable-detr", "snapshots")
#: The largest difference of the hub copy's logits from stock's, as a fraction of the stock
#: logits' largest magnitude (the wired copy's differences, recorded, are a few float ulps).
HUB_TOLERANCE = {"fp32": 1e-4, "bf16": 3e-2}


class HubNotTimed(Exception):
    """The row's Hub column is not timed; the message says why ("no Hub kernel", "not offered",
    "refused")."""


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
    # once a step is marked, CUDA-graph trees start a generation only when marked: mark each one
    mark_step = (torch.compiler.cudagraph_mark_step_begin if mode == "compiled-ro"
                 else lambda: None)

    def infer():
        mark_step()
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


def logits_difference(got: torch.Tensor, expected: torch.Tensor) -> float:
    """The largest absolute difference of two logits tensors; equal entries differ by 0,
    Grounding DINO's -inf past the prompt included."""
    got, expected = got.float(), expected.float()
    return torch.where(got == expected, 0.0, got - expected).abs().max().item()


def wired_logits_difference(steps: dict) -> float:
    """The wired inference step's logits against the stock step's. The stock logits are cloned
    before the wired step runs: a reduce-overhead step's outputs live in the CUDA graphs' memory
    pool, which the next step's replay overwrites (reading them after it raises)."""
    stock = steps["stock"]().logits.clone()
    return logits_difference(steps["ours"]().logits, stock)


def hub_build_folder(text: str) -> Path:
    """``--hub-build``: the local layer repository (the folder holding ``build/``) that ``text``
    names, build_msda.py's OUT folder (its one snapshot) or the snapshot folder itself."""
    folder = Path(text)
    if (folder / "build").is_dir():
        return folder
    snapshots = sorted(path.parent for path in (folder / HUB_SNAPSHOTS).glob("*/build"))
    if len(snapshots) != 1:
        raise argparse.ArgumentTypeError(
            f"expected build_msda.py's OUT folder (one {HUB_SNAPSHOTS}/<revision>/build/) or a "
            f"folder holding build/, got {text!r} ({len(snapshots)} snapshots there)")
    return snapshots[0]


def hub_sites(model) -> dict:
    """The model's modules of a class transformers marks with ``HUB_LAYER``: its classic core."""
    return {name: module for name, module in model.named_modules()
            if type(module).__name__ == HUB_LAYER
            and type(module).__module__.startswith("transformers.models.")}


@contextlib.contextmanager
def hub_marked(classes):
    """Each class marked for the block as transformers' ``use_kernel_forward_from_hub(HUB_LAYER)``
    marks it when it takes the installed ``kernels``; yields those it had left unmarked."""
    import kernels

    unmarked = [cls for cls in classes if not hasattr(cls, "kernel_layer_name")]
    for cls in unmarked:
        kernels.replace_kernel_forward_from_hub(cls, HUB_LAYER)
    try:
        yield unmarked
    finally:
        for cls in unmarked:
            del cls.kernel_layer_name, cls.kernel_condition


def kernelize_mode(mode: str):
    """``kernels.Mode`` for a step of ``mode``."""
    from kernels import Mode

    kind = Mode.TRAINING if mode.endswith("train") else Mode.INFERENCE
    return kind | Mode.TORCH_COMPILE if mode.startswith("compiled") else kind


def hub_copy(model, family, mode, dtype, arguments, repository: Path, device: str = "cuda"):
    """(a copy of ``model`` kernelized with the Hub layer of the local ``repository`` for a step of
    ``mode``, the row's hub fields), checked as the module docstring says; raises
    :class:`HubNotTimed` where the Hub kernel does not serve the row."""
    import kernels

    hub = copy.deepcopy(model)
    sites = hub_sites(hub)
    if not sites:
        raise HubNotTimed(f"no Hub kernel: its sites call {family.core.split(':')[1]}, which no "
                          "kernel mapping names")
    repo = kernels.LocalLayerRepository(repository, layer_name=HUB_LAYER)
    layer = repo.load()
    declares = (f"has_backward={getattr(layer, 'has_backward', True)}, "
                f"can_torch_compile={getattr(layer, 'can_torch_compile', False)}")
    with kernels.use_kernel_mapping({HUB_LAYER: {device: repo}}, inherit_mapping=False), \
            hub_marked({type(module) for module in sites.values()}) as unmarked:
        try:
            kernels.kernelize(hub, mode=kernelize_mode(mode), device=device,
                              use_fallback=kernels.KernelizeFallback.NO_LAYER)
        except ValueError as exc:
            raise HubNotTimed(f"not offered: kernelize: {exc} (the layer declares {declares})") \
                from exc
    stock_left = [name for name, module in sites.items()
                  if getattr(module.forward, "__func__", None) is not layer.forward]
    if stock_left:
        raise HubNotTimed(f"refused: kernelize left {len(stock_left)} of {len(sites)} sites' "
                          f"forward not the Hub layer's ({stock_left[0]}, ...)")
    outputs = {name: make_step(copy_, "eager-infer", arguments, dtype)()
               for name, copy_ in (("stock", model), ("hub", hub))}
    error = logits_difference(outputs["hub"].logits, outputs["stock"].logits)
    stock_logits = outputs["stock"].logits.float()
    scale = stock_logits[stock_logits.isfinite()].abs().max().item()
    if not error <= HUB_TOLERANCE[dtype] * scale:
        raise HubNotTimed(f"refused: its logits differ from stock's by {error:.3g} (tolerance "
                          f"{HUB_TOLERANCE[dtype]:g} x {scale:.3g})")
    if mode.endswith("train"):
        make_step(hub, mode, arguments, dtype)()
    return hub, {"hub": "timed", "hub_sites": len(sites),
                 "hub_marked_by": "bench" if unmarked else "transformers",
                 "hub_max_abs_logits_diff": error}


def measure_row(model, family, mode, batch, dtype, args):
    arguments = inputs(DETECTOR_FAMILIES[family], batch, "cuda", seed=batch)
    row = {"family": family, "mode": mode, "batch": batch, "dtype": dtype}
    torch._dynamo.reset()
    hub = None
    if args.hub_build is not None:
        try:
            hub, fields = hub_copy(model, DETECTOR_FAMILIES[family], mode, dtype, arguments,
                                   args.hub_build)
            row.update(fields)
        except HubNotTimed as exc:
            row["hub"] = str(exc)
        except Exception as exc:  # noqa: BLE001 - the Hub column fails, stock and ours go on
            row["hub"] = f"failed: {type(exc).__name__}: {exc}"
    wired = copy.deepcopy(model)
    row["sites"] = len(wire_deformable_attention(wired).wired)
    steps = {"stock": make_step(model, mode, arguments, dtype),
             "ours": make_step(wired, mode, arguments, dtype)}
    if hub is not None:
        steps["hub"] = make_step(hub, mode, arguments, dtype)
    if not mode.endswith("train"):
        row["max_abs_logits_diff"] = wired_logits_difference(steps)
    times = interleaved_ms(steps, args.rounds, args.iters, args.warmup)
    speedup, spread = round_ratios(times, "stock", "ours")
    row.update(stock_ms=statistics.median(times["stock"]), ours_ms=statistics.median(times["ours"]),
               speedup=speedup, spread=spread)
    if hub is not None:
        stock_over_hub, stock_over_hub_spread = round_ratios(times, "stock", "hub")
        hub_over_ours, hub_over_ours_spread = round_ratios(times, "hub", "ours")
        row.update(hub_ms=statistics.median(times["hub"]), stock_over_hub=stock_over_hub,
                   stock_over_hub_spread=stock_over_hub_spread, hub_over_ours=hub_over_ours,
                   hub_over_ours_spread=hub_over_ours_spread)
    if args.profile:
        gpu = {name: kernel_ms(step) for name, step in steps.items()}
        row.update(gpu_ms_stock=gpu["stock"], gpu_ms_ours=gpu["ours"],
                   device_speedup=gpu["stock"] / gpu["ours"] if gpu["ours"] else None)
        if hub is not None:
            row["gpu_ms_hub"] = gpu["hub"]
        if not mode.startswith("compiled"):
            a_stock, a_ours = attention_ms(model, family, mode, arguments, dtype)
            ceiling = row["stock_ms"] / max(row["stock_ms"] - a_stock + a_ours, 1e-9)
            row.update(attn_ms_stock=a_stock, attn_ms_ours=a_ours,
                       attn_share=a_stock / gpu["stock"] if gpu["stock"] else None,
                       ceiling=ceiling, target=1 + 0.8 * (ceiling - 1))
    del steps, wired, hub
    torch._dynamo.reset()
    return row


def environment(hub_build: Path | None = None) -> dict:
    import transformers
    import triton

    found = {"python": platform.python_version(), "torch": torch.__version__,
             "cuda": torch.version.cuda, "triton": triton.__version__,
             "transformers": transformers.__version__,
             "gpu": torch.cuda.get_device_name(), "written": time.strftime("%Y-%m-%d %H:%M:%S")}
    if hub_build is not None:
        import kernels
        from transformers.utils.import_utils import is_kernels_available

        # build_msda.py's provenance (source commit, flags) sits in its OUT folder
        info = (hub_build.parents[3] / "build.json"
                if hub_build.parent.match(str(HUB_SNAPSHOTS)) else None)
        found.update(kernels=kernels.__version__, hub_build=str(hub_build),
                     hub_build_info=json.loads(info.read_text()) if info and info.is_file()
                     else None, transformers_takes_kernels=is_kernels_available())
    return found


def hub_cells(row) -> str:
    """The Hub columns' cells: its time and both ratios with their rounds' spread, or why not."""
    if "hub_ms" not in row:
        return f" {row.get('hub', 'not run')} | | |"
    ratios = [f" {row[name]:.2f}x ({row[name + '_spread'][0]:.2f}-{row[name + '_spread'][1]:.2f}) |"
              for name in ("stock_over_hub", "hub_over_ours")]
    return f" {row['hub_ms']:.2f} |" + "".join(ratios)


def table(rows) -> str:
    """The markdown table docs/performance.md carries ("Whole detectors"), with the Hub columns
    where the run had ``--hub-build``."""
    hub = any("hub" in row for row in rows)
    header = ("| family | mode | batch | dtype | stock ms | ours ms | "
              "stock/ours (rounds' spread) | device ms, stock -> ours | device stock/ours | "
              "attention ms, stock -> ours | attention share | ceiling | verdict |")
    columns = 13
    if hub:
        header += " hub ms | stock/hub (spread) | hub/ours (spread) |"
        columns += 3
    lines = [header, "|" + "---|" * columns]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['family']} | {row['mode']} | {row['batch']} | {row['dtype']} | "
                         f"failed: {row['error'][:80]} |" + "|" * (columns - 5))
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
            f"{'' if ceiling is None else f'{ceiling:.2f}x'} | {verdict} |"
            + (hub_cells(row) if hub else ""))
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
                        help="seconds; a row starts only if the longest row so far still fits "
                             "(a compiled row compiles two models: about 100 s on an H200), the "
                             "rows left are listed as not measured")
    parser.add_argument("--hub-build", type=hub_build_folder, default=None, metavar="DIR",
                        help="time kernels-community's deformable-detr, kernelized from this "
                             "local build (benchmarks/hub/build_msda.py's OUT), beside ours")
    args = parser.parse_args(argv)
    if args.table:
        print(table(json.loads(args.out.read_text())["rows"]))
        return
    # without --hub-build, the report is what it was before the option
    arguments = {name: value for name, value in vars(args).items()
                 if name != "hub_build" or value is not None}
    report = {"environment": environment(args.hub_build),
              "arguments": arguments | {"out": str(args.out)},
              "rows": [], "not_measured": []}
    started, longest_row = time.monotonic(), 0.0
    for family in args.families:
        model = build(family, "cuda")
        for mode in args.modes:
            for batch in args.batches:
                for dtype in args.dtypes:
                    row_started = time.monotonic()
                    if row_started - started + longest_row > args.budget:
                        report["not_measured"].append([family, mode, batch, dtype])
                        continue
                    try:
                        row = measure_row(model, family, mode, batch, dtype, args)
                    except Exception as exc:  # noqa: BLE001 - a failed row is reported
                        row = {"family": family, "mode": mode, "batch": batch, "dtype": dtype,
                               "error": f"{type(exc).__name__}: {exc}"}
                        # its compiled models and CUDA-graph pool go before the next row or build
                        torch._dynamo.reset()
                    longest_row = max(longest_row, time.monotonic() - row_started)
                    print(json.dumps(row), flush=True)
                    report["rows"].append(row)
                    args.out.write_text(json.dumps(report, indent=2, default=str))
        del model
        torch.cuda.empty_cache()
    args.out.write_text(json.dumps(report, indent=2, default=str))  # the rows left unmeasured too
    print(table(report["rows"]))
    if report["not_measured"]:
        print(f"not measured (budget): {report['not_measured']}")


if __name__ == "__main__":
    main()

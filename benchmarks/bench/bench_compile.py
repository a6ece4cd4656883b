"""torch.compile against eager, side by side, on a CUDA GPU: the slots as PyTorch operators.

Usage: ``python benchmarks/bench/bench_compile.py OUT.json [--rounds 15] [--quick | --mlp-only]
[--any-device]``

Rows (issue "The kernels are PyTorch operators"): deformable attention (Deformable-DETR's encoder
and decoder, RT-DETR's decoder, the ragged RT-DETRv2 / D-FINE decoders), fake quantization
(``fake_quant_fp8`` dynamic 16384x1024 and ``fake_quant_int8_per_channel`` 4800x256 in bfloat16,
then every other fake-quant slot at both sizes), forward and forward+backward, and the FP8 ViT-L
MLP (``FinalizedMLP``, 16384 tokens) beside bf16 ``nn.Linear``-GELU-``nn.Linear`` eager and
compiled, and torchao's float8 dynamic-activation rowwise path compiled where torchao imports.

For each row, first the bits: the compiled call's output (and gradients) equal the eager call's
on fresh inputs, under deterministic algorithms (else the row says so and is not timed).
Then, timed with CUDA events:
- eager and default-mode compiled as a model runs them: windows of calls queued back to back,
  interleaved, median over rounds of compiled / eager within a round; host time a call from the
  same windows (``bench_ms_deform_attn.interleaved_eager``);
- ``mode="reduce-overhead"`` replays against the eager call captured in a ``torch.cuda.graph``
  (GPU work only);
- ``dynamic=True`` at five input sizes: how many times Dynamo compiled;
- the floor (JSON ``floor``): ``torch.neg`` and an opaque custom op with a fake kernel and a
  registered autograd, on 1,024 elements, measured as the rows are: what torch.compile's layers
  cost a call that does no work, beside which the rows' compiled host time reads;
- each slot's own floor (JSON ``slot_floors``; ``compile_floor.py``): the implementation a
  compiled call of the slot traces, in a bare ``triton_op`` no registry reaches, compiled and
  timed beside the compiled slot call in the same windows (forward on the slot's first case;
  forward+backward too for deformable attention): compiled slot / floor, host time and GPU time.
Targets: compiled within 1.05x of eager, reduce-overhead within 1.05x of the captured eager call,
at most two compiles over the five sizes; a compiled slot call's host time within 1.2x of its
floor's; the ViT-L MLP compiled >= 1.4x bf16 compiled and ahead of torchao compiled. Writes the
raw numbers as JSON and prints a markdown table last; without CUDA, a JSON saying why nothing was
measured, and the reason on stderr.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.bench.bench_ms_deform_attn import interleaved_eager, time_graph_ms, time_ms  # noqa: E402
from benchmarks.bench.compile_floor import floor_op as slot_floor_op  # noqa: E402
from benchmarks.bench.compile_targets import (  # noqa: E402
    MAX_COMPILES,
    MLP_COMPILED_OVER_BF16,
    SLOT_OVER_FLOOR_HOST,
)
from conformance.catalogue import CATALOGUE  # noqa: E402
from conformance.inputs.shapesets import load  # noqa: E402
from conformance.running.cells import CellPlan, make_inputs  # noqa: E402
from conformance.running.determinism import deterministic_algorithms  # noqa: E402
from libreyolo.kernels import ops, registry, traced  # noqa: E402
from libreyolo.kernels.providers import IN_TREE  # noqa: E402

MSDA_ROWS = (("ms_deform_attn", "deformable_detr_encoder"),
             ("ms_deform_attn", "deformable_detr_decoder"),
             ("ms_deform_attn", "rt_detr_decoder"),
             ("ms_deform_attn_ragged", "rt_detrv2_decoder"),
             ("ms_deform_attn_ragged", "d_fine_decoder"))
#: --quick's: a decoder-sized call of each slot, where the host time a compiled call adds shows
QUICK_MSDA_ROWS = (("ms_deform_attn", "rt_detr_decoder"),
                   ("ms_deform_attn_ragged", "rt_detrv2_decoder"))
#: (slot, keyword arguments): the headline rows first, then every other fake-quant slot.
FAKE_QUANT = (("fake_quant_fp8", {}), ("fake_quant_int8_per_channel", {}),
              ("fake_quant_int8_affine", {}), ("fake_quant_int_grouped", {}),
              ("fake_quant_nvfp4_weight", {}), ("fake_quant_nvfp4_dynamic", {}),
              ("fake_quant_mxfp4_weight", {}), ("fake_quant_mxfp4_dynamic", {}),
              ("fake_quant_mxfp8_weight", {}), ("fake_quant_mxfp8_dynamic", {}))
SIZES = ((16384, 1024), (4800, 256))
DYNAMIC_ROWS = (1024, 2048, 3072, 4096, 6144)
#: Elements of the floor rows' input: small enough that a call is its host time and one launch.
FLOOR_ELEMENTS = 1024


@torch.library.custom_op("libreyolo_bench::neg", mutates_args=())
def floor_op(x: torch.Tensor) -> torch.Tensor:
    """The floor of a compiled slot call: an op opaque to inductor, with a fake kernel and a
    registered autograd as every slot's operator has, doing almost nothing (a negation). What
    torch.compile's layers cost around it is the least a compiled slot call can cost."""
    return torch.neg(x)


@floor_op.register_fake
def _(x):
    return torch.empty_like(x)


floor_op.register_autograd(lambda ctx, grad: torch.neg(grad))


def floor_rows(rounds: int) -> list[dict]:
    """torch.neg (which inductor compiles) and ``floor_op`` (which it cannot see into) on a tiny
    tensor, measured as every row is: what compiled / eager is when the call does no work."""
    x = torch.randn(FLOOR_ELEMENTS, device="cuda", requires_grad=True)
    return [{"slot": "floor", "case": f"{what}, {FLOOR_ELEMENTS} float32",
             **measure(f"floor {what}", fn, (x,), {}, rounds, backward)}
            for what, fn in (("aten neg", torch.neg), ("custom op", floor_op))
            for backward in (False, True)]


def msda_inputs(slot: str, case_name: str):
    spec = CATALOGUE[slot]
    case = next(c for c in load(spec.shapes) if c.name == case_name)
    plan = CellPlan(slot, "triton", "cuda", torch.float32, case, "contiguous", 7)
    inputs = make_inputs(spec, plan).to("cuda")
    args = list(inputs.args)
    for i in inputs.grad_args:
        args[i] = args[i].detach().requires_grad_()
    if not isinstance(args[1], torch.Tensor):  # level sizes as the module passes them
        args[1] = torch.tensor(args[1], dtype=torch.int64, device="cuda")
    return tuple(args), inputs.kwargs


def fake_quant_inputs(slot: str, rows: int, cols: int, gen: torch.Generator):
    x = (torch.randn(rows, cols, generator=gen) * 3).to("cuda", torch.bfloat16)
    x.requires_grad_()
    if slot == "fake_quant_int8_per_channel":
        return (x, x.detach().float().abs().amax(1) / 127, 0), {}
    if slot == "fake_quant_int8_affine":
        return (x, x.detach().float().abs().amax() / 127, 3), {}
    if slot == "fake_quant_int_grouped":
        return (x, 4, 128), {}
    return (x,), {}


def call_of(slot: str):
    portable = CATALOGUE[slot].slot.load_portable()
    entry = getattr(ops, slot)

    def call(*args, **kwargs):
        out = entry(*args, **kwargs)
        return portable(*args, **kwargs) if out is None else out

    return call


def with_backward(fn):
    def step(*args, **kwargs):
        out = fn(*args, **kwargs)
        leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        return torch.autograd.grad(out, leaves, torch.ones_like(out))

    return step


def _outputs(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def _bits_equal(a, b) -> bool:
    a, b = _outputs(a), _outputs(b)
    views = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return len(a) == len(b) and all(
        x.shape == y.shape and torch.equal(x.detach().contiguous().view(views[x.element_size()]),
                                           y.detach().contiguous().view(views[y.element_size()]))
        for x, y in zip(a, b, strict=True))


def measure(name: str, fn, args, kwargs, rounds: int, backward: bool) -> dict:
    """``_measure``, with a row's failure recorded in the row instead of ending the run."""
    try:
        return _measure(name, fn, args, kwargs, rounds, backward)
    except Exception as exc:  # noqa: BLE001 - a benchmark row that failed says so
        return {"row": name, "backward": backward, "same_bits": False,
                "error": f"{type(exc).__name__}: {exc}"[:500]}


def _measure(name: str, fn, args, kwargs, rounds: int, backward: bool) -> dict:
    """Bits, eager vs compiled windows, reduce-overhead vs a captured eager call."""
    if not backward:  # an inference call: no autograd graph is built
        args = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
    step = with_backward(fn) if backward else fn
    torch._dynamo.reset()
    compiled = torch.compile(step)
    # bits under deterministic algorithms: MSDA's value gradient is summed by atomics, which
    # differ run to run in the default mode (eager against eager); timed in the default mode
    with deterministic_algorithms():
        eager_out, compiled_out = step(*args, **kwargs), compiled(*args, **kwargs)
    row = {"row": name, "backward": backward, "same_bits": _bits_equal(eager_out, compiled_out)}
    if not row["same_bits"]:
        return row
    windows = interleaved_eager({"eager": lambda: step(*args, **kwargs),
                                 "compiled": lambda: compiled(*args, **kwargs)}, rounds)
    ratios = [c / e for c, e in zip(windows["compiled"]["eager_us"],
                                    windows["eager"]["eager_us"], strict=True)]
    row.update(eager_us=statistics.median(windows["eager"]["eager_us"]),
               compiled_us=statistics.median(windows["compiled"]["eager_us"]),
               ratio=statistics.median(ratios),
               eager_host_us=statistics.median(windows["eager"]["host_us"]),
               compiled_host_us=statistics.median(windows["compiled"]["host_us"]))
    if not backward:  # graphs: the forward (a captured backward needs static leaves' grads)
        torch._dynamo.reset()
        replayed = torch.compile(fn, mode="reduce-overhead")
        for _ in range(3):
            replayed_out = replayed(*args, **kwargs)
        row["reduce_overhead_same_bits"] = _bits_equal(replayed_out, fn(*args, **kwargs))
        graph = statistics.median(time_graph_ms(lambda: fn(*args, **kwargs), 20))
        ro = statistics.median(_back_to_back_ms(lambda: replayed(*args, **kwargs), 20))
        row.update(graph_ms=graph, reduce_overhead_ms=ro, reduce_overhead_ratio=ro / graph)
    return row


def slot_floor_rows(slot: str, case: str, args, kwargs, rounds: int, backward: bool) -> dict:
    """``_slot_floor``, with a row's failure recorded in the row instead of ending the run."""
    row = {"slot": slot, "case": case, "backward": backward}
    try:
        return {**row, **_slot_floor(slot, args, kwargs, rounds, backward)}
    except Exception as exc:  # noqa: BLE001 - a benchmark row that failed says so
        return {**row, "error": f"{type(exc).__name__}: {exc}"[:500]}


def _slot_floor(slot: str, args, kwargs, rounds: int, backward: bool) -> dict:
    """The compiled slot call beside its floor (``compile_floor.floor_op`` of the implementation
    the registry chooses for these inputs, chosen here, once), both compiled as ``_measure``
    compiles the slot call and timed in the same interleaved windows."""
    inference = tuple(a.detach() if isinstance(a, torch.Tensor) else a for a in args)
    choice = registry.choose(slot, inference, kwargs)
    if choice is None or not (choice.impl.traceable and choice.impl.origin == IN_TREE):
        return {"skipped": "no in-tree traceable implementation takes this input"
                if choice is None else f"{choice.impl.name} ({choice.impl.origin}) is not an "
                "in-tree traceable implementation: a compiled call keeps the opaque operator"}
    floor = slot_floor_op(slot, choice.impl)
    if not backward:
        args = inference
    step, floor_step = call_of(slot), floor
    if backward:
        step, floor_step = with_backward(step), with_backward(floor_step)
    torch._dynamo.reset()
    compiled, floored = torch.compile(step), torch.compile(floor_step)
    slot_out, floor_out = compiled(*args, **kwargs), floored(*args, **kwargs)
    row = {"implementation": choice.impl.name,
           "traced": {k: v for k, v in traced.decisions().items()
                      if k in (slot, f"{slot}_backward")},
           "same_bits": _bits_equal(slot_out, floor_out)}
    if not row["same_bits"]:  # a backward summed by atomics differs call to call
        row["max_abs_difference"] = max(
            float((a.float() - b.float()).abs().max())
            for a, b in zip(_outputs(slot_out), _outputs(floor_out), strict=True))
    windows = interleaved_eager({"slot": lambda: compiled(*args, **kwargs),
                                 "floor": lambda: floored(*args, **kwargs)}, rounds)
    slot_w, floor_w = windows["slot"], windows["floor"]
    row.update(slot_us=statistics.median(slot_w["eager_us"]),
               floor_us=statistics.median(floor_w["eager_us"]),
               ratio=statistics.median(a / b for a, b in zip(
                   slot_w["eager_us"], floor_w["eager_us"], strict=True)),
               slot_host_us=statistics.median(slot_w["host_us"]),
               floor_host_us=statistics.median(floor_w["host_us"]),
               host_ratio=statistics.median(a / b for a, b in zip(
                   slot_w["host_us"], floor_w["host_us"], strict=True)))
    return row


def _back_to_back_ms(step, iters: int) -> list[float]:
    """ms a call of ``step`` (a reduce-overhead function: each call replays its graph), as the
    mean of ``GRAPH_REPLAYS`` calls back to back, as ``time_graph_ms`` times replays."""
    from benchmarks.bench.bench_ms_deform_attn import GRAPH_REPLAYS, time_ms

    def calls():
        for _ in range(GRAPH_REPLAYS):
            step()

    return [t / GRAPH_REPLAYS for t in time_ms(calls, iters, warmup=1)]


def recompiles(fn, make, sizes) -> int:
    """How many graphs ``torch.compile(dynamic=True)`` made over inputs of ``sizes``."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(fn, dynamic=True)
    for size in sizes:
        args, kwargs = make(size)
        compiled(*args, **kwargs)
    return int(counters["stats"]["unique_graphs"])


def mlp_rows(rounds: int) -> list[dict]:
    """The FP8 ViT-L MLP: FinalizedMLP eager and compiled against bf16 eager and compiled, and
    torchao's float8 dynamic rowwise path compiled when torchao imports."""
    from libreyolo.nn.finalized import FinalizedLinear, FinalizedMLP

    torch.manual_seed(0)
    fc1, fc2 = torch.nn.Linear(1024, 4096), torch.nn.Linear(4096, 1024)
    bf16 = torch.nn.Sequential(fc1, torch.nn.GELU(), fc2).to("cuda", torch.bfloat16).eval()
    fp8 = FinalizedMLP(FinalizedLinear.from_float(fc1, "fp8", "fp8_dynamic"),
                       FinalizedLinear.from_float(fc2, "fp8", "fp8_dynamic")).to("cuda").eval()
    x = torch.randn(16384, 1024, device="cuda", dtype=torch.bfloat16)
    models = {"bf16 eager": bf16, "fp8 eager": fp8}
    with torch.no_grad():
        for mode in ("default", "reduce-overhead"):
            torch._dynamo.reset()
            models[f"bf16 compiled ({mode})"] = torch.compile(bf16, mode=mode)
            models[f"fp8 compiled ({mode})"] = torch.compile(fp8, mode=mode)
        torchao = _torchao_model(fc1, fc2)
        if isinstance(torchao, str):
            note = torchao
        else:
            note = None
            for mode in ("default", "reduce-overhead"):
                models[f"torchao compiled ({mode})"] = torch.compile(torchao, mode=mode)
        same = _bits_equal(fp8(x), models["fp8 compiled (default)"](x))
        for model in models.values():
            for _ in range(3):
                model(x)
        windows = interleaved_eager({k: (lambda m=m: m(x)) for k, m in models.items()}, rounds)
        # each model alone as well, one call between two events after a sync: at 6b93114 and
        # b89ad8a the interleaved windows read the fp8 MLP 30% slower than bench_fp8 did, with
        # the same kernels (profile_compile.py); the two methods side by side tell which
        alone = {k: 1e3 * statistics.median(time_ms(lambda m=m: m(x), 20))
                 for k, m in models.items()}
    out = {k: statistics.median(v["eager_us"]) for k, v in windows.items()}
    return [{"row": "ViT-L MLP 16384 tokens", "fp8_compiled_same_bits_as_eager": same,
             "torchao": note, "us": out, "us_alone": alone,
             "fp8_over_bf16_eager": out["bf16 eager"] / out["fp8 eager"],
             "fp8_over_bf16_compiled": out["bf16 compiled (default)"] /
             out["fp8 compiled (default)"],
             "fp8_over_bf16_reduce_overhead": out["bf16 compiled (reduce-overhead)"] /
             out["fp8 compiled (reduce-overhead)"],
             "fp8_over_torchao_compiled": (out["torchao compiled (default)"] /
                                           out["fp8 compiled (default)"]) if note is None
             else None}]


def _torchao_model(fc1, fc2):
    try:
        from torchao.quantization import (
            Float8DynamicActivationFloat8WeightConfig,
            PerRow,
            quantize_,
        )
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return f"torchao unavailable: {type(exc).__name__}: {exc}"
    import copy

    model = torch.nn.Sequential(copy.deepcopy(fc1), torch.nn.GELU(), copy.deepcopy(fc2))
    model = model.to("cuda", torch.bfloat16).eval()
    quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()))
    return model


def engage_fp8_policy_anywhere() -> None:
    """``--any-device``: the FP8 policy engages on this GPU in every region it lists for any
    device (``fp8_policy.toml`` holds each measured card's own), so the fused path's mechanics,
    the folded ViT-L MLP's included, can be probed on a GPU where they would not run; a
    benchmark's switch, never the library's."""
    import functools

    from libreyolo.kernels.quant.execute import fp8_linear

    every = tuple(region for regions in fp8_linear.policy().values() for region in regions)
    fp8_linear._device_regions = functools.cache(lambda index: every)
    fp8_linear.reload_policy()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--quick", action="store_true",
                        help="the headline rows only: one decoder call of each "
                             "deformable-attention slot, no other fake-quant slots")
    parser.add_argument("--mlp-only", action="store_true",
                        help="the FP8 ViT-L MLP rows alone (against bf16 and torchao, eager and "
                             "compiled): a card's FP8 policy, just measured, in one short run")
    parser.add_argument("--any-device", action="store_true",
                        help="the FP8 policy engages on this GPU in every region fp8_policy.toml "
                             "lists for any device (the MLP rows then say how the fused path "
                             "compiles there, not whether FP8 is faster there)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        reason = "no CUDA device: every row times compiled Triton kernels on the GPU"
        print(f"bench_compile: skipped, {reason}", file=sys.stderr)
        Path(args.out).write_text(json.dumps({"meta": {"torch": torch.__version__},
                                              "skipped": reason}, indent=1) + "\n")
        return
    if args.any_device:
        engage_fp8_policy_anywhere()
    gen = torch.Generator().manual_seed(0)
    meta = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
            "python": platform.python_version(), "fp8_policy_forced": args.any_device}
    rows, floors, mlp, floor = [], [], [], []  # floors: each slot's, on its first case
    started = time.monotonic()

    def keep(kept: list, row: dict) -> None:
        """``row`` into ``kept``, said on stderr and written to OUT at once: a run cut short
        (a device call's time limit) still returns every row it measured."""
        kept.append(row)
        print(f"[{time.monotonic() - started:.0f} s] {row.get('slot', row.get('row', ''))} "
              f"{row.get('case', '')} {'fwd+bwd' if row.get('backward') else 'fwd'}",
              file=sys.stderr, flush=True)
        Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows, "mlp": mlp,
                                              "floor": floor, "slot_floors": floors}, indent=1,
                                             default=str) + "\n")

    msda = () if args.mlp_only else QUICK_MSDA_ROWS if args.quick else MSDA_ROWS
    for slot, case in msda:
        inputs, kwargs = msda_inputs(slot, case)
        for backward in (False, True):
            keep(rows, {"slot": slot, "case": case, **measure(
                f"{slot} {case}", call_of(slot), inputs, kwargs, args.rounds, backward)})
            if all(f["slot"] != slot or f["backward"] != backward for f in floors):
                keep(floors, slot_floor_rows(slot, case, inputs, kwargs, args.rounds,
                                             backward))
    fake_quant = () if args.mlp_only else FAKE_QUANT[:2] if args.quick else FAKE_QUANT
    for slot, _ in fake_quant:
        for rows_, cols in SIZES if slot not in ("fake_quant_fp8", "fake_quant_int8_per_channel") \
                else (SIZES[0] if slot == "fake_quant_fp8" else SIZES[1],):
            inputs, kwargs = fake_quant_inputs(slot, rows_, cols, gen)
            for backward in (False, True):
                keep(rows, {"slot": slot, "case": f"{rows_}x{cols} bf16", **measure(
                    f"{slot} {rows_}x{cols}", call_of(slot), inputs, kwargs, args.rounds,
                    backward)})
            if all(f["slot"] != slot for f in floors):  # the forward: fake quant's host time
                keep(floors, slot_floor_rows(slot, f"{rows_}x{cols} bf16", inputs, kwargs,
                                             args.rounds, False))
    for slot in () if args.mlp_only else ("fake_quant_fp8", "fake_quant_mxfp8_dynamic"):
        keep(rows, {"slot": slot, "case": "dynamic=True", "compiles": recompiles(
            call_of(slot), lambda n, s=slot: fake_quant_inputs(s, n, 1024, gen),
            DYNAMIC_ROWS), "sizes": list(DYNAMIC_ROWS)})
    for row in mlp_rows(args.rounds):
        keep(mlp, row)
    for row in () if args.mlp_only else floor_rows(args.rounds):
        keep(floor, row)
    print("| row | fwd/bwd | same bits | eager µs | compiled µs | compiled/eager | host µs eager"
          " / compiled | graph ms | reduce-overhead ms | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows + floor:
        if "compiles" in r:
            print(f"| {r['slot']} dynamic=True over {len(r['sizes'])} sizes | | | | | "
                  f"{r['compiles']} compiles (target <= {MAX_COMPILES}) | | | | |")
            continue
        if not r["same_bits"]:
            print(f"| {r['row']} | {'fwd+bwd' if r['backward'] else 'fwd'} | **NO** "
                  f"{r.get('error', '')[:80]} | | | | | | | |")
            continue
        graph = (f"{r['graph_ms']:.3f} | {r['reduce_overhead_ms']:.3f} | "
                 f"{r['reduce_overhead_ratio']:.2f}x"
                 f"{'' if r['reduce_overhead_same_bits'] else ' (replay bits differ)'}"
                 ) if "graph_ms" in r else " | | "
        print(f"| {r['row']} | {'fwd+bwd' if r['backward'] else 'fwd'} | yes | "
              f"{r['eager_us']:.1f} | {r['compiled_us']:.1f} | {r['ratio']:.3f}x | "
              f"{r['eager_host_us']:.1f} / {r['compiled_host_us']:.1f} | {graph} |")
    m = mlp[0]
    print(f"\nViT-L MLP: same bits {m['fp8_compiled_same_bits_as_eager']}; fp8 over bf16 eager "
          f"{m['fp8_over_bf16_eager']:.2f}x, compiled {m['fp8_over_bf16_compiled']:.2f}x "
          f"(target {MLP_COMPILED_OVER_BF16}x), "
          f"reduce-overhead {m['fp8_over_bf16_reduce_overhead']:.2f}x; "
          f"over torchao compiled: {m['fp8_over_torchao_compiled'] or m['torchao']}")
    print("interleaved windows, µs a call:", {k: round(v, 1) for k, v in m["us"].items()})
    print("alone, µs a call:", {k: round(v, 1) for k, v in m["us_alone"].items()})
    print_slot_floors(floors)


def print_slot_floors(floors: list[dict]) -> None:
    """The compiled slot calls beside their floors, as a markdown table."""
    print(f"\n| slot | case | fwd/bwd | implementation (traced as) | same bits | µs slot / floor "
          f"| host µs slot / floor | host ratio (target <= {SLOT_OVER_FLOOR_HOST}x) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in floors:
        head = f"| {r['slot']} | {r['case']} | {'fwd+bwd' if r['backward'] else 'fwd'} |"
        if "slot_us" not in r:
            print(f"{head} {r.get('skipped') or r.get('error', '')[:120]} | | | | |")
            continue
        bits = "yes" if r["same_bits"] else f"no (max diff {r['max_abs_difference']:.3g})"
        print(f"{head} {r['implementation']} ({'; '.join(r['traced'].values())}) | {bits} | "
              f"{r['slot_us']:.1f} / {r['floor_us']:.1f} ({r['ratio']:.3f}x) | "
              f"{r['slot_host_us']:.1f} / {r['floor_host_us']:.1f} | {r['host_ratio']:.3f}x"
              f"{'' if r['host_ratio'] <= SLOT_OVER_FLOOR_HOST else ' **missed**'} |")


if __name__ == "__main__":
    main()

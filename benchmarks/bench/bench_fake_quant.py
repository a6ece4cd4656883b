"""Benchmark the Triton fake-quant kernels against a device copy and the reference (H200).

    python benchmarks/bench/bench_fake_quant.py RESULTS.json [--repeats 100] [--rounds 3]

For every fake-quant configuration, at 256M float32 elements and at a 4096x4096 weight:
1. verifies the kernel's bits against the reference on fresh random data (a failure is recorded
   and the row is marked, never hidden);
2. counts kernel launches per call with torch.profiler: of the kernel path alone, and of the
   whole slot call (the shared validators launch small kernels on user-given scales);
3. times the kernel, a same-size device copy and the reference with CUDA events, median of
   ``--repeats`` runs (the reference: fewer), with L2 flushed before every run and a GPU sleep
   that covers the host's launch latency (so the events time the GPU's work), and the
   kernel's quartiles kept, so a row disturbed by something else on the machine shows; the whole
   sweep runs ``--rounds`` times and each row reports the round with the median kernel time,
   with every round's median beside it (one round's medians moved by up to 20% between calls);
4. reports time, achieved bandwidth (bytes read + written, formula in ``bytes_moved``), the
   ratio to the copy's bandwidth, and the speedup over the reference.
Raw results go to the JSON path; a markdown table goes to stdout.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import triton

from libreyolo.kernels import registered
from libreyolo.kernels.quant.simulate import launch
from libreyolo.kernels.quant.simulate.plan import (
    GPU_TILE,
    MAX_PARTIALS,
    PLANNERS,
    TENSOR_PARTIALS,
    AmaxFrom,
    Plan,
    ScaleRule,
)
from libreyolo.quant import fake_quant as reference

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.bench.progress import each  # noqa: E402

SIZES = {"256M": (65536, 4096), "4096x4096": (4096, 4096)}
L2_FLUSH_BYTES = 256 * 2**20  # several times the H200's 50 MB L2
REFERENCE_REPEATS = 3
LAUNCH_LEAD_CYCLES = 1_000_000  # about 0.5 ms at the H200's 1.98 GHz boost clock

# (label, slot, scale kind, extra args, kwargs, target fraction of the copy's bandwidth)
CONFIGS = (
    ("int8 per-channel", "fake_quant_int8_per_channel", "channel", (), {}, 0.92),
    ("int8 affine", "fake_quant_int8_affine", "tensor", (-3,), {}, 0.92),
    ("fp8 e4m3 per-tensor", "fake_quant_fp8", "tensor", (), {"fmt": "e4m3"}, 0.92),
    ("fp8 e5m2 per-tensor", "fake_quant_fp8", "tensor", (), {"fmt": "e5m2"}, 0.92),
    ("fp8 e4m3 per-channel", "fake_quant_fp8", "channel", (), {"fmt": "e4m3", "axis": 0}, 0.92),
    ("fp8 e4m3 dynamic", "fake_quant_fp8", None, (), {"fmt": "e4m3"}, 0.60),
    ("int4 grouped g128", "fake_quant_int_grouped", None, (4, 128), {}, 0.80),
    ("nvfp4 weight", "fake_quant_nvfp4_weight", None, (), {}, 0.80),
    # a calibrated weight: the tensor amax is given, so no amax pass (one launch, one read)
    ("nvfp4 weight, global_amax given", "fake_quant_nvfp4_weight", "amax", (), {}, 0.80),
    ("nvfp4 dynamic", "fake_quant_nvfp4_dynamic", None, (), {}, 0.60),
    ("mxfp4 weight", "fake_quant_mxfp4_weight", None, (), {}, 0.80),
    ("mxfp4 dynamic", "fake_quant_mxfp4_dynamic", None, (), {}, 0.80),
    ("mxfp8 weight", "fake_quant_mxfp8_weight", None, (), {}, 0.80),
    ("mxfp8 dynamic", "fake_quant_mxfp8_dynamic", None, (), {}, 0.80),
)
SPEEDUP_TARGET = 4.0


@dataclass
class Row:
    config: str
    size: str
    bits_equal: bool
    launches_kernel_path: int
    launches_slot_call: int
    kernel_ms: float
    kernel_ms_quartiles: tuple[float, float, float]
    kernel_ms_rounds: list[float]
    copy_ms: float
    reference_ms: float
    bytes_moved: int
    kernel_tb_s: float
    copy_tb_s: float
    fraction_of_copy: float
    target_fraction: float
    speedup: float


def bytes_moved(plan: Plan) -> int:
    """Bytes read + written by the kernel path: the input once per pass, the output once.

    Two-pass ops (an amax pass first: NVFP4 without a given global amax on more than
    ``INLINE_AMAX_TILES`` tiles, dynamic rows wider than one unit) read the input twice; an NVFP4
    tensor small enough for its programs to find the amax themselves reads it from L2, and counts
    once. Scales and partial maxima (< 0.1%) are not counted.
    """
    x, layout = plan.x, plan.layout
    nvfp4_amax_pass = (layout.scale_rule == ScaleRule.NVFP4 and plan.tensor_amax is None
                       and launch.inline_amax_iterations(layout, launch.tiling(layout)) == 0)
    two_pass = nvfp4_amax_pass or layout.amax_from == AmaxFrom.ROW_PARTIALS
    reads = 2 if two_pass else 1
    return (reads + 1) * x.numel() * x.element_size()


def make_arguments(slot, scale_kind, extra, kwargs, shape, gen, device="cuda"):
    x = torch.randn(shape, device=device, generator=gen)
    x *= torch.exp2(torch.randint(-8, 9, shape, device=device, generator=gen).float())
    if scale_kind == "tensor":
        scale = (x.abs().amax() / 448).reshape(())
    elif scale_kind == "channel":
        scale = x.abs().amax(dim=1) / 127
    elif scale_kind == "amax":
        scale = x.abs().amax().reshape(())
    else:
        scale = None
    return (x,) + ((scale,) if scale is not None else ()) + extra, kwargs


def times_ms(fn, repeats: int, flush: torch.Tensor) -> list[float]:
    times = []
    for _ in range(repeats):
        flush.zero_()
        # the GPU waits here while Python enqueues fn, so the events time the GPU's work and not
        # the host's launch latency (which, on a cold machine, exceeded the flush and inflated a
        # 4096x4096 row from 0.038 to 0.07-0.1 ms while the copy, a cheaper launch, stayed put)
        torch.cuda._sleep(LAUNCH_LEAD_CYCLES)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return times


def median_ms(fn, repeats: int, flush: torch.Tensor) -> float:
    return statistics.median(times_ms(fn, repeats, flush))


def count_launches(fn) -> int:
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(
        1 for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA
        and not e.name.startswith(("Memcpy", "Memset"))
    )


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16)


def measure(config, size: str, repeats: int, flush: torch.Tensor, gen) -> Row:
    label, slot, scale_kind, extra, kwargs, target = config
    args, kwargs = make_arguments(slot, scale_kind, extra, kwargs, SIZES[size], gen)
    plan = PLANNERS[slot](*args, **kwargs)
    want = getattr(reference, slot)(*args, **kwargs)
    got = launch.run(plan)
    equal = bool(torch.equal(bits(got), bits(want)))
    del got, want
    quartiles = tuple(statistics.quantiles(times_ms(lambda: launch.run(plan), repeats, flush), n=4))
    kernel = quartiles[1]
    x = args[0]
    copy_dst = torch.empty_like(x)
    copy = median_ms(lambda: copy_dst.copy_(x), repeats, flush)
    ref = median_ms(lambda: getattr(reference, slot)(*args, **kwargs), REFERENCE_REPEATS, flush)
    moved = bytes_moved(plan)
    copy_bytes = 2 * x.numel() * x.element_size()
    kernel_tb_s, copy_tb_s = moved / kernel / 1e9, copy_bytes / copy / 1e9
    (slot_call,) = [impl.fn for impl in registered(slot) if impl.name == "triton"]
    return Row(
        label, size, equal,
        count_launches(lambda: launch.run(plan)),
        count_launches(lambda: slot_call(*args, **kwargs)),
        kernel, quartiles, [kernel], copy, ref, moved, kernel_tb_s, copy_tb_s,
        kernel_tb_s / copy_tb_s, target, ref / kernel,
    )


def environment() -> dict:
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": props.name, "capability": f"{props.major}.{props.minor}",
        "torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton.__version__,
        "python": platform.python_version(),
        # The fixed kernel configuration (no autotuning), so each record says what it measured.
        "kernel_config": {
            "tile": GPU_TILE, "warps": launch._warps(GPU_TILE), "amax_chunk": GPU_TILE,
            "max_partials_per_row": MAX_PARTIALS, "tensor_amax_partials": TENSOR_PARTIALS,
        },
    }


def median_round(rounds: list[Row]) -> Row:
    """The round whose kernel time is the median, carrying every round's kernel median."""
    chosen = sorted(rounds, key=lambda r: r.kernel_ms)[len(rounds) // 2]
    chosen.kernel_ms_rounds = [r.kernel_ms for r in rounds]
    chosen.bits_equal = all(r.bits_equal for r in rounds)
    return chosen


def table(rows: list[Row]) -> str:
    lines = [
        "| config | size | bits | launches (kernel/slot) | ms | rounds ms | TB/s | copy TB/s "
        "| of copy | target | vs reference |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        met = r.fraction_of_copy >= r.target_fraction and r.speedup >= SPEEDUP_TARGET
        lines.append(
            f"| {r.config} | {r.size} | {'equal' if r.bits_equal else '**DIFFER**'} "
            f"| {r.launches_kernel_path}/{r.launches_slot_call} | {r.kernel_ms:.3f} "
            f"| {min(r.kernel_ms_rounds):.3f}-{max(r.kernel_ms_rounds):.3f} "
            f"| {r.kernel_tb_s:.2f} | {r.copy_tb_s:.2f} | {r.fraction_of_copy:.0%} "
            f"| {r.target_fraction:.0%} {'met' if met else '**missed**'} | {r.speedup:.1f}x |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="path of the raw JSON results")
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    options = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_fake_quant.py needs a CUDA device")
    gen = torch.Generator(device="cuda").manual_seed(0)
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    keys = [(c, s) for s in options.sizes for c in CONFIGS]
    rounds = [[measure(c, s, options.repeats, flush, gen)
               for c, s in each(keys, lambda key, r=r: f"round {r + 1}: {key[0][0]} {key[1]}")]
              for r in range(options.rounds)]
    rows = [median_round([r[i] for r in rounds]) for i in range(len(keys))]
    with open(options.out, "w") as f:
        json.dump({"environment": environment(), "rows": [asdict(r) for r in rows]}, f, indent=1)
    print(table(rows))


if __name__ == "__main__":
    main()

"""Benchmark the Triton unpack kernel against a device copy and the reference unpack (H200).

    LIBREYOLO_KERNELS=triton python benchmarks/bench/bench_unpack.py RESULTS.json [--repeats 100]

(``LIBREYOLO_KERNELS=triton`` selects the kernel while it awaits its parity record, so the slot
call measures it.) For every packed format and output dtype, at a 4096x4096 weight and at 256M
elements (65536 x 4096):
1. verifies the kernel's bits against the reference run on the CPU (the numbers' definition:
   NaN codes keep the CPU's NaN bits, not the GPU's) on random packed bytes (every code point)
   and packer-made scales, over the first ``CHECKED_ROWS`` rows; a failure is recorded and the
   row is marked, never hidden;
2. counts kernel launches of a whole slot call (``libreyolo.kernels.ops``): 1 means the Triton
   kernel took it;
3. times the kernel, a same-size device copy and the reference with CUDA events as
   ``bench_fake_quant.py`` does (its ``times_ms``: L2 flushed before every run, a GPU sleep that
   covers the host's launch latency, medians; the reference: fewer runs), the whole sweep
   ``--rounds`` times, each row the round with the median kernel time;
4. reports bytes read + written (``bytes_moved``), the achieved bandwidth and its share of the
   copy's (the copy reads and writes the output's bytes: the same traffic, all of it streaming),
   and the speedup over the reference;
5. measures the host time of one slot call (``ops.unpack_*``: accepts, plan, launch) back to
   back on the 4096x4096 weight, median of ``--host-calls`` calls, the GPU kept busy by nothing
   else.
Raw results go to the JSON path (its environment says the kernel configuration and
``bf16_rounding``); a markdown table goes to stdout. ``--bf16-rounding integer`` times the
bfloat16 rows with the kernel's integer emulation of ``cvt.rn.bf16x2.f32`` instead of the
instruction (``unpack_plan.BF16_ROUNDING``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.bench.bench_fake_quant import (  # noqa: E402
    L2_FLUSH_BYTES,
    REFERENCE_REPEATS,
    count_launches,
    median_round,
    times_ms,
)
from benchmarks.bench.bench_fake_quant import environment as fake_quant_environment  # noqa: E402
from libreyolo.kernels import ops
from libreyolo.kernels.quant.execute import unpack_plan, unpack_tiles
from libreyolo.kernels.quant.execute.unpack_launch import run
from libreyolo.kernels.quant.execute.unpack_plan import PLANNERS, UnpackPlan
from libreyolo.quant import packing as reference

SIZES = {"4096x4096": (4096, 4096), "256M": (65536, 4096)}
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
# (label, slot, pack arguments after the weight)
FORMATS = (
    ("int4 grouped g128", "unpack_int_grouped", (4, 128)),
    ("int8 grouped g128", "unpack_int_grouped", (8, 128)),
    ("nvfp4", "unpack_nvfp4", ()),
    ("mxfp4", "unpack_mxfp4", ()),
    ("mxfp8", "unpack_mxfp8", ()),
)
CHECKED_ROWS = 4096  # the whole 4096x4096 weight; the CPU reference of 256M elements is slow
COPY_TARGET, SPEEDUP_TARGET, HOST_US_TARGET = 0.85, 10.0, 30.0


@dataclass
class Row:
    format: str
    dtype: str
    size: str
    bits_equal: bool
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
    speedup: float
    host_us: float | None
    config: dict  # the kernel's unpack_tiles.toml row (or the sweep's override of it)


def bytes_moved(plan: UnpackPlan) -> int:
    """Bytes read + written: the packed codes, the scales and the output, once each."""
    work = plan.work
    out = work.rows * work.in_features * torch.empty((), dtype=work.dtype).element_size()
    return out + sum(t.numel() * t.element_size() for t in plan.tensors())


def packed_arguments(slot: str, pack_args: tuple, shape: tuple[int, int], gen,
                     device: str = "cuda") -> tuple:
    """A packed weight of ``shape`` with random code bytes (every code point appears, NaN codes
    included) and the packer's scales of a random weight (packed on the GPU, in row chunks)."""
    pack = getattr(reference, slot.replace("unpack_", "pack_"))
    rows, cols = shape
    chunk = max(1, (64 * 2**20) // cols)
    parts = [pack(torch.randn((min(chunk, rows - r), cols), device=device, generator=gen),
                  *pack_args) for r in range(0, rows, chunk)]
    fields = {name: [getattr(p, name) for p in parts] for name in parts[0]._fields}
    # row-chunked 2-D tensors are concatenated; NVFP4 keeps the first chunk's tensor scale
    packed = {name: torch.cat(v) if isinstance(v[0], torch.Tensor) and v[0].dim() == 2 else v[0]
              for name, v in fields.items()}
    raw = packed["codes"].view(torch.uint8)
    random = torch.randint(0, 256, raw.shape, device=device, generator=gen, dtype=torch.int32)
    packed["codes"] = random.to(torch.uint8).view(packed["codes"].dtype)
    return tuple(packed.values())


def bits_equal(slot: str, args: tuple, plan: UnpackPlan, checked_rows: int) -> bool:
    """The kernel's first ``checked_rows`` rows equal the CPU reference's, bit for bit."""
    head = tuple(a[:checked_rows].cpu() if isinstance(a, torch.Tensor) and a.dim() == 2
                 else a.cpu() if isinstance(a, torch.Tensor) else a for a in args)
    want = getattr(reference, slot)(*head, dtype=plan.work.dtype)
    got = run(plan)[:checked_rows].cpu()
    return bool(torch.equal(got.view(torch.uint8), want.view(torch.uint8)))


def host_us(call, calls: int) -> float:
    """Median host time of one call, back to back (the GPU keeps up: each call's work is short)."""
    call()
    torch.cuda.synchronize()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def measure(fmt, dtype_name: str, size: str, repeats: int, host_calls: int, flush, gen,
            checked_rows: int = CHECKED_ROWS) -> Row:
    label, slot, pack_args = fmt
    dtype = DTYPES[dtype_name]
    args = packed_arguments(slot, pack_args, SIZES[size], gen)
    plan = PLANNERS[slot](*args, dtype=dtype)
    equal = bits_equal(slot, args, plan, checked_rows)
    quartiles = tuple(statistics.quantiles(times_ms(lambda: run(plan), repeats, flush), n=4))
    kernel = quartiles[1]
    source = torch.empty((plan.work.rows, plan.work.in_features), dtype=dtype, device="cuda")
    destination = torch.empty_like(source)
    copy = statistics.median(times_ms(lambda: destination.copy_(source), repeats, flush))
    ref = statistics.median(times_ms(lambda: getattr(reference, slot)(*args, dtype=dtype),
                                     REFERENCE_REPEATS, flush))
    moved = bytes_moved(plan)
    copy_bytes = 2 * source.numel() * source.element_size()
    kernel_tb_s, copy_tb_s = moved / kernel / 1e9, copy_bytes / copy / 1e9
    slot_call = getattr(ops, slot)
    host = host_us(lambda: slot_call(*args, dtype=dtype), host_calls) if size == "4096x4096" \
        else None
    launches = count_launches(lambda: slot_call(*args, dtype=dtype))
    return Row(label, dtype_name, size, equal, launches, kernel, quartiles, [kernel], copy, ref,
               moved, kernel_tb_s, copy_tb_s, kernel_tb_s / copy_tb_s, ref / kernel, host,
               asdict(plan.work.config))


def table(rows: list[Row]) -> str:
    lines = [
        "| format | out | size | bits | launches | ms | rounds ms | MB moved | TB/s | copy TB/s "
        "| of copy | vs reference | host µs/call | targets |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        met = (r.fraction_of_copy >= COPY_TARGET and r.speedup >= SPEEDUP_TARGET
               and (r.host_us is None or r.host_us <= HOST_US_TARGET))
        host = "" if r.host_us is None else f"{r.host_us:.1f}"
        lines.append(
            f"| {r.format} | {r.dtype} | {r.size} | {'equal' if r.bits_equal else '**DIFFER**'} "
            f"| {r.launches_slot_call} | {r.kernel_ms:.3f} "
            f"| {min(r.kernel_ms_rounds):.3f}-{max(r.kernel_ms_rounds):.3f} "
            f"| {r.bytes_moved / 1e6:.0f} | {r.kernel_tb_s:.2f} | {r.copy_tb_s:.2f} "
            f"| {r.fraction_of_copy:.0%} | {r.speedup:.1f}x | {host} "
            f"| {'met' if met else '**missed**'} |")
    return "\n".join(lines)


def measured(row: Row) -> Row:
    """The row, also printed as soon as it is measured (a run cut short still says something)."""
    print(table([row]).splitlines()[-1], flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="path of the raw JSON results")
    parser.add_argument("--repeats", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--host-calls", type=int, default=1000)
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--formats", nargs="+", default=[f[0] for f in FORMATS],
                        choices=[f[0] for f in FORMATS])
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=list(DTYPES))
    # a sweep: one configuration for every row instead of unpack_tiles.toml's, set before
    # anything is planned, so kept plans all have it
    parser.add_argument("--tile-bytes", type=int, help="every row's output bytes per program")
    parser.add_argument("--num-warps", type=int, help="every row's warps per program")
    # how the compiled kernel rounds bfloat16 outputs (unpack_plan.BF16_ROUNDING), set before
    # anything is planned: the shipped cvt.rn.bf16x2.f32 or its integer emulation
    parser.add_argument("--bf16-rounding", default=unpack_plan.BF16_ROUNDING,
                        choices=unpack_plan.BF16_ROUNDINGS)
    parser.add_argument("--checked-rows", type=int, default=CHECKED_ROWS,
                        help="rows checked bit for bit against the CPU reference")
    parser.add_argument("--compile-only", action="store_true",
                        help="run each row's kernel once and stop: fills Triton's cache, so "
                             "processes started in parallel can compile for later timed ones")
    options = parser.parse_args()
    overrides = {name: value for name, value in (
        ("tile_bytes", options.tile_bytes), ("num_warps", options.num_warps))
        if value is not None}
    if overrides:
        unpack_tiles.TILES = {key: unpack_tiles.row_config(
            f"the sweep's options for [{key[0]}.{key[1]}]", {**asdict(row), **overrides})
            for key, row in unpack_tiles.TILES.items()}
    unpack_plan.BF16_ROUNDING = options.bf16_rounding
    if not torch.cuda.is_available():
        raise SystemExit("bench_unpack.py needs a CUDA device")
    gen = torch.Generator(device="cuda").manual_seed(0)
    formats = [f for f in FORMATS if f[0] in options.formats]
    keys = [(f, d, s) for s in options.sizes for f in formats for d in options.dtypes]
    if options.compile_only:
        for (_, slot, pack_args), d, s in keys:
            run(PLANNERS[slot](*packed_arguments(slot, pack_args, SIZES[s], gen), dtype=DTYPES[d]))
        torch.cuda.synchronize()
        return
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    rounds = [[measured(measure(f, d, s, options.repeats, options.host_calls, flush, gen,
                                options.checked_rows))
               for f, d, s in keys] for _ in range(options.rounds)]
    rows = [median_round([r[i] for r in rounds]) for i in range(len(keys))]
    env = {key: value for key, value in fake_quant_environment().items() if key != "kernel_config"}
    env["kernel_config"] = {"overrides": overrides} if overrides else "unpack_tiles.toml"
    env["bf16_rounding"] = unpack_plan.BF16_ROUNDING
    with open(options.out, "w") as f:
        json.dump({"environment": env, "rows": [asdict(r) for r in rows]}, f, indent=1)
    print(table(rows))


if __name__ == "__main__":
    main()

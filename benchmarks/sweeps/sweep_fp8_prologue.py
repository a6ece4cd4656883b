"""The FP8 prologue on the H200: exhaustive bits over the half-precision scale space, then its
time against a same-size device copy for each tile shape and E4M3 conversion (issue #17,
"bench_fp8.py v2", "FP8 prologue v3").

    python benchmarks/sweeps/sweep_fp8_prologue.py RESULTS.json [--repeats 30]
    TRITON_INTERPRET=1 python benchmarks/sweeps/sweep_fp8_prologue.py out.json --dry-run  # CPU

1. bits: every bfloat16 and every float16 bit pattern (65536) quantized with every scale the
   dynamic mode can give that dtype (``amax / 448`` for each finite positive amax, and 1), plus
   2^24 random float32 bit patterns with 1024 random float32 scales and the zero scale, by the
   compiled kernel as shipped (on sm_89+ the hardware E4M3 conversion: the run fails if it is
   not taken there), against the reference quantizer run on the GPU (its division by a tensor
   is IEEE on CUDA, as on CPU: docs/architecture.md, "Facts for kernel authors"). The dynamic
   mode's codes depend on the scale and x alone, so the half-precision spaces are complete.
   Tiles holding inf or NaN take the kernel's exact NaN select, the others skip it: the
   half-precision rows have both kinds (NaN and inf fill two of their 64 tiles), and the
   float32 row's second half has its inf and NaN patterns made finite (random float32 bits put
   one in nearly every tile);
2. time (CUDA-event medians, L2 flushed before each run): the dynamic prologue on bf16
   16384x4096 (ViT-L fc2's input) and 16384x1024 (fc1's), with the GELU fold on 16384x4096, and
   the static one on 16384x4096, for each (tile elements, elements a thread, division, E4M3
   conversion), beside a device copy of the input (share of the copy's bytes per second:
   target 85%).
Prints one table; raw results to the JSON path.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.bench.bench_fake_quant import L2_FLUSH_BYTES, times_ms  # noqa: E402
from libreyolo.kernels.quant.execute import fp8_launch  # noqa: E402
from libreyolo.kernels.quant.execute.fp8_plan import plan_fp8_cast_dynamic, plan_fp8_cast_static  # noqa: E402
from libreyolo.quant import fp8_execute as ref  # noqa: E402
from libreyolo.quant import quantizers  # noqa: E402

#: (tile elements, elements a thread, FMA division, hardware E4M3 conversion), the shipped one
#: first. v2's run (2026-12-01) measured (4096|2048|8192, 16|32, ...) with the software
#: rounding: 32 elements a thread won; persistent programs measured no gain and went (v3). v4's
#: run put 2048-element tiles ahead on 1024-element rows and static slabs; since 2026-12-02 they
#: ship (``fp8_launch.CAST_TILE``), with v3's 4096 timed beside them. The software row is the
#: shipped tile with v2's rounding.
CONFIGS = ((2048, 32, True, True), (2048, 32, True, False), (2048, 32, False, True),
           (4096, 32, True, True), (2048, 16, True, True), (8192, 32, True, True))
SHAPES = (("dynamic bf16 16384x4096", (16384, 4096), False, False),
          ("dynamic bf16 16384x1024", (16384, 1024), False, False),
          ("dynamic+GELU bf16 16384x4096", (16384, 4096), False, True),
          ("static bf16 16384x4096", (16384, 4096), True, False))


def reference_codes(x_row: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The reference's bytes of ``x_row`` under each scale (one row per scale), on x's device:
    the per-channel mode of the same quantizer (``x / scale`` per row), stored as the slot does."""
    grid = x_row.expand(scales.numel(), -1)
    return ref._e4m3(quantizers.fp8(grid, scales, fmt="e4m3", axis=0).codes).view(torch.uint8)


def kernel_codes(x_row: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    out = torch.empty((scales.numel(), x_row.numel()), dtype=torch.uint8, device=x_row.device)
    for i in range(scales.numel()):
        codes, _ = fp8_launch.cast(plan_fp8_cast_static(x_row, scales[i]))
        out[i] = codes.view(torch.uint8)[0]
    return out


def every_pattern(dtype, device) -> torch.Tensor:
    return torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype).to(device)


def dynamic_scales(dtype, device, step) -> torch.Tensor:
    """``amax / 448`` (IEEE, float32) for every ``step``-th finite positive amax of ``dtype``,
    and 1."""
    bits = torch.arange(1, 0x7F80 if dtype == torch.bfloat16 else 0x7C00, step, dtype=torch.int32)
    amax = bits.to(torch.int16).view(dtype).float().to(device)
    return torch.cat([amax / torch.tensor(448.0, device=device), torch.ones(1, device=device)])


def finite_patterns(bits: torch.Tensor) -> torch.Tensor:
    """float32 bit patterns with inf and NaN (exponent all ones) moved one binade down."""
    special = (bits & 0x7F800000) == 0x7F800000
    return torch.where(special, bits ^ 0x00800000, bits)


def mismatches(x_row, scales, batch=512) -> int:
    bad = 0
    for start in range(0, scales.numel(), batch):
        part = scales[start:start + batch]
        bad += int((kernel_codes(x_row, part) != reference_codes(x_row, part)).sum())
    return bad


def verify(gen, device="cuda", step=1, float32_scales=1024) -> dict:
    """``step`` > 1 and fewer float32 scales: the dry run's slice of the same checks."""
    out = {}
    for dtype in (torch.bfloat16, torch.float16):
        start = time.perf_counter()
        scales = dynamic_scales(dtype, device, step)
        x = every_pattern(dtype, device).reshape(1, -1)
        out[str(dtype)] = {"scales": scales.numel(), "patterns": x.numel(),
                           "mismatches": mismatches(x, scales),
                           "seconds": time.perf_counter() - start}
    x = torch.randint(-2**31, 2**31 - 1, (1, 1 << 24), generator=gen, dtype=torch.int32)
    half = x.shape[1] // 2
    x[:, half:] = finite_patterns(x[:, half:])
    x = x.view(torch.float32).to(device)
    exponents = torch.randint(-140, 120, (float32_scales,), generator=gen).double()
    scales = (torch.rand(float32_scales, generator=gen).double() * 2 ** exponents).float()
    scales = torch.cat([scales, torch.zeros(1)]).to(device)
    out["torch.float32"] = {"scales": scales.numel(), "patterns": x.numel(),
                            "mismatches": mismatches(x, scales, batch=8)}
    return out


def timings(repeats, flush, gen) -> list[dict]:
    rows = []
    knobs = ("CAST_TILE", "CAST_ELEMENTS_PER_THREAD", "FMA_DIVISION", "HARDWARE_E4M3")
    default = tuple(getattr(fp8_launch, knob) for knob in knobs)
    for label, shape, static, gelu in SHAPES:
        x = torch.randn(shape, generator=gen).to(torch.bfloat16).cuda()
        plan = plan_fp8_cast_static(x, torch.tensor(0.01, device="cuda")) if static else \
            plan_fp8_cast_dynamic(x)
        # fresh random data checked before timing (the GELU fold is not exact: no reference)
        want = None if gelu else (ref.fp8_cast_static(x, plan.scale) if static else
                                  ref.fp8_cast_dynamic(x)[0]).view(torch.uint8)
        copy_out = torch.empty_like(x)
        copy_ms = statistics.median(times_ms(lambda o=copy_out, i=x: o.copy_(i), repeats, flush))
        moved = x.numel() * 3 + (0 if static else 4 * shape[0])
        for config in CONFIGS:
            for knob, value in zip(knobs, config, strict=True):
                setattr(fp8_launch, knob, value)
            tile, per_thread, fma, hardware = config
            warps = fp8_launch.cast_blocks(x.shape[1], not static)[2]
            run = lambda p=plan, g=gelu: fp8_launch.cast(p, pad_to=16, gelu=g)  # noqa: E731
            try:
                codes = run()[0].view(torch.uint8)[:, :shape[1]]
                bits_equal = None if want is None else bool(torch.equal(codes, want))
                ms = statistics.median(times_ms(run, repeats, flush))
            finally:
                for knob, value in zip(knobs, default, strict=True):
                    setattr(fp8_launch, knob, value)
            share = (moved / ms) / (2 * x.numel() * x.element_size() / copy_ms)
            rows.append({"kernel": label, "tile": tile, "warps": warps, "fma_division": fma,
                         "hardware_e4m3": hardware and fp8_launch.hardware_e4m3(x.device),
                         "bits_equal": bits_equal, "ms": ms,
                         "copy_ms": copy_ms, "bytes": moved, "tb_s": moved / ms / 1e9,
                         "fraction_of_copy": share})
    return rows


def save(result: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(result, f, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("results")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--dry-run", action="store_true",
                        help="CPU under TRITON_INTERPRET=1: every 509th scale, 2 float32 scales")
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    if args.dry_run:
        print(json.dumps(verify(gen, "cpu", step=509, float32_scales=2), indent=1))
        return
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "capability": torch.cuda.get_device_capability(),
              "default": [fp8_launch.CAST_TILE, fp8_launch.CAST_ELEMENTS_PER_THREAD,
                          fp8_launch.FMA_DIVISION, fp8_launch.HARDWARE_E4M3]}
    # the bits below are the shipped kernel's: on sm_89+ that is the hardware conversion
    result["verified_hardware_e4m3"] = fp8_launch.hardware_e4m3(torch.device("cuda"))
    if torch.cuda.get_device_capability() >= (8, 9) and not result["verified_hardware_e4m3"]:
        raise SystemExit("sm_89+ but the prologue does not take the hardware E4M3 conversion")
    result["verify"] = verify(gen)
    print(json.dumps(result["verify"], indent=1))
    save(result, args.results)  # a run cut during the timings keeps its bits
    result["timings"] = timings(args.repeats, flush, gen)
    save(result, args.results)
    print("\n| prologue | tile | warps | division | E4M3 conversion | bits | ms | copy ms | TB/s "
          "| share of copy |\n|---|---|---|---|---|---|---|---|---|---|")
    for r in result["timings"]:
        division = "fma" if r["fma_division"] else "div_rn"
        conversion = "hardware" if r["hardware_e4m3"] else "software"
        bits = {True: "equal", False: "DIFFER", None: "n/a"}[r["bits_equal"]]
        print(f"| {r['kernel']} | {r['tile']} | {r['warps']} | {division} | {conversion} | "
              f"{bits} | {r['ms']:.4f} | "
              f"{r['copy_ms']:.4f} | {r['tb_s']:.2f} | {r['fraction_of_copy']:.0%} |")


if __name__ == "__main__":
    main()

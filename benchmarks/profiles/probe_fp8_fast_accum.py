"""Is ``torch._scaled_mm(..., use_fast_accum=True)`` faster on the ViT-L MLP's GEMMs, what does it
cost in accuracy, and up to which K does it stay as accurate as bf16 ``F.linear``? (issue 17:
the MLP's 1.4x is bounded by the two GEMMs; ``fp8_linear.FAST_ACCUMULATION_MAX_K``.)

    python benchmarks/profiles/probe_fp8_fast_accum.py OUT.json  # on a CUDA GPU with FP8 (sm_89+)

Per shape: the rowwise-scaled FP8 GEMM with bf16 output as ``fp8_gemm`` runs it (default
accumulation, which promotes partial sums to float32) and with fast accumulation, CUDA-event
medians with the L2 flushed, and each one's max abs error against the float64 product of the
same dequantized operands, beside bf16 ``F.linear``'s on the unquantized operands' bf16 copies.
Then the K sweep: M = 4096, N = 1024, K from 256 to 8192, three seeds each, every error's max
and RMS against the same oracle; the table gives, per K, the worst over the seeds of fast
accumulation's error over bf16's (at most 1: as accurate as bf16).
A probe, not a slot: nothing here changes what ships. (Its first run, commit 8022986's version,
timed with a loop of its own, without ``bench_fake_quant``'s launch lead, and had no K sweep;
``fp8_fast_accum_probe_h200_2026-12-02.json``, in git at e55bb27: benchmarks/NOTES.md, "FP8 fast
accumulation, an opt-in".)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.bench.bench_fake_quant import L2_FLUSH_BYTES  # noqa: E402
from benchmarks.bench.bench_fp8 import median  # noqa: E402

SHAPES = (("vitl_fc1", 16384, 1024, 4096), ("vitl_fc2", 16384, 4096, 1024),
          ("det_8192_1024_1024", 8192, 1024, 1024))


def quantized(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise E4M3 codes and float32 scales (amax / 448) of a float32 matrix."""
    scale = (t.abs().amax(dim=1, keepdim=True) / 448.0).clamp_min(1e-12)
    return (t / scale).clamp(-448, 448).to(torch.float8_e4m3fn), scale


SWEEP_M, SWEEP_N, SWEEP_KS, SWEEP_SEEDS = 4096, 1024, (256, 512, 1024, 2048, 4096, 8192), 3


def operands(m: int, k: int, n: int, seed: int):
    """Codes and scales of activations (randn * 2) and weights (randn / sqrt(k)), and the
    float64 product of the dequantized operands."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn((m, k), generator=gen, device="cuda") * 2
    w = torch.randn((n, k), generator=gen, device="cuda") / k ** 0.5
    a, sa = quantized(x)
    b, sb = quantized(w)
    oracle = (a.double() * sa.double()) @ (b.double() * sb.double()).t()
    return a, sa, b, sb, oracle


def gemms(a, sa, b, sb):
    """{label: a function returning the bf16 output}: the FP8 GEMM with float32 and with fast
    accumulation, and bf16 ``F.linear`` on bf16 copies of the dequantized operands."""
    n = b.shape[0]
    xb, wb = (a.float() * sa).to(torch.bfloat16), (b.float() * sb).to(torch.bfloat16)

    def fp8(fast):
        return lambda: torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.reshape(1, n),
                                        out_dtype=torch.bfloat16, use_fast_accum=fast)
    return {"default": fp8(False), "fast_accum": fp8(True), "bf16_linear": lambda: F.linear(xb, wb)}


def probe(name: str, m: int, k: int, n: int, repeats: int, flush: torch.Tensor) -> dict:
    a, sa, b, sb, oracle = operands(m, k, n, m + k + n)
    row = {"layer": name, "m": m, "k": k, "n": n, "oracle_max": float(oracle.abs().max())}
    for label, run in gemms(a, sa, b, sb).items():
        row[f"{label}_max_abs_err"] = float((run().double() - oracle).abs().max())
        row[f"{label}_ms"] = median(run, repeats, flush)
    return row


def sweep(k: int, seed: int) -> dict:
    a, sa, b, sb, oracle = operands(SWEEP_M, k, SWEEP_N, seed)
    row = {"k": k, "seed": seed}
    for label, run in gemms(a, sa, b, sb).items():
        error = run().double() - oracle
        row[f"{label}_max"] = float(error.abs().max())
        row[f"{label}_rms"] = float(error.square().mean().sqrt())
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    rows = [probe(*shape, args.repeats, flush) for shape in SHAPES]
    sweep_rows = [sweep(k, seed) for k in SWEEP_KS for seed in range(SWEEP_SEEDS)]
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "rows": rows, "k_sweep": sweep_rows}, f, indent=1)
    print("| layer | default ms | fast ms | fast / default | default err | fast err | "
          "bf16 F.linear err | oracle max |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['layer']} | {r['default_ms']:.4f} | {r['fast_accum_ms']:.4f} | "
              f"{r['default_ms'] / r['fast_accum_ms']:.2f}x | {r['default_max_abs_err']:.4g} | "
              f"{r['fast_accum_max_abs_err']:.4g} | {r['bf16_linear_max_abs_err']:.4g} | "
              f"{r['oracle_max']:.3g} |")
    print(f"\nK sweep, {SWEEP_M} x K -> {SWEEP_N}, {SWEEP_SEEDS} seeds: worst error ratios")
    print("| K | fast / bf16 max | fast / bf16 RMS | float32 / bf16 max | float32 / bf16 RMS |")
    print("|---|---|---|---|---|")
    for k in SWEEP_KS:
        at_k = [r for r in sweep_rows if r["k"] == k]

        def worst(label, stat, at_k=at_k):
            return max(r[f"{label}_{stat}"] / r[f"bf16_linear_{stat}"] for r in at_k)
        print(f"| {k} | {worst('fast_accum', 'max'):.2f} | {worst('fast_accum', 'rms'):.2f} | "
              f"{worst('default', 'max'):.2f} | {worst('default', 'rms'):.2f} |")


if __name__ == "__main__":
    main()

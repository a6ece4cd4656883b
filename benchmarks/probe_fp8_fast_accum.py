"""Is ``torch._scaled_mm(..., use_fast_accum=True)`` faster on the ViT-L MLP's GEMMs, and what
does it cost in accuracy? (issue 17: the MLP's 1.4x is bounded by the two GEMMs.)

    python benchmarks/probe_fp8_fast_accum.py OUT.json     # on a CUDA GPU with FP8 (sm_89+)

Per shape: the rowwise-scaled FP8 GEMM with bf16 output as ``fp8_gemm`` runs it (default
accumulation, which promotes partial sums to float32) and with fast accumulation, CUDA-event
medians with the L2 flushed, and each one's max abs error against the float64 product of the
same dequantized operands, beside bf16 ``F.linear``'s on the unquantized operands' bf16 copies.
A probe, not a slot: nothing here changes what ships. (Its one run, in
``results/fp8_fast_accum_probe_h200_2026-12-02.json``, was commit 8022986's version, which timed
with a loop of its own, without ``bench_fake_quant``'s launch lead; it now times as
``bench_fp8.py`` does.)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fake_quant import L2_FLUSH_BYTES  # noqa: E402
from bench_fp8 import median  # noqa: E402

SHAPES = (("vitl_fc1", 16384, 1024, 4096), ("vitl_fc2", 16384, 4096, 1024),
          ("det_8192_1024_1024", 8192, 1024, 1024))


def quantized(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Row-wise E4M3 codes and float32 scales (amax / 448) of a float32 matrix."""
    scale = (t.abs().amax(dim=1, keepdim=True) / 448.0).clamp_min(1e-12)
    return (t / scale).clamp(-448, 448).to(torch.float8_e4m3fn), scale


def probe(name: str, m: int, k: int, n: int, repeats: int, flush: torch.Tensor) -> dict:
    gen = torch.Generator(device="cuda").manual_seed(m + k + n)
    x = torch.randn((m, k), generator=gen, device="cuda") * 2
    w = torch.randn((n, k), generator=gen, device="cuda") / k ** 0.5
    a, sa = quantized(x)
    b, sb = quantized(w)
    oracle = (a.double() * sa.double()) @ (b.double() * sb.double()).t()
    row = {"layer": name, "m": m, "k": k, "n": n, "oracle_max": float(oracle.abs().max())}
    for label, fast in (("default", False), ("fast_accum", True)):
        def run(fast=fast):
            return torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb.reshape(1, n),
                                    out_dtype=torch.bfloat16, use_fast_accum=fast)
        row[f"{label}_max_abs_err"] = float((run().double() - oracle).abs().max())
        row[f"{label}_ms"] = median(run, repeats, flush)
    xb, wb = (a.float() * sa).to(torch.bfloat16), (b.float() * sb).to(torch.bfloat16)
    row["bf16_linear_max_abs_err"] = float((F.linear(xb, wb).double() - oracle).abs().max())
    row["bf16_linear_ms"] = median(lambda: F.linear(xb, wb), repeats, flush)
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    rows = [probe(*shape, args.repeats, flush) for shape in SHAPES]
    with open(args.out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "rows": rows}, f, indent=1)
    print("| layer | default ms | fast ms | fast / default | default err | fast err | "
          "bf16 F.linear err | oracle max |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['layer']} | {r['default_ms']:.4f} | {r['fast_accum_ms']:.4f} | "
              f"{r['default_ms'] / r['fast_accum_ms']:.2f}x | {r['default_max_abs_err']:.4g} | "
              f"{r['fast_accum_max_abs_err']:.4g} | {r['bf16_linear_max_abs_err']:.4g} | "
              f"{r['oracle_max']:.3g} |")


if __name__ == "__main__":
    main()

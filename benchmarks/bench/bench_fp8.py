"""Benchmark the fused FP8 linear against bf16 on the H200, and emit the policy it supports.

    python benchmarks/bench/bench_fp8.py RESULTS.json [--policy fp8_policy.toml] [--repeats 50]

(The script selects the FP8 implementations by name while they await their parity records:
``LIBREYOLO_KERNELS=fp8_cast_dynamic=triton,...``.) Side by side, in one run:

1. verify on the GPU: the prologue's codes and scales and the epilogue's bits against the CPU
   references; the fused path's error against float64 on the dequantized operands, beside bf16
   ``F.linear``'s on the same operands; a CUDA-graph replay of the fused path equal to its eager
   bits;
2. per layer, bytes and FLOPs counted first, then CUDA-event medians with the L2 flushed before
   every run (``bench_fake_quant.times_ms``): bf16 ``F.linear`` on the weight dequantized once,
   the declined path (what a finalized FP8 layer runs where the fused path does not engage: its
   input's FP8 fake quantization, then that ``F.linear``), the portable finalized forward
   (``unpack_fp8`` of the weight, then ``F.linear``, every call), the fused FP8 path (prologue +
   GEMM + epilogue, activation quantization included), eager and as a CUDA-graph replay, and its
   GEMM alone (codes ready);
3. the prologue and the epilogue against a same-size device copy (bandwidth share);
4. end to end: a ViT-L MLP at 1024 px (M = 16384, 1024 -> 4096 -> GELU -> 1024) and an
   RT-DETR-like encoder stack (input projection, FFN 256 -> 1024 -> ReLU -> 256, at M = 8400 and
   16384): bf16, fused FP8 everywhere, and the policy (fused where it measured faster); the
   ViT-L MLP with GELU folded, as it ships (fast accumulation where K <= 1024), as a finalized
   model runs it (``FinalizedMLP``), and with every GEMM forced to float32 and to fast
   accumulation;
5. a 3x3 convolution: dequantize-once bf16 vs the portable forward (why larger kernels dequantize
   once);
6. the card's policy table (``fp8_policy.toml``'s ``[[device]]`` table: regions where the fused
   path beat the declined path by ``MARGIN``), printed and written.
Raw results go to the JSON path; markdown tables to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("LIBREYOLO_KERNELS", ",".join(
    f"{slot}={name}" for slot, name in (
        ("fp8_cast_static", "triton"), ("fp8_cast_dynamic", "triton"),
        ("fp8_perchannel_epilogue", "triton"), ("fp8_gemm", "scaled_mm"),
        ("fp8_gemm_tensorwise", "scaled_mm"))))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.bench.bench_fake_quant import L2_FLUSH_BYTES, times_ms  # noqa: E402
from benchmarks.rendering.fp8_policy import device_table  # noqa: E402
from libreyolo.kernels import ops  # noqa: E402
from libreyolo.kernels.quant.execute import fp8_gemm, fp8_launch  # noqa: E402
from libreyolo.kernels.quant.execute.fp8_linear import (  # noqa: E402
    fused_fp8_linear,
    fused_fp8_mlp,
    padded_weight,
)
from libreyolo.kernels.quant.execute.fp8_plan import plan_fp8_cast_dynamic  # noqa: E402
from libreyolo.kernels.settings import FP8_FAST_ACCUMULATION as FAST_ACCUMULATION  # noqa: E402
from libreyolo.nn import FinalizedLinear, FinalizedMLP  # noqa: E402
from libreyolo.quant import fp8_execute as ref  # noqa: E402
from libreyolo.quant.packing import pack_fp8, unpack_fp8  # noqa: E402

#: (name, M, K, N, activation): ViT-L MLP at 1024 px, the issue's detector anchors, RT-DETR's
#: encoder (AIFI, 8400 tokens at 640 px over three levels) and decoder (300 queries) layers.
LAYERS = (
    ("vitl_fc1", 16384, 1024, 4096, "gelu"),
    ("vitl_fc2", 16384, 4096, 1024, None),
    ("det_16384_1024_256", 16384, 1024, 256, None),
    ("det_8192_1024_1024", 8192, 1024, 1024, None),
    ("det_4800_256_256", 4800, 256, 256, None),
    ("rtdetr_proj_8400", 8400, 256, 256, None),
    ("rtdetr_ffn1_8400", 8400, 256, 1024, "relu"),
    ("rtdetr_ffn2_8400", 8400, 1024, 256, None),
    ("rtdetr_proj_16384", 16384, 256, 256, None),
    ("rtdetr_ffn1_16384", 16384, 256, 1024, "relu"),
    ("rtdetr_ffn2_16384", 16384, 1024, 256, None),
    ("rtdetr_dec_ffn1_300", 300, 256, 1024, "relu"),
    ("rtdetr_dec_ffn2_300", 300, 1024, 256, None),
    ("yolov5_head_1600_255", 1600, 256, 255, None),
)
STACKS = {
    "vitl_mlp_16384": ("vitl_fc1", "vitl_fc2"),
    "rtdetr_8400": ("rtdetr_proj_8400", "rtdetr_ffn1_8400", "rtdetr_ffn2_8400"),
    "rtdetr_16384": ("rtdetr_proj_16384", "rtdetr_ffn1_16384", "rtdetr_ffn2_16384"),
}
ACT = {None: lambda y: y, "relu": F.relu, "gelu": F.gelu}
MARGIN = 0.95  # the fused path engages where it takes at most 95% of the declined path's time
#: What a layer's fused time is held to (``YARDSTICK`` in a results JSON; runs before 2026-12-07
#: held it to bf16 ``F.linear``, which a declining finalized layer never runs alone).
YARDSTICK = "declined"

COPY_TARGET, VITL_TARGET = 0.85, 1.4


def layer_weights(m, k, n, gen):
    """bf16 activations, a packed per-channel E4M3 weight and a bf16 bias, as a finalized layer
    holds them (``pack_fp8`` along the output channels)."""
    x = torch.randn((m, k), generator=gen).to(torch.bfloat16).cuda()
    w = torch.randn((n, k), generator=gen) / k ** 0.5
    packed = pack_fp8(w, (w.abs().amax(1) / 448).clamp_min(1e-12), axis=0)
    bias = (torch.randn(n, generator=gen) * 0.1).to(torch.bfloat16).cuda()
    codes, scale = packed.codes.cuda(), packed.scale.cuda()
    return x, codes, scale, bias


def paths(x, codes, scale, bias, act):
    """The compared forwards of one layer, each a zero-argument callable."""
    w_bf16 = unpack_fp8(codes, scale, 0, torch.bfloat16)  # dequantize once
    padded_weight(codes)  # the finalized module pads once at load

    def bf16():
        return ACT[act](F.linear(x, w_bf16, bias))

    def declined():
        return ACT[act](F.linear(ops.fake_quant_fp8(x), w_bf16, bias))

    def portable():
        return ACT[act](F.linear(x, unpack_fp8(codes, scale, 0, torch.bfloat16), bias))

    def fused():
        return fused_fp8_linear(x, codes, scale, bias, activation=act)

    return {"bf16": bf16, "declined": declined, "portable": portable, "fused": fused}


def graph_of(fn):
    """``fn`` captured in a CUDA graph (warmed up on a side stream), and its replay."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def median(fn, repeats, flush) -> float:
    fn()
    return statistics.median(times_ms(fn, repeats, flush))


def verify(gen) -> dict:
    """GPU bits of the prologue and epilogue against the CPU references, the fused path's bounded
    error beside bf16's, and a graph replay equal to eager."""
    out = {}
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        x = (torch.randn((1000, 1000), generator=gen) * 3).to(dtype)
        x[0, :3] = torch.tensor([float("nan"), float("inf"), -0.0])
        x[1] = 0
        want_codes, want_scale = ref.fp8_cast_dynamic(x)
        got_codes, got_scale = ops.fp8_cast_dynamic(x.cuda())
        static_want = ref.fp8_cast_static(x, torch.tensor(0.01))
        static_got = ops.fp8_cast_static(x.cuda(), torch.tensor(0.01, device="cuda"))
        acc = torch.randn((300, 255), generator=gen) * 300
        acc[0, 0] = float("nan")
        rs, cs = torch.rand((300, 1), generator=gen), torch.rand(255, generator=gen)
        b = torch.randn(255, generator=gen).to(dtype)
        epi_want = ref.fp8_perchannel_epilogue(acc, rs, cs, b, "relu", dtype)
        epi_got = ops.fp8_perchannel_epilogue(acc.cuda(), rs.cuda(), cs.cuda(), b.cuda(), "relu",
                                              dtype).cpu()
        bits = torch.int32 if dtype == torch.float32 else torch.int16
        out[str(dtype)] = {
            "dynamic_code_mismatches": int((got_codes.cpu().view(torch.uint8) !=
                                            want_codes.view(torch.uint8)).sum()),
            "dynamic_scales_equal": torch.equal(got_scale.cpu(), want_scale),
            "static_code_mismatches": int((static_got.cpu().view(torch.uint8) !=
                                           static_want.view(torch.uint8)).sum()),
            "epilogue_mismatches": int((epi_got.view(bits) != epi_want.view(bits)).sum()),
        }
    for name, m, k, n, _ in (("ragged", 33, 257, 40, None), ("vitl_fc2_part", 4096, 4096, 1024,
                                                               None)):
        x, codes, scale, bias = layer_weights(m, k, n, gen)
        got = fused_fp8_linear(x, codes, scale, bias)
        q_codes, q_scale = ref.fp8_cast_dynamic(x.cpu())
        exact = ref.fp8_gemm_portable(q_codes.double(), codes.cpu().double(), q_scale.double(),
                                      scale.cpu().double(), bias.cpu().double())
        portable_bf16 = F.linear((q_codes.float() * q_scale).to(torch.bfloat16).cuda(),
                                 unpack_fp8(codes, scale, 0, torch.bfloat16), bias)
        graph, replayed = graph_of(lambda x=x, codes=codes, scale=scale, bias=bias:
                                   fused_fp8_linear(x, codes, scale, bias))
        graph.replay()
        torch.cuda.synchronize()
        out[name] = {
            "fused_max_abs_err": float((got.cpu().double() - exact).abs().max()),
            "bf16_linear_max_abs_err": float((portable_bf16.cpu().double() - exact).abs().max()),
            "oracle_max": float(exact.abs().max()),
            "graph_replay_equal": torch.equal(replayed.view(torch.int16), got.view(torch.int16)),
        }
    hidden = (torch.randn((4096, 4096), generator=gen) * 2).to(torch.bfloat16)
    folded, folded_scale = fp8_launch.cast(plan_fp8_cast_dynamic(hidden.cuda()), gelu=True)
    want, want_scale = ref.fp8_cast_dynamic(F.gelu(hidden.float()))
    got = folded.cpu().view(torch.uint8).to(torch.int32)
    expect = want.view(torch.uint8).to(torch.int32)
    # and against float64 GELU (x * Phi(x)), quantized the same way: float32 F.gelu cancels in
    # 1 + erf on the negative side, the fold does not (docs/fp8_execute.md)
    h64 = hidden.double()
    exact, exact_scale = ref.fp8_cast_dynamic((h64 * torch.special.ndtr(h64)).float())
    exact = exact.view(torch.uint8).to(torch.int32)
    out["gelu_fold"] = {"code_mismatches": int((got != expect).sum()),
                        "elements": got.numel(),
                        "max_code_distance": int((got - expect).abs().max()),
                        "scale_mismatches": int((folded_scale.cpu() != want_scale).sum()),
                        "code_mismatches_vs_float64": int((got != exact).sum()),
                        "max_code_distance_vs_float64": int((got - exact).abs().max()),
                        "scale_mismatches_vs_float64": int((folded_scale.cpu() != exact_scale)
                                                           .sum())}
    return out


def measure_layer(name, m, k, n, act, repeats, flush, gen) -> dict:
    x, codes, scale, bias = layer_weights(m, k, n, gen)
    fns = paths(x, codes, scale, bias, act)
    row = {"layer": name, "m": m, "k": k, "n": n, "activation": act,
           "gflop": 2 * m * n * k / 1e9,
           "bytes_bf16": 2 * (m * k + n * k + m * n),
           "bytes_fp8": (2 * m * k + m * k + 4 * m) + (m * k + n * k + 2 * m * n)}
    for label, fn in fns.items():
        row[f"{label}_ms"] = median(fn, repeats, flush)
    graph, _ = graph_of(fns["fused"])
    row["fused_graph_ms"] = median(graph.replay, repeats, flush)
    graph, _ = graph_of(fns["bf16"])
    row["bf16_graph_ms"] = median(graph.replay, repeats, flush)
    a_codes, a_scale = fp8_launch.cast(plan_fp8_cast_dynamic(x), pad_to=16)
    w_p = padded_weight(codes)
    row["gemm_only_ms"] = median(lambda: fp8_gemm.scaled_mm_cuda(
        a_codes, w_p, a_scale, scale, bias, torch.bfloat16, True, n), repeats, flush)
    row["prologue_ms"] = median(lambda: fp8_launch.cast(plan_fp8_cast_dynamic(x), pad_to=16),
                                repeats, flush)
    row["speedup_fused"] = row["bf16_ms"] / row["fused_ms"]
    row["speedup_fused_graph"] = row["bf16_graph_ms"] / row["fused_graph_ms"]
    row["speedup_declined"] = row["declined_ms"] / row["fused_ms"]
    row["engage"] = row["fused_ms"] <= MARGIN * row["declined_ms"]
    row["tflops_bf16"] = row["gflop"] / row["bf16_ms"]
    row["tflops_fused"] = row["gflop"] / row["fused_ms"]
    return row


def bandwidth(repeats, flush, gen) -> list[dict]:
    """Prologue (bf16 16384x4096 -> codes + scales) and epilogue (float32 16384x1024 -> bf16)
    against a device copy of their input: share of the copy's bytes per second."""
    rows = []
    x = torch.randn((16384, 4096), generator=gen).to(torch.bfloat16).cuda()
    plan = plan_fp8_cast_dynamic(x)
    acc = torch.randn((16384, 1024), generator=gen).cuda()
    rs, cs = torch.rand((16384, 1), device="cuda"), torch.rand(1024, device="cuda")
    b = torch.randn(1024, device="cuda").to(torch.bfloat16)
    for label, fn, moved, source in (
            ("prologue dynamic bf16 16384x4096", lambda: fp8_launch.cast(plan, pad_to=16),
             x.numel() * 3 + 4 * 16384, x),
            ("epilogue f32->bf16 16384x1024 +bias relu", lambda: ops.fp8_perchannel_epilogue(
                acc, rs, cs, b, "relu", torch.bfloat16), acc.numel() * 6, acc)):
        copy_out = torch.empty_like(source)
        kernel_ms = median(fn, repeats, flush)
        copy_ms = median(lambda s=source, o=copy_out: o.copy_(s), repeats, flush)
        share = (moved / kernel_ms) / (2 * source.numel() * source.element_size() / copy_ms)
        rows.append({"kernel": label, "kernel_ms": kernel_ms, "copy_ms": copy_ms,
                     "bytes": moved, "tb_s": moved / kernel_ms / 1e9,
                     "fraction_of_copy": share, "target": COPY_TARGET})
    return rows


def stacks(layers: dict, repeats, flush, gen) -> list[dict]:
    """End to end: each stack's layers in sequence, bf16 vs fused everywhere vs the policy (as a
    finalized FP8 model runs it: fused where it engages, the declined path elsewhere)."""
    rows = []
    specs = {name: (m, k, n, act) for name, m, k, n, act in LAYERS}
    for stack, names in STACKS.items():
        m = specs[names[0]][0]
        x0 = torch.randn((m, specs[names[0]][1]), generator=gen).to(torch.bfloat16).cuda()
        params = []
        for name in names:
            _, k, n, act = specs[name]
            _, codes, scale, bias = layer_weights(1, k, n, gen)
            params.append((codes, scale, bias, unpack_fp8(codes, scale, 0, torch.bfloat16), act,
                           layers[name]["engage"]))
            padded_weight(codes)

        def run(path_of, params=params, x0=x0):
            h = x0
            for codes, scale, bias, w_bf16, act, engage in params:
                path = path_of(engage)
                if path == "fused":
                    h = fused_fp8_linear(h, codes, scale, bias, activation=act)
                else:  # bf16 F.linear, on the input's fake quantization where the layer declined
                    h = ACT[act](F.linear(ops.fake_quant_fp8(h) if path == "declined" else h,
                                          w_bf16, bias))
            return h

        row = {"stack": stack, "layers": list(names)}
        for label, choice in (("bf16", lambda e: "bf16"), ("fused", lambda e: "fused"),
                              ("policy", lambda e: "fused" if e else "declined")):
            row[f"{label}_ms"] = median(lambda c=choice: run(c), repeats, flush)
            graph, _ = graph_of(lambda c=choice: run(c))
            row[f"{label}_graph_ms"] = median(graph.replay, repeats, flush)
        if stack.startswith("vitl"):
            (w1, s1, b1, *_), (w2, s2, b2, *_) = params
            mlp = lambda x0=x0, w1=w1, s1=s1, b1=b1, w2=w2, s2=s2, b2=b2: fused_fp8_mlp(  # noqa: E731
                x0, (w1, s1, b1), (w2, s2, b2))
            row["fused_mlp_ms"] = median(mlp, repeats, flush)
            graph, _ = graph_of(mlp)
            row["fused_mlp_graph_ms"] = median(graph.replay, repeats, flush)
            # the same path as a finalized model runs it: FinalizedMLP over two FinalizedLinear
            model = FinalizedMLP(finalized_linear(w1, s1, b1), finalized_linear(w2, s2, b2))
            with torch.no_grad():
                row["finalized_mlp_ms"] = median(lambda model=model, x0=x0: model(x0), repeats,
                                                 flush)
            # beside the default (fast accumulation where K <= FAST_ACCUMULATION_MAX_K, so
            # fc1's and not fc2's): every GEMM in float32 and every GEMM fast
            for label, value in (("float32_accumulation", "0"), ("fast_accumulation", "1")):
                with accumulation(value):
                    row[f"fused_mlp_{label}_ms"] = median(mlp, repeats, flush)
            row["speedup_fused_mlp"] = row["bf16_ms"] / row["fused_mlp_ms"]
            row["speedup_fused_mlp_graph"] = row["bf16_graph_ms"] / row["fused_mlp_graph_ms"]
        row["speedup_fused"] = row["bf16_ms"] / row["fused_ms"]
        row["speedup_policy"] = row["bf16_ms"] / row["policy_ms"]
        row["speedup_policy_graph"] = row["bf16_graph_ms"] / row["policy_graph_ms"]
        rows.append(row)
    return rows


def finalized_linear(codes, scale, bias) -> FinalizedLinear:
    """A finalized FP8 layer (dynamic activation scales) holding these codes, scale and bias."""
    layer = FinalizedLinear(codes.shape[1], codes.shape[0], weight="fp8",
                            activation="fp8_dynamic", device=codes.device)
    layer.load_state_dict({"codes": codes, "scale": scale, "bias": bias.float()})
    return layer


@contextlib.contextmanager
def accumulation(value: str):
    """``LIBREYOLO_FP8_FAST_ACCUMULATION=value`` for the block (read on each call)."""
    before = os.environ.get(FAST_ACCUMULATION)
    os.environ[FAST_ACCUMULATION] = value
    try:
        yield
    finally:
        if before is None:
            del os.environ[FAST_ACCUMULATION]
        else:
            os.environ[FAST_ACCUMULATION] = before


def conv3x3(repeats, flush, gen) -> dict:
    """YOLO-sized 3x3 conv (1, 128, 80, 80), 128 -> 128: dequantize-once bf16 vs portable."""
    x = torch.randn((1, 128, 80, 80), generator=gen).to(torch.bfloat16).cuda()
    w = torch.randn((128, 128, 3, 3), generator=gen) / 34
    packed = pack_fp8(w, w.abs().amax((1, 2, 3)) / 448, axis=0)
    codes, scale = packed.codes.cuda(), packed.scale.cuda()
    w_bf16 = unpack_fp8(codes, scale, 0, torch.bfloat16)
    once = median(lambda: F.conv2d(x, w_bf16, padding=1), repeats, flush)
    portable = median(lambda: F.conv2d(x, unpack_fp8(codes, scale, 0, torch.bfloat16),
                                       padding=1), repeats, flush)
    return {"dequantize_once_bf16_ms": once, "portable_ms": portable}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("results")
    parser.add_argument("--policy", default=None)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "prologue_hardware_e4m3": fp8_launch.hardware_e4m3(torch.device("cuda")),
              "margin": MARGIN, "yardstick": YARDSTICK, "verify": verify(gen)}
    print(json.dumps(result["verify"], indent=1))
    layer_rows = [measure_layer(*spec, args.repeats, flush, gen) for spec in LAYERS]
    result["layers"] = layer_rows
    result["bandwidth"] = bandwidth(args.repeats, flush, gen)
    result["stacks"] = stacks({r["layer"]: r for r in layer_rows}, args.repeats, flush, gen)
    result["conv3x3"] = conv3x3(args.repeats, flush, gen)
    policy = device_table(result["device"], layer_rows)
    result["policy"] = policy
    with open(args.results, "w") as f:
        json.dump(result, f, indent=1)
    if args.policy:
        with open(args.policy, "w") as f:
            f.write(policy)
    print("\n| layer | M x K -> N | GFLOP | bf16 ms | declined ms | portable ms | fused ms "
          "| fused graph ms | GEMM only ms | prologue ms | fused/bf16 | graph fused/bf16 "
          "| fused/declined | engage |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in layer_rows:
        print(f"| {r['layer']} | {r['m']}x{r['k']}->{r['n']} | {r['gflop']:.1f} | "
              f"{r['bf16_ms']:.4f} | {r['declined_ms']:.4f} | {r['portable_ms']:.4f} | "
              f"{r['fused_ms']:.4f} | "
              f"{r['fused_graph_ms']:.4f} | {r['gemm_only_ms']:.4f} | {r['prologue_ms']:.4f} | "
              f"{r['speedup_fused']:.2f}x | {r['speedup_fused_graph']:.2f}x | "
              f"{r['speedup_declined']:.2f}x | {r['engage']} |")
    print("\n| kernel | ms | copy ms | TB/s | share of copy |\n|---|---|---|---|---|")
    for r in result["bandwidth"]:
        print(f"| {r['kernel']} | {r['kernel_ms']:.4f} | {r['copy_ms']:.4f} | {r['tb_s']:.2f} | "
              f"{r['fraction_of_copy']:.0%} |")
    print("\n| stack | bf16 ms | fused ms | policy ms | bf16 graph | policy graph | fused/bf16 "
          "| policy/bf16 | graph policy/bf16 |\n|---|---|---|---|---|---|---|---|---|")
    for r in result["stacks"]:
        print(f"| {r['stack']} | {r['bf16_ms']:.4f} | {r['fused_ms']:.4f} | "
              f"{r['policy_ms']:.4f} | {r['bf16_graph_ms']:.4f} | {r['policy_graph_ms']:.4f} | "
              f"{r['speedup_fused']:.2f}x | {r['speedup_policy']:.2f}x | "
              f"{r['speedup_policy_graph']:.2f}x |")
    for r in result["stacks"]:
        if "fused_mlp_ms" in r:
            print(f"\n{r['stack']}: GELU folded into fc2's prologue: {r['fused_mlp_ms']:.4f} ms "
                  f"({r['speedup_fused_mlp']:.2f}x bf16; graph {r['fused_mlp_graph_ms']:.4f} ms, "
                  f"{r['speedup_fused_mlp_graph']:.2f}x; target {VITL_TARGET}x); as "
                  f"FinalizedMLP {r['finalized_mlp_ms']:.4f} ms "
                  f"({r['bf16_ms'] / r['finalized_mlp_ms']:.2f}x); every GEMM "
                  f"in float32 {r['fused_mlp_float32_accumulation_ms']:.4f} ms "
                  f"({r['bf16_ms'] / r['fused_mlp_float32_accumulation_ms']:.2f}x), every GEMM "
                  f"fast {r['fused_mlp_fast_accumulation_ms']:.4f} ms "
                  f"({r['bf16_ms'] / r['fused_mlp_fast_accumulation_ms']:.2f}x)")
    print(f"\nconv3x3: {result['conv3x3']}")
    print("\n" + policy)


if __name__ == "__main__":
    main()

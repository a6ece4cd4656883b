"""The quantization areas' tables: fake quantization, packed-weight unpack, the FP8 layers and
MLP, the finalized layers."""

from __future__ import annotations

import re

from benchmarks.rendering.floors import CEILINGS, copy_floor_ms, gemm_floor_ms
from benchmarks.rendering.formatting import (
    median,
    missed_line,
    num,
    pct,
    ratio,
    span,
    table,
    times,
    verdict,
)
from benchmarks.rendering.fp8_policy import speedup_key
from benchmarks.rendering.results import load, source

FAKE_QUANT = "fake_quant_v4_h200_2026-12-01.json"


def _by_op(rows: list[dict], key: str) -> dict[str, dict[str, dict]]:
    """{op: {size: row}}, ops in the file's order."""
    out: dict[str, dict[str, dict]] = {}
    for r in rows:
        out.setdefault(r[key] if key != "format+dtype" else f"{r['format']}|{r['dtype']}",
                       {})[r["size"]] = r
    return out


def fake_quant() -> list[str]:
    data = load(FAKE_QUANT)["rows"]
    sizes = list(dict.fromkeys(r["size"] for r in data))
    rows, missed = [], []
    for op, by_size in _by_op(data, "config").items():
        target = {r["target_fraction"] for r in by_size.values()}.pop()
        cells = [op, pct(target)]
        for size in sizes:
            r = by_size[size]
            met = r["fraction_of_copy"] >= target
            cells.append(f"{copy_floor_ms(r['bytes_moved']):.3f} / {r['copy_ms']:.3f} / "
                         f"{r['kernel_ms']:.3f}, {pct(r['fraction_of_copy'])}"
                         + ("" if met else " **missed**"))
            if not met:
                missed.append(f"{op} at {size}: {pct(r['fraction_of_copy'])} of the copy "
                              f"against {pct(target)}")
            if r["speedup"] < 4:
                missed.append(f"{op} at {size}: {r['speedup']:.1f}x the reference against 4x")
        rows.append(cells + [" / ".join(f"{by_size[z]['speedup']:.0f}x" for z in sizes),
                             "equal" if all(r["bits_equal"] for r in by_size.values())
                             else "**differ**",
                             " / ".join(str(by_size[z]["launches_slot_call"]) for z in sizes)])
    header = ["op", "target (of copy)",
              *(f"{z}: floor / copy / ours ms, of copy" for z in sizes),
              f"vs reference, {' / '.join(sizes)}", "bits vs reference", "launches"]
    return [source([FAKE_QUANT], "bench-fq"), "", *table(header, rows), *missed_line(missed)]


UNPACK = "unpack_v5_h200_2026-12-02.json"


def unpack() -> list[str]:
    data = load(UNPACK)["rows"]
    sizes = list(dict.fromkeys(r["size"] for r in data))
    rows, missed = [], []
    for key, by_size in _by_op(data, "format+dtype").items():
        fmt, dtype = key.split("|")
        cells, speeds = [fmt, dtype], []
        for size in sizes:
            r = by_size[size]
            floor = copy_floor_ms(r["bytes_moved"])
            share_ok, speed_ok = r["fraction_of_copy"] >= 0.85, r["speedup"] >= 10
            cells.append(f"{floor:.3f} / {r['kernel_ms']:.3f}, {pct(r['fraction_of_copy'])}"
                         + ("" if share_ok else " **missed**"))
            speeds.append(f"{r['speedup']:.1f}x ({r['reference_ms'] / floor:.0f}x)"
                          + ("" if speed_ok else " **missed**"))
            if not share_ok:
                missed.append(f"{fmt} to {dtype} at {size}: {pct(r['fraction_of_copy'])} of the "
                              f"copy against 85%")
            if not speed_ok:
                missed.append(f"{fmt} to {dtype} at {size}: {r['speedup']:.1f}x the reference "
                              f"against 10x (the floor allows "
                              f"{r['reference_ms'] / floor:.1f}x)")
        rows.append(cells + speeds + ["equal" if all(r["bits_equal"] for r in by_size.values())
                                      else "**differ**"])
    header = ["format", "out", *(f"{z}: floor / ours ms, of copy" for z in sizes),
              *(f"{z}: vs reference (floor's)" for z in sizes), "bits vs reference"]
    return [source([UNPACK], "bench-unpack"), "", *table(header, rows), *missed_line(missed)]


FP8 = "fp8_v5_bias_kept_h200_2026-12-03.json"


def _fp8_floors(layer: dict) -> tuple[float, float]:
    m, k, n = layer["m"], layer["k"], layer["n"]
    return (gemm_floor_ms(m, k, n, 1, CEILINGS["fp8_tflop_s"], layer["bytes_fp8"]),
            gemm_floor_ms(m, k, n, 2, CEILINGS["bf16_tflop_s"], layer["bytes_bf16"]))


def fp8_layers() -> list[str]:
    """Each layer of a bench-fp8 run; an engaged layer must not be slower than what it replaces:
    the declined path in runs held to it (``"yardstick": "declined"``), bf16 in earlier runs."""
    rows, missed = [], []
    data = load(FP8)
    replaced = speedup_key(data)
    for r in data["layers"]:
        fp8, bf16 = _fp8_floors(r)
        ok = (not r["engage"]) or r[replaced] >= 1
        rows.append([r["layer"], f"{r['m']} x {r['k']} -> {r['n']}", f"{r['gflop']:.1f}",
                     f"{fp8 * 1e3:.1f} / {bf16 * 1e3:.1f}", f"{r['bf16_ms']:.4f}",
                     f"{r['fused_ms']:.4f} ({r['fused_graph_ms']:.4f})",
                     ratio(r["speedup_fused"]), "yes" if r["engage"] else "no",
                     verdict(ok)])
        if not ok:
            missed.append(f"{r['layer']}: engaged at {ratio(r[replaced])} what it replaces")
    header = ["layer", "M x K -> N", "GFLOP", "floor µs, fp8 / bf16", "bf16 F.linear ms",
              "fused FP8 ms (graph)", "bf16 / fused", "policy engages",
              "never slower than what it replaces"]
    return [source([FP8], "bench-fp8"), "", *table(header, rows), *missed_line(missed)]


def fp8_mlp() -> list[str]:
    data = load(FP8)
    layers = {r["layer"]: r for r in data["layers"]}
    stacks = {s["stack"]: s for s in data["stacks"]}
    rows, missed = [], []

    def stack_floor(stack: dict) -> float:
        return sum(_fp8_floors(layers[name])[0] for name in stack["layers"])

    def add(what, floor, peer, peer_ms, ours, ours_graph, target):
        value = peer_ms / ours
        cells = [what, f"{floor:.3f}", peer, f"{peer_ms:.4f} ms", f"{ours:.4f}",
                 "-" if ours_graph is None else f"{ours_graph:.4f}", ratio(value)]
        finish(cells, value, target, f">= {target}x", ratio)

    def finish(cells, value, target, shown, fmt):
        if target is None:
            cells += ["-", "-"]
        else:
            cells += [shown, verdict(value >= target)]
            if value < target:
                missed.append(f"{cells[0]}: {fmt(value)} against {shown}")
        rows.append(cells)

    vit = stacks["vitl_mlp_16384"]
    add("ViT-L MLP, M = 16384, GELU folded into fc2's prologue (`fused_fp8_mlp`)",
        stack_floor(vit), "bf16 F.linear x2", vit["bf16_ms"], vit["fused_mlp_ms"],
        vit["fused_mlp_graph_ms"], 1.4)
    add("the same as `FinalizedMLP`", stack_floor(vit), "bf16 F.linear x2", vit["bf16_ms"],
        vit["finalized_mlp_ms"], None, 1.4)
    add("ViT-L MLP, each layer fused", stack_floor(vit), "bf16 F.linear x2", vit["bf16_ms"],
        vit["fused_ms"], vit["fused_graph_ms"], None)
    for name, label in (("vitl_mlp_16384", "ViT-L MLP"), ("rtdetr_8400", "RT-DETR-like, M = 8400"),
                        ("rtdetr_16384", "RT-DETR-like, M = 16384")):
        s = stacks[name]
        add(f"{label}, under the policy", stack_floor(s), "bf16 F.linear", s["bf16_ms"],
            s["policy_ms"], s["policy_graph_ms"], 1.0)
    for b in data["bandwidth"]:
        what = (b["kernel"].replace("f32->bf16", "float32 -> bf16")
                .replace(" +bias relu", ", bias, ReLU"))
        copy_tb_s = b["tb_s"] / b["fraction_of_copy"]
        cells = [what, f"{copy_floor_ms(b['bytes']):.3f}", "device copy (same run)",
                 f"{copy_tb_s:.2f} TB/s", f"{b['kernel_ms']:.4f} ({b['tb_s']:.2f} TB/s)", "-",
                 pct(b["fraction_of_copy"]) + " of its TB/s"]
        finish(cells, b["fraction_of_copy"], b["target"], pct(b["target"]), pct)
    header = ["what", "floor ms", "peer", "peer", "ours ms", "ours, graph ms",
              "peer / ours", "target", ""]
    return [source([FP8], "bench-fp8"), "", *table(header, rows), *missed_line(missed)]


FINALIZED = "finalized_v3_h200_2026-12-03.json"


_LINEAR = re.compile(r"linear (\d+)x(\d+)->(\d+)")


_CONV = re.compile(r"conv(\d)x\d (\d+)->(\d+) @(\d+)x(\d+)")


#: bench_finalized.LAYERS runs its convolutions at batch 8.
CONV_BATCH = 8


def _layer_floor_ms(layer: str) -> float:
    """The dense bf16 layer's floor: max(its FLOPs at 777 TFLOP/s, input, weight and output
    once at the copy's rate); a convolution as the GEMM it lowers to."""
    if m := _LINEAR.fullmatch(layer):
        rows, k, n = map(int, m.groups())
        return gemm_floor_ms(rows, k, n, 2, CEILINGS["bf16_tflop_s"])
    m = _CONV.fullmatch(layer)
    size, cin, cout, h, w = map(int, m.groups())
    pixels = CONV_BATCH * h * w
    nbytes = 2 * (pixels * cin + size * size * cin * cout + pixels * cout)
    return gemm_floor_ms(pixels, size * size * cin, cout, 2, CEILINGS["bf16_tflop_s"], nbytes)


def finalized() -> list[str]:
    by_layer: dict[str, list[dict]] = {}
    for r in load(FINALIZED)["results"]:
        by_layer.setdefault(r["layer"], []).append(r)
    rows, missed = [], []
    for layer, entries in by_layer.items():
        groups = [("fused FP8", [e for e in entries if e["fused"]]),
                  ("dequantize once", [e for e in entries if not e["fused"]])]
        for path, group in groups:
            if not group:
                continue
            cells = [layer, path, ", ".join(e["format"] for e in group),
                     num(_layer_floor_ms(layer) * 1e3),
                     num(median(e["dense_graph_ms"] for e in group) * 1e3)]
            for suffix, key, mode in (("_graph", "meets_target_graph", "graph"),
                                      ("", "meets_target_eager", "eager")):
                ratios = [e["finalized_over_self" + suffix] for e in group]
                met = sum(e[key] for e in group)
                cells += [span(ratios, times), f"{met} of {len(group)}"]
                over = [x for e, x in zip(group, ratios, strict=True) if not e[key]]
                if over:
                    missed.append(f"{layer}, {mode}: {len(over)} of {len(group)} formats "
                                  f"({span(over, times)})")
            rows.append(cells)
    header = ["layer", "path", "formats", "floor µs (dense bf16)", "dense bf16, graph µs",
              "finalized / dequantized self, graph", "<= 1.02x", "the same, eager",
              "<= 1.02x"]
    return [source([FINALIZED], "bench-finalized"), "", *table(header, rows),
            *missed_line(missed)]

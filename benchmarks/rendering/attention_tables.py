"""The attention areas' tables: deformable attention (against its peer, ragged, the Hub's build)
and the SDPA call sites."""

from __future__ import annotations

import statistics

from benchmarks.rendering.floors import CEILINGS, attention_floor_us, kv_tokens, msda_bytes
from benchmarks.rendering.formatting import (
    median,
    missed_line,
    num,
    pct,
    ratio,
    span,
    table,
    verdict,
)
from benchmarks.rendering.results import ROOT, load, source, toml_cases

MSDA_SHAPES = ROOT / "conformance" / "shapes" / "ms_deform_attn.toml"


RAGGED_SHAPES = ROOT / "conformance" / "shapes" / "ms_deform_attn_ragged.toml"


MSDA = ["ms_deform_attn_v12_h200_2026-12-02.json", "ms_deform_attn_v12_run2_h200_2026-12-02.json",
        "ms_deform_attn_v12_run3_h200_2026-12-02.json",
        "ms_deform_attn_v12_run4_h200_2026-12-02.json"]


def round_ratio(ours: list[float], theirs: list[float]) -> float:
    return median([a / b for a, b in zip(ours, theirs, strict=True)])


def msda() -> list[str]:
    runs = [{r["case"]: r for r in load(f)["results"]} for f in MSDA]
    shapes = toml_cases(MSDA_SHAPES)
    rows, missed = [], []
    for case, last in runs[-1].items():
        fwd, fwd_bwd = (b / (CEILINGS["copy_tb_s"] * 1e12) * 1e6 for b in msda_bytes(shapes[case]))
        cells = [case, f"{num(fwd)} / {num(fwd_bwd)}"]
        for key in ("graph_forward_ms", "graph_forward_backward_ms"):
            ours, peer = median(last["triton"][key]) * 1e3, median(last["peer_function"][key]) * 1e3
            each = [median(r[case]["triton"][key]) / median(r[case]["peer_function"][key])
                    for r in runs]
            cells.append(f"{num(ours)} / {num(peer)} ({span(each, ratio)})")
            missed += [f"{case}, {key[:-3].replace('_', ' ')}: {ratio(x)}" for x in each if x >= 1]
        for ours_key, peer_key, key, label in (
                ("helper", "peer_function", "eager_forward_us", "helper fwd"),
                ("helper", "peer_function", "eager_forward_backward_us", "helper fwd+bwd"),
                ("module", "peer_module", "eager_forward_us", "module fwd"),
                ("module", "peer_module", "eager_forward_backward_us", "module fwd+bwd")):
            each = [round_ratio(r[case][ours_key][key], r[case][peer_key][key]) for r in runs]
            cells.append(" / ".join(ratio(x).rstrip("x") for x in each))
            missed += [f"{case}, eager {label} in run {i + 1}: {ratio(x)}"
                       for i, x in enumerate(each) if x >= 1]
        worst = max(max(r[case]["check"]["worst_error_over_bound"].values()) for r in runs)
        cells.append(f"{worst:.2f}")
        if worst > 1:
            missed.append(f"{case}: error {worst:.2f}x the bounded contract's bound")
        p, t = last["portable"], last["triton"]
        sf = median(p["forward_ms"]) / median(t["forward_ms"])
        sb = median(p["forward_backward_ms"]) / median(t["forward_backward_ms"])
        cells.append(f"{sf:.1f}x / {sb:.1f}x")
        encoder = case == "deformable_detr_encoder"
        if (encoder and (sf < 10 or sb < 5)) or sf <= 1 or sb <= 1:
            missed.append(f"{case} against the portable path: {sf:.1f}x / {sb:.1f}x")
        rows.append(cells)
    header = ["case", "floor µs fwd / fwd+bwd", "graph fwd µs ours / peer (ratio, 4 runs)",
              "graph fwd+bwd µs ours / peer (ratio, 4 runs)", "eager helper fwd, runs 1-4",
              "eager helper fwd+bwd, runs 1-4", "eager module fwd, runs 1-4",
              "eager module fwd+bwd, runs 1-4", "worst error / bound (4 runs)",
              "vs portable fwd / fwd+bwd (run 4)"]
    return [source(MSDA, "bench-msda"), "", *table(header, rows), *missed_line(missed)]


RAGGED = "ms_deform_attn_ragged_v4_h200_2026-12-01.json"


def ragged() -> list[str]:
    shapes = toml_cases(RAGGED_SHAPES)
    rows, missed = [], []
    for r in load(RAGGED)["results"]:
        fwd, _ = msda_bytes(shapes[r["case"]])
        p, t = r["portable"], r["triton"]
        speed = {}
        for key in ("forward_ms", "forward_backward_ms", "graph_forward_ms",
                    "graph_forward_backward_ms"):
            # a string is the error that stopped a measurement (the portable discrete path
            # cannot be captured in a CUDA graph)
            measured = all(isinstance(side.get(key), list) for side in (p, t))
            speed[key] = median(p[key]) / median(t[key]) if measured else None
        ours, classic = t["host_us"], r["classic_host_us"]
        host_ok = ours["median"] <= classic["q3"]
        fwd_ok = all(speed[k] is None or speed[k] >= 5 for k in ("forward_ms", "graph_forward_ms"))
        bwd_ok = all(speed[k] is None or speed[k] >= 3
                     for k in ("forward_backward_ms", "graph_forward_backward_ms"))

        def x(key, speed=speed):
            return "n/a" if speed[key] is None else f"{speed[key]:.1f}x"

        rows.append([r["case"], r["method"], num(fwd / (CEILINGS['copy_tb_s'] * 1e12) * 1e6),
                     f"{median(t['forward_ms']) * 1e3:.0f}", f"{x('forward_ms')} / "
                     f"{x('graph_forward_ms')}", verdict(fwd_ok),
                     f"{x('forward_backward_ms')} / {x('graph_forward_backward_ms')}",
                     verdict(bwd_ok),
                     f"{ours['median']:.0f} ({ours['q1']:.0f}-{ours['q3']:.0f}) / "
                     f"{classic['median']:.0f} ({classic['q1']:.0f}-{classic['q3']:.0f})",
                     verdict(host_ok)])
        if not (fwd_ok and bwd_ok and host_ok):
            missed.append(r["case"])
    header = ["case", "sampling", "floor fwd µs", "ours fwd µs (eager)",
              "fwd vs portable, eager / graph (target 5x)", "",
              "fwd+bwd vs portable, eager / graph (target 3x)", "",
              "host µs, ragged / classic kernel: median (quartiles)", "no more than classic"]
    return [source([RAGGED], "bench-ragged"), "", *table(header, rows), *missed_line(missed)]


HUB = "ms_deform_attn_hub_h200_2026-12-01.json"


def hub() -> list[str]:
    shapes = toml_cases(MSDA_SHAPES)
    rows = []
    for r in load(HUB)["results"]:
        fwd, fwd_bwd = (b / (CEILINGS["copy_tb_s"] * 1e12) * 1e6
                        for b in msda_bytes(shapes[r["case"]]))
        cells = [r["case"], f"{num(fwd)} / {num(fwd_bwd)}"]
        for key in ("forward_ms", "forward_backward_ms", "graph_forward_ms",
                    "graph_forward_backward_ms"):
            ours, theirs = median(r["triton"][key]) * 1e3, median(r["hub"][key]) * 1e3
            cells.append(f"{num(ours)} / {num(theirs)} = {ratio(ours / theirs)}")
        rows.append(cells)
    header = ["case", "floor µs fwd / fwd+bwd", "eager fwd µs, Triton / Hub",
              "eager fwd+bwd µs", "graph fwd µs", "graph fwd+bwd µs"]
    return [source([HUB], "hub"), "", *table(header, rows),
            "", "No target: the Hub kernel is the opt-in peer (below 1x Triton is faster)."]


ATTENTION = "attention_v3_h200_2026-12-01.json"


ATTENTION_TARGET = 0.9


def saving_ratios(r: dict, measure: str) -> list[float]:
    """Per round: the module's saving over the bare kernels' (bench_attention.round_ratios)."""
    eager = r["eager"]
    names = ("module_manual", "module_fused", "bare_manual", "bare_sdpa")
    out = []
    for mm, mf, bm, bs, *queued in zip(*(eager[n][measure] for n in names),
                                       *(eager[n]["queued"] for n in names), strict=True):
        if (measure == "host_us" or all(queued)) and bm - bs > 0:
            out.append((mm - mf) / (bm - bs))
    return out


def attention() -> list[str]:
    keys = kv_tokens()
    rows, missed = [], []
    for r in load(ATTENTION)["results"]:
        mm, mf, bm, bs = (median(r[f"{n}_graph_ms"]) * 1e3 for n in
                          ("module_manual", "module_fused", "bare_manual", "bare_sdpa"))
        graph = (mm - mf) / (bm - bs) if bm - bs > 0 else float("nan")
        eager = saving_ratios(r, "gpu_us")
        q1, q2, q3 = statistics.quantiles(eager, n=4)
        met = q2 >= ATTENTION_TARGET and graph >= ATTENTION_TARGET
        rows.append([r["site"], f"{r['batch']} x {r['tokens']}", ", ".join(sorted(set(
            r["sdpa_backends"]))), num(attention_floor_us(r, keys[r['site']])),
            f"{bs:.1f} / {bm:.1f}", f"{pct(q2)} [{pct(q1)}, {pct(q3)}]", pct(graph),
            verdict(met)])
        if not met:
            missed.append(r["site"])
    header = ["call site", "batch x tokens", "SDPA backend", "bare SDPA floor µs",
              "bare kernels, graph µs: SDPA / manual", "module's saving, eager GPU: median "
              "[quartiles]", "module's saving, graph", "target 90%"]
    return [source([ATTENTION], "bench-attn"), "", *table(header, rows), *missed_line(missed)]

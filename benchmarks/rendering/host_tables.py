"""The host side's tables: the registry's and the providers' per-call host time, and
torch.compile's."""

from __future__ import annotations

from benchmarks.bench.compile_targets import (
    COMPILED_OVER_EAGER,
    MAX_COMPILES,
    MLP_COMPILED_OVER_BF16,
    SLOT_OVER_FLOOR_HOST,
)
from benchmarks.rendering.formatting import missed_line, ratio, table, verdict
from benchmarks.rendering.results import index, load, source

HOST = "host_v14_rooms_h200_2026-12-07.json"


#: The commit before the registry's rooms (issue 51), its bench_host in the same call: the
#: restructure's cost, in torch.negs
HOST_BASE = "host_v14_base_7130c61_h200_2026-12-07.json"


#: A restructure may cost at most this much host time per call (issues 34 and 51)
RESTRUCTURE_BUDGET = 0.05


def host() -> list[str]:
    run, base = load(HOST), load(HOST_BASE)
    rows, missed = [], []
    for r, b in zip(run["registry"], base["registry"], strict=True):
        assert r["case"] == b["case"], (r, b)
        rows.append([f"registry dispatch, {r['case']}", "-", f"{r['overhead_us']:.1f}",
                     f"{r['judge_us']:.1f}", "-", f"{b['overhead_us']:.1f} µs",
                     f"{r['target_us']:.0f} (judge {r['judge_target_us']:.0f})", "-",
                     verdict(r["overhead_us"] <= r["target_us"] and r["judge_met"])])
        if not r["judge_met"]:
            missed.append(f"the output judge on {r['case']}: {r['judge_us']:.1f} µs "
                          f"(target {r['judge_target_us']:.0f})")
    over_budget = []
    for group in ("fake_quant", "unpack"):
        for r, b in zip(run[group], base[group], strict=True):
            assert r["call"] == b["call"] and r["implementation"] == "triton", (r, b)
            growth = r["negs"] / b["negs"] - 1
            met = r["host_us"] <= r["target_us"] and r["steady_state_sync"] is None
            rows.append([r["call"], f"{r['neg_us']:.1f}", f"{r['host_us']:.1f}",
                         f"{r['judge_us']:.1f}", f"{r['negs']:.2f}",
                         f"{b['negs']:.2f} ({growth:+.0%})", f"{r['target_us']:.0f}",
                         "none" if r["steady_state_sync"] is None else
                         str(r["steady_state_sync"]), verdict(met)])
            if not met:
                missed.append(f"{r['call']}: {r['host_us']:.1f} µs")
            if growth > RESTRUCTURE_BUDGET:
                over_budget.append(growth)
    if over_budget:
        missed.append(f"{len(over_budget)} of {len(rows) - len(run['registry'])} calls cost more "
                      f"than {RESTRUCTURE_BUDGET:.0%} over the base commit in torch.negs "
                      f"(up to {max(over_budget):+.0%})")
    header = ["Triton call (64K float32; unpack: 256x256 to bf16)", "torch.neg µs", "host µs",
              "of it, the output judge µs", "in torch.negs",
              f"at {base_commit(HOST_BASE)}, in torch.negs", "target µs", "steady-state sync",
              ""]
    return [source([HOST, HOST_BASE], "bench-host bench-host-old"), "", *table(header, rows),
            *missed_line(missed)]


def base_commit(name: str) -> str:
    return index()[name]["commit"]


COMPILE = "compile_v5_quick_h100_2026-12-07.json"


def compiled() -> list[str]:
    data = load(COMPILE)
    rows, missed, compiles, calls_missed, by_call = [], [], [], 0, {}
    for r in data["rows"]:
        if "compiles" in r:
            compiles.append(f"`{r['slot']}` {r['compiles']}")
            if r["compiles"] > MAX_COMPILES:
                missed.append(f"`{r['slot']}` with dynamic=True: {r['compiles']} compiles")
        else:
            by_call.setdefault(f"`{r['slot']}` {r['case']}", {})[r["backward"]] = r
    for what, passes in by_call.items():
        fwd, bwd = passes[False], passes[True]
        if not (fwd["same_bits"] and bwd["same_bits"]):
            rows.append([what, "**differ**", *["-"] * 5])
            missed.append(f"{what}: compiled bits differ from eager")
            continue
        met = max(fwd["ratio"], bwd["ratio"], fwd["reduce_overhead_ratio"]) <= COMPILED_OVER_EAGER
        calls_missed += not met
        rows.append([what, "equal" if fwd["reduce_overhead_same_bits"] else "replay differs",
                     f"{fwd['eager_us']:.0f} / {fwd['compiled_us']:.0f} = {ratio(fwd['ratio'])}",
                     f"{bwd['eager_us']:.0f} / {bwd['compiled_us']:.0f} = {ratio(bwd['ratio'])}",
                     f"{fwd['eager_host_us']:.0f} / {fwd['compiled_host_us']:.0f}",
                     f"{fwd['graph_ms']:.3f} / {fwd['reduce_overhead_ms']:.3f} = "
                     f"{ratio(fwd['reduce_overhead_ratio'])}", verdict(met)])
    if calls_missed:
        missed.insert(0, f"{calls_missed} of {len(rows)} calls")
    mlp = data["mlp"][0]
    us = mlp["us"]
    mlp_line = (f"The FP8 ViT-L MLP (16,384 tokens, µs a call in queued windows): bf16 eager "
                f"{us['bf16 eager']:.0f}, FP8 eager {us['fp8 eager']:.0f} "
                f"({ratio(mlp['fp8_over_bf16_eager'])}); bf16 compiled "
                f"{us['bf16 compiled (default)']:.0f}, FP8 compiled "
                f"{us['fp8 compiled (default)']:.0f} ({ratio(mlp['fp8_over_bf16_compiled'])}, "
                f"target {MLP_COMPILED_OVER_BF16}x: "
                f"{verdict(mlp['fp8_over_bf16_compiled'] >= MLP_COMPILED_OVER_BF16)}); "
                f"reduce-overhead {ratio(mlp['fp8_over_bf16_reduce_overhead'])}")
    if mlp["fp8_over_torchao_compiled"] is not None:
        mlp_line += (f"; torchao's float8 compiled {us['torchao compiled (default)']:.0f}, so "
                     f"FP8 compiled is {ratio(mlp['fp8_over_torchao_compiled'])} torchao")
    if mlp["fp8_over_bf16_compiled"] < MLP_COMPILED_OVER_BF16:
        missed.append("the FP8 ViT-L MLP compiled against bf16 compiled")
    header = ["call", "bits", "fwd µs: eager / compiled", "fwd+bwd µs: eager / compiled",
              "fwd host µs", "fwd replay ms: captured eager / reduce-overhead",
              f"all <= {COMPILED_OVER_EAGER}x"]
    return [source([COMPILE], "bench-compile"), "", *table(header, rows), "",
            f"`dynamic=True` over five sizes: {', '.join(compiles)} compiles (target <= "
            f"{MAX_COMPILES}). {mlp_line}.", *floor_line(data.get("floor")),
            *slot_floor_lines(data.get("slot_floors"), missed), *missed_line(missed)]


def floor_line(floor: list | None) -> list[str]:
    """What torch.compile costs a call that does no work (in runs made since bench_compile has
    floor rows; none before)."""
    if not floor:
        return []
    parts = [f"{r['case']} {'fwd+bwd' if r['backward'] else 'fwd'} "
             f"{r['eager_us']:.0f} / {r['compiled_us']:.0f} µs ({ratio(r['ratio'])}; host "
             f"{r['eager_host_us']:.0f} / {r['compiled_host_us']:.0f} µs)"
             for r in floor if r.get("same_bits")]
    return ["", "The floor, a call that does no work, eager / compiled: " + "; ".join(parts)
            + ". A compiled row's host time reads beside it."]


def slot_floor_lines(floors: list | None, missed: list[str]) -> list[str]:
    """Each compiled slot call beside its floor, the same kernels in a bare ``triton_op`` (in
    runs made since bench_compile has them; none before); a host ratio over the target joins
    ``missed``."""
    if not floors:
        return []
    parts = []
    for r in floors:
        what = f"`{r['slot']}` {'fwd+bwd' if r['backward'] else 'fwd'}"
        if "host_ratio" not in r:
            parts.append(f"{what} not measured ({r.get('skipped') or r.get('error', '')})")
            missed.append(f"{what}: no floor measured")
            continue
        parts.append(f"{what} {r['slot_host_us']:.0f} / {r['floor_host_us']:.0f} µs "
                     f"({ratio(r['host_ratio'])})")
        if r["host_ratio"] > SLOT_OVER_FLOOR_HOST:
            missed.append(f"{what}: compiled host time {ratio(r['host_ratio'])} its floor's")
    return ["", "Host time a call, compiled slot / its floor (the same kernels in a bare "
            f"`triton_op`, no registry; target <= {SLOT_OVER_FLOOR_HOST}x): "
            + "; ".join(parts) + "."]

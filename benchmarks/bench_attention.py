"""Benchmark fused (SDPA) against manual attention at every family call site on a CUDA GPU.

Usage: ``python benchmarks/bench_attention.py OUT.json [--iters 50] [--sites SITE_ID ...]``

For each call site of ``libreyolo/kernels/attention/families.toml``, at its real sizes, under
float16 autocast, with no gradient:
- **module**: the site's attention module, projections included, with ``fused_attn`` off and on;
- **bare**: the attention kernels alone on the very q, k, v and mask tensors the fused module hands
  to SDPA (recorded from one call; ZipDepth's module makes two calls, both are timed):
  ``scaled_dot_product_attention`` against the family's manual equation (scale on q or on the
  scores, the additive or boolean mask added before the softmax).
Each is timed with CUDA events, eagerly and as CUDA-graph replays (which leave only the GPU's
work), median of ``--iters`` runs after a warm-up; caches stay warm (no L2 flush: both paths read
the same tensors). A module step is the module's forward as a user calls it (one module per
path, the flag set once). Eagerly, the fused module's first call (the check below) builds the
folded mask it keeps, and the timed calls reuse it: the masks are the same tensors every call,
as Swin's registered ``attn_mask`` buffer is; a caller that builds a fresh mask tensor every call
pays the fold on every call. Inside CUDA-graph capture the module does not keep the mask (the
graph computes it from the parameters), so the graph column includes the fold. Before timing,
the fused module's output is checked against the manual one (largest difference at most 2e-2 of
the largest magnitude: a sanity check; the bounded contract is
``tests/attention/test_fused_conformance.py`` on a CUDA machine).

Two more columns: the backend SDPA picks for the fused module's calls
(``torch._fused_sdp_choice`` on the recorded tensors; a math fallback there is slow), and, as a
measured option only (nothing selects it by default), the fused module and the bare SDPA with the
cuDNN backend forced (``sdpa_kernel(SDPBackend.CUDNN_ATTENTION)``, eager), with the saving ratio
it would give; "declines" where cuDNN does not take the call.

Target (issue 19): at every call site the time the module saves per call is at least 90% of the
time the bare kernels save. Writes the raw numbers as JSON and prints a markdown table. Expected
to take about two minutes on an H200.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import statistics
import sys
import warnings
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_ms_deform_attn import time_graph_ms, time_ms  # noqa: E402
from libreyolo.kernels.attention import families  # noqa: E402
from libreyolo.kernels.attention.evidence import prepared  # noqa: E402
from libreyolo.nn import attention as nn_attention  # noqa: E402

TARGET = 0.9
BACKEND_NAMES = {int(value): name.lower() for name, value in SDPBackend.__members__.items()}
SCALE_ON_SCORES = ("spatial_reduction", "tinyvit", "projected", "global_tokens")


def autocast():
    # the autocast weight cache must be off for CUDA-graph capture
    return torch.autocast("cuda", dtype=torch.float16, cache_enabled=False)


def recorded_sdpa_calls(module, args, kwargs) -> list[dict]:
    """The q, k, v, mask and scale of every SDPA call the fused module makes, from one call."""
    calls = []
    real = nn_attention.sdpa

    def record(q, k, v, attn_mask=None, scale=None):
        # a float mask as autocast hands it to SDPA: in the query's dtype
        mask = attn_mask
        if mask is not None and mask.is_floating_point():
            mask = mask.to(q.dtype)
        calls.append(dict(q=q, k=k, v=v, attn_mask=mask, scale=scale))
        return real(q, k, v, attn_mask=attn_mask, scale=scale)

    nn_attention.sdpa = record
    try:
        module.fused_attn = True
        with torch.no_grad(), autocast():
            module(*args, **kwargs)
    finally:
        nn_attention.sdpa = real
    return calls


def _manual(site, q, k, v, attn_mask, scale):
    if site.module in SCALE_ON_SCORES:
        scores = (q @ k.transpose(-2, -1)) * scale
    else:
        scores = (q * scale) @ k.transpose(-2, -1)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    elif attn_mask is not None:
        scores = scores + attn_mask
    return scores.softmax(-1) @ v


def bare_steps(site, calls):
    """(manual, sdpa) closures: the family's equation and SDPA on the same tensors, for every
    SDPA call the module makes."""

    def manual():
        with torch.no_grad():
            return [_manual(site, **call) for call in calls]

    def fused():
        with torch.no_grad():
            return [torch.nn.functional.scaled_dot_product_attention(
                c["q"], c["k"], c["v"], attn_mask=c["attn_mask"], scale=c["scale"]) for c in calls]

    return manual, fused


def module_step(module, args, kwargs):
    def step():
        with torch.no_grad(), autocast():
            return module(*args, **kwargs)

    return step


def chosen_backends(calls) -> list[str]:
    """The backend SDPA picks for each recorded call, by its own dispatcher."""
    return [BACKEND_NAMES[torch._fused_sdp_choice(c["q"], c["k"], c["v"], c["attn_mask"], 0.0,
                                                  False, scale=c["scale"])] for c in calls]


def time_forced(backend, step, iters: int) -> list[float] | None:
    """Eager times of ``step`` with only ``backend`` allowed; None where it declines the call."""
    with sdpa_kernel(backend):
        try:
            with warnings.catch_warnings():  # SDPA warns why each backend declined
                warnings.simplefilter("ignore")
                step()
        except RuntimeError:
            return None
        return time_ms(step, iters)


def check(site, manual_step, fused_step) -> float:
    manual, fused = manual_step().float(), fused_step().float()
    relative = ((fused - manual).abs().max() / manual.abs().max()).item()
    if not relative <= 2e-2:
        raise SystemExit(f"{site.id}: fused output differs from manual by {relative:.3g} relative")
    return relative


def bench_site(site, iters: int) -> dict:
    module, args, kwargs = prepared(site, dtype=torch.float32, device="cuda", fused_attn=True)
    manual = copy.deepcopy(module)
    manual.fused_attn = False
    manual_module = module_step(manual, args, kwargs)
    fused_module = module_step(module, args, kwargs)
    result = {"site": site.id, "batch": site.batch, "tokens": site.tokens, "dim": site.dim,
              "heads": site.heads, "check_relative_diff": check(site, manual_module, fused_module)}
    calls = recorded_sdpa_calls(module, args, kwargs)
    result["sdpa_backends"] = chosen_backends(calls)
    manual_bare, fused_bare = bare_steps(site, calls)
    steps = {"module_manual": manual_module, "module_fused": fused_module,
             "bare_manual": manual_bare, "bare_sdpa": fused_bare}
    for name, step in steps.items():
        result[f"{name}_ms"] = time_ms(step, iters)
        result[f"{name}_graph_ms"] = time_graph_ms(step, iters)
    cudnn = SDPBackend.CUDNN_ATTENTION
    result["module_fused_cudnn_ms"] = time_forced(cudnn, fused_module, iters)
    result["bare_sdpa_cudnn_ms"] = time_forced(cudnn, fused_bare, iters)
    return result


def saving_ratio(r: dict, suffix: str, fused: str = "") -> tuple[float, float, float]:
    """(module saving, bare saving, module / bare) in ms, from medians; ``fused`` picks the
    fused side's timings (``"_cudnn"``: with cuDNN forced)."""
    med = statistics.median
    m = med(r[f"module_manual{suffix}"]) - med(r[f"module_fused{fused}{suffix}"])
    b = med(r[f"bare_manual{suffix}"]) - med(r[f"bare_sdpa{fused}{suffix}"])
    return m, b, (m / b if b > 0 else float("nan"))


def _ratio(m: float, b: float, ratio: float) -> str:
    return "(SDPA slower)" if b <= 0 else f"{ratio:.0%}"


def cudnn_cell(r: dict) -> str:
    med = statistics.median
    if r["module_fused_cudnn_ms"] is None or r["bare_sdpa_cudnn_ms"] is None:
        return "declines"
    return (f"{med(r['module_fused_cudnn_ms']):.3f} / {med(r['bare_sdpa_cudnn_ms']):.3f} "
            f"({_ratio(*saving_ratio(r, '_ms', '_cudnn'))})")


def table(results: list[dict]) -> str:
    med = statistics.median
    rows = ["| call site | batch x tokens | module manual / fused ms | bare manual / SDPA ms | "
            "saved: module / bare ms | module / bare saving | same, CUDA graphs | >= 90% | "
            "SDPA backend | cuDNN forced: fused / SDPA ms (saving) |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        saved, bare_saved, ratio = saving_ratio(r, "_ms")
        graph = saving_ratio(r, "_graph_ms")
        rows.append(
            f"| {r['site']} | {r['batch']} x {r['tokens']} | {med(r['module_manual_ms']):.3f} / "
            f"{med(r['module_fused_ms']):.3f} | {med(r['bare_manual_ms']):.3f} / "
            f"{med(r['bare_sdpa_ms']):.3f} | {saved:.3f} / {bare_saved:.3f} | "
            f"{_ratio(saved, bare_saved, ratio)} | {_ratio(*graph)} | "
            f"{'yes' if ratio >= TARGET else 'no'} | {', '.join(r['sdpa_backends'])} | "
            f"{cudnn_cell(r)} |")
    return "\n".join(rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where to write the raw JSON")
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--sites", nargs="*", help="call-site ids (default: every one)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU")
    sites = [s for s in families.sites() if not args.sites or s.id in args.sites]
    results = [bench_site(site, args.iters) for site in sites]
    environment = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "cuda": torch.version.cuda, "python": platform.python_version()}
    args.out.write_text(json.dumps({"environment": environment, "results": results}, indent=1))
    print(table(results))


if __name__ == "__main__":
    main()

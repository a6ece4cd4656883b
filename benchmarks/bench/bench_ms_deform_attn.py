"""Benchmark the ms_deform_attn Triton kernels on a CUDA GPU, side by side with Deformable
DETR's compiled op when a source checkout of it is given.

Usage: ``[LIBREYOLO_PEER_DEFORMABLE_DETR=DIR] python benchmarks/bench/bench_ms_deform_attn.py
OUT.json [--dtype float32] [--iters 50]``

For each real configuration of the shape set (medium and large cases): check the Triton
implementation against the float64 portable core on fresh random inputs (bounded contract,
forward and gradients, plus the backward's run-to-run spread over 20 runs), then time with CUDA
events (medians), forward and forward+backward:

* the kernels called directly, and the portable core;
* eager through the public helper ``maybe_ms_deform_attn`` and through ``MSDeformAttn`` (these
  include the host path: dispatch, validation, launch), as a model runs them: windows of
  ``EAGER_CALLS`` calls back to back with no sync between them, CUDA events around the window,
  so a call costs whichever of its host time and its GPU work is longer; each round times one
  window of every step (ours and the peer's interleaved, the order rotated each round), and
  the verdict is the median over rounds of ours / theirs within a round. (v6 and before timed
  one call between two events after a sync: that measured a wake-up from idle as much as the
  call, and moved the same code by tens of percent from one machine start to the next.) The
  host's time a call is recorded from the same windows;
* the helper's steps as CUDA-graph replays, which leave only the GPU's work (the portable core
  reads ``spatial_shapes`` on the host, so it cannot be captured).

With ``LIBREYOLO_PEER_DEFORMABLE_DETR`` naming a folder that holds ``models/ops`` of
``fundamentalvision/Deformable-DETR`` (and a ``COMMIT`` file), its op is built by
``benchmarks/peers/build_deformable_detr.py`` and the same rows are timed for its autograd
Function (eager and graph replay, on the case's own tensors: the call makes them contiguous, as
its op requires and as our slot does inside) and its ``MSDeformAttn`` module (same weights, level
sizes as the int64 tensor that module takes); the JSON records the source commit. (v4 handed the
Function copies made contiguous outside the timed call, which spared it the copy a channel-major
value costs our side.) Without it the benchmark runs and says so.

With ``LIBREYOLO_HUB_LOCAL_BUILD`` naming a folder written by ``benchmarks/hub/build_msda.py``
(and ``HF_HUB_OFFLINE=1``, ``HF_HUB_CACHE`` its ``hf-cache``), the ``hub`` implementation is
loaded from that build under its test lock, checked like the Triton one, and timed beside it
(float32 only: the Hub kernel is taken for float32), eager and graph replay; the JSON records the
build (source commit, flags). ``--skip-host-path`` leaves out the helper, module and peer rows.
Writes the raw numbers as JSON and prints markdown tables. Takes a few minutes on an H200, most
of it Triton and nvcc compilation.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.profiles.msda_host_profile import (  # noqa: E402
    DEFAULT_CASES as DEFAULT_PROFILE_CASES,
)
from benchmarks.profiles.msda_host_profile import profile_cases  # noqa: E402
from conformance.inputs.ms_deform_attn_cases import load_cases, make_inputs  # noqa: E402
from conformance.running.ms_deform_attn_parity import bounded_check  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn import maybe_ms_deform_attn  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn.portable import (  # noqa: E402
    ms_deform_attn_portable,
)
from libreyolo.kernels.attention.ms_deform_attn.triton_provider import (  # noqa: E402
    _MSDeformAttnFunction,
    ms_deform_attn_triton,
)
from libreyolo.nn import MSDeformAttn  # noqa: E402

IMPLEMENTATIONS = {"portable": ms_deform_attn_portable, "triton": ms_deform_attn_triton}
SPREAD_RUNS = 20
PEER_VARIABLE = "LIBREYOLO_PEER_DEFORMABLE_DETR"
HUB_VARIABLE = "LIBREYOLO_HUB_LOCAL_BUILD"
# Deformable DETR's modules pass im2col_step=64 (models/ops/modules/ms_deform_attn.py).
PEER_IM2COL_STEP = 64
HOST_CALLS = 200
PROFILE_CALLS = 300
#: Calls a window of the eager rows, and rounds of windows (each round times every step once).
#: 60 rounds since v12: a decoder's forward+backward window is host-bound (~250-800 µs a call on
#: the H200's host, most of it torch's autograd engine, which ours and the peer's pay alike), and
#: its per-round ratio ranged 0.7-2.1x within one run, so v11's 15 rounds left the median's
#: verdict at the mercy of a few windows (one decoder lost at 1.02-1.03x in two runs of three).
EAGER_CALLS = 20
EAGER_ROUNDS = 60


def time_ms(step, iters: int, warmup: int = 5) -> list[float]:
    """Per-iteration times of ``step()`` in milliseconds, measured with CUDA events."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


#: Replays timed back to back per measurement: one replay of a small decoder call is ~10 µs of
#: GPU work, the size of a graph launch's own latency from an idle device, so a single replay
#: between two events measured the launch as much as the kernels (run to run, the same kernel
#: read 11 and 18 µs); back to back, the device stays busy and the time is the graph's work.
GRAPH_REPLAYS = 20


def time_graph_ms(step, iters: int, warmup: int = 3) -> list[float]:
    """Per-replay times of ``step`` captured in a CUDA graph (warmed up on a side stream first,
    as capture requires), in milliseconds: each the mean of ``GRAPH_REPLAYS`` back-to-back
    replays."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()

    def replays():
        for _ in range(GRAPH_REPLAYS):
            graph.replay()

    return [t / GRAPH_REPLAYS for t in time_ms(replays, iters, warmup=1)]


def eager_window(step, calls: int = EAGER_CALLS) -> tuple[float, float]:
    """(µs a call as a model runs them, µs of host time a call): ``calls`` calls of ``step``
    back to back from an idle device, no sync between them, CUDA events around the window."""
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    began = time.perf_counter()
    for _ in range(calls):
        step()
    host = time.perf_counter() - began
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls, host * 1e6 / calls


def interleaved_eager(steps: dict, rounds: int = EAGER_ROUNDS) -> dict:
    """Per step name, ``{"eager_us": [...], "host_us": [...]}`` over ``rounds`` rounds; each
    round times one window of every step, in an order rotated by one each round, so a drift of
    the host (clocks, another tenant) reaches every step alike."""
    for step in steps.values():  # warm-up: compiles, plans, level sizes read once
        eager_window(step, 3)
    out = {name: {"eager_us": [], "host_us": []} for name in steps}
    names = list(steps)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            eager, host = eager_window(steps[name])
            out[name]["eager_us"].append(eager)
            out[name]["host_us"].append(host)
    return out


def host_us(step, calls: int = HOST_CALLS) -> float:
    """Host time per call of ``step`` back to back (microseconds), the device left to catch up
    afterwards: what a detector made of small calls pays when the GPU is not the bottleneck."""
    step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        step()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


@dataclass
class Peer:
    """Deformable DETR's compiled op: its autograd Function and module, and the source commit."""

    function: type
    module: type
    commit: str | None


def load_peer() -> tuple[Peer | None, str]:
    """The peer op when ``LIBREYOLO_PEER_DEFORMABLE_DETR`` names a checkout, and a status line."""
    source = os.environ.get(PEER_VARIABLE)
    if not source:
        return None, (f"not compared: set {PEER_VARIABLE} to a folder holding Deformable-DETR's "
                      "models/ops (fundamentalvision/Deformable-DETR)")
    from peers.build_deformable_detr import load_op

    try:
        op, commit = load_op(source)
        # its Python files import the compiled module by this name
        sys.modules.setdefault("MultiScaleDeformableAttention", op)
        # ``ops`` as the top package: a full checkout's ``models/__init__.py`` imports the whole
        # detector (and torchvision internals that newer torchvision lacks), which the op needs not
        sys.path.insert(0, str(Path(source).resolve() / "models"))
        from ops.functions import MSDeformAttnFunction
        from ops.modules import MSDeformAttn as PeerModule
    except Exception as exc:  # noqa: BLE001 - our numbers are still worth the run
        return None, f"not compared: building {source} failed ({type(exc).__name__}: {exc})"
    return Peer(MSDeformAttnFunction, PeerModule, commit), f"compared: commit {commit}"


def steps(fn, value, shapes, locations, weights):
    """(forward, forward+backward) closures for one implementation on fixed inputs."""
    leaves = [t.detach().clone().requires_grad_() for t in (value, locations, weights)]
    grad = torch.randn(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3],
                       device=value.device, dtype=value.dtype)

    def forward():
        with torch.no_grad():
            fn(value, shapes, locations, weights)

    def forward_backward():
        for leaf in leaves:
            leaf.grad = None
        fn(leaves[0], shapes, leaves[1], leaves[2]).backward(grad)

    return forward, forward_backward


def load_hub() -> tuple[dict | None, str]:
    """The hub implementation on a local build (its build.json) when ``LIBREYOLO_HUB_LOCAL_BUILD``
    names one, and a status line."""
    build = os.environ.get(HUB_VARIABLE)
    if not build:
        return None, (f"not compared: set {HUB_VARIABLE} to a folder written by "
                      "benchmarks/hub/build_msda.py")
    from libreyolo.kernels.attention.ms_deform_attn import hub_provider
    from libreyolo.kernels.hub import lock

    lock.LOCK_FILE = Path(build) / "lock.toml"
    try:
        hub_provider.kernel()
    except Exception as exc:  # noqa: BLE001 - the other rows are still worth the run
        return None, f"not compared: loading the Hub kernel failed ({type(exc).__name__}: {exc})"
    info = json.loads((Path(build) / "build.json").read_text())
    IMPLEMENTATIONS["hub"] = hub_provider.ms_deform_attn_hub
    return info, (f"compared: a local build of kernels-community@{info['source_commit'][:12]} "
                  f"({info['variant']}, {' '.join(info['cuda_flags'])}), not the upstream binary")


def backward_spread(value, shapes, locations, weights, fn=ms_deform_attn_triton
                    ) -> dict[str, float]:
    """Largest difference between runs of each gradient (atomic adds make them order-dependent)."""
    runs = []
    grad = torch.randn(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3],
                       device=value.device, dtype=value.dtype)
    for _ in range(SPREAD_RUNS):
        leaves = [t.detach().clone().requires_grad_() for t in (value, locations, weights)]
        fn(leaves[0], shapes, leaves[1], leaves[2]).backward(grad)
        runs.append([leaf.grad for leaf in leaves])
    names = ("grad_value", "grad_sampling_locations", "grad_attention_weights")
    return {name: max((run[i] - runs[0][i]).abs().max().item() for run in runs)
            for i, name in enumerate(names)}


def verify(case, dtype, fn=ms_deform_attn_triton) -> dict:
    """Bounded contract on fresh inputs, every one of 20 backward runs, and their spread."""
    inputs = make_inputs(case, dtype=dtype, device="cuda", seed=1234)
    verdicts = []
    for seed in range(SPREAD_RUNS):
        verdicts += bounded_check(fn, *inputs, seed=seed)
    failed = [v for v in verdicts if not v.passed]
    if failed:
        raise SystemExit(f"{case.name}: {fn.__name__} outside the bounded contract: {failed[:4]}")
    worst = {}
    for v in verdicts:
        worst[v.quantity] = max(worst.get(v.quantity, 0.0), v.error / v.bound if v.bound else 0)
    return {"worst_error_over_bound": worst, "backward_spread": backward_spread(*inputs, fn=fn)}


def _helper(value, shapes, locations, weights):
    out = maybe_ms_deform_attn(value, shapes, locations, weights)
    if out is None:
        raise SystemExit("maybe_ms_deform_attn declined a benchmark input: see explain()")
    return out


def _peer_function(peer: Peer, levels):
    """Deformable DETR's autograd Function with the slot's signature (level sizes and starts as
    the int64 device tensors it takes, made once). Its op asserts contiguous tensors, so the call
    makes them contiguous, as ours does inside the slot: a channel-major value (RF-DETR's,
    D-FINE's layout) costs both sides the same copy, and a contiguous one costs neither."""
    shapes = torch.tensor(levels, dtype=torch.int64, device="cuda")
    starts = torch.cat((shapes.new_zeros(1), shapes.prod(1).cumsum(0)[:-1]))

    def call(value, _spatial_shapes, locations, weights):
        return peer.function.apply(value.contiguous(), shapes, starts, locations.contiguous(),
                                   weights.contiguous(), PEER_IM2COL_STEP)

    return call


def module_steps(module, query, reference, value, shapes, starts):
    """(forward, forward+backward) closures of a module with Deformable DETR's forward signature."""
    grad = torch.randn_like(query)

    def forward():
        with torch.no_grad():
            module(query, reference, value, shapes, starts)

    def forward_backward():
        module.zero_grad(set_to_none=True)
        module(query, reference, value, shapes, starts).backward(grad)

    return forward, forward_backward


def module_inputs(case, dtype, shapes, device="cuda"):
    generator = torch.Generator(device=device).manual_seed(1)
    d_model = case.heads * case.channels
    return (torch.randn(case.batch, case.queries, d_model, device=device, dtype=dtype,
                        generator=generator),
            torch.rand(case.batch, case.queries, len(case.levels), 2, device=device, dtype=dtype,
                       generator=generator),
            torch.randn(case.batch, case.len_in, d_model, device=device, dtype=dtype,
                        generator=generator),
            shapes,
            torch.tensor([0] + [h * w for h, w in case.levels][:-1], device=device).cumsum(0))


def profiled_steps(case, dtype, device="cuda", peer: Peer | None = None) -> dict:
    """What ``profile_ms_deform_attn`` profiles for one case, the steps timed here: label ->
    (step, our autograd backward for a forward+backward step, else None). With ``peer``, the
    helper-level steps of Deformable DETR's Function and of an autograd Function doing no work
    too, so the tables put ours, theirs and what both pay side by side."""
    backward = _MSDeformAttnFunction.backward
    inputs = make_inputs(case, dtype=dtype, device=device, seed=0)
    helper_forward, helper_forward_backward = steps(_helper, *inputs)
    module = MSDeformAttn(case.heads * case.channels, len(case.levels), case.heads,
                          case.points).to(device, dtype)
    module_forward, module_forward_backward = module_steps(
        module, *module_inputs(case, dtype, inputs[1], device))
    profiled = {f"{case.name}: maybe_ms_deform_attn forward": (helper_forward, None),
                f"{case.name}: maybe_ms_deform_attn forward+backward":
                    (helper_forward_backward, backward)}
    if peer is not None:
        peer_forward, peer_forward_backward = steps(_peer_function(peer, case.levels), *inputs)
        profiled |= {
            f"{case.name}: Deformable DETR's Function forward": (peer_forward, None),
            f"{case.name}: Deformable DETR's Function forward+backward":
                (peer_forward_backward, None),
            f"{case.name}: an autograd Function doing no work, forward+backward":
                (steps(_no_autograd_work, *inputs)[1], None)}
    return profiled | {
        f"{case.name}: MSDeformAttn forward": (module_forward, None),
        f"{case.name}: MSDeformAttn forward+backward": (module_forward_backward, backward)}


def time_graphs(fn, inputs, iters) -> dict:
    forward, forward_backward = steps(fn, *inputs)
    return {"graph_forward_ms": time_graph_ms(forward, iters),
            "graph_forward_backward_ms": time_graph_ms(forward_backward, iters)}


#: The eager steps of every implementation, in the order of its (forward, forward_backward)
#: closures; their times land under `eager_<step>_us` and `host_<step>_us`.
EAGER_STEPS = ("forward", "forward_backward")


def eager_rows(implementations: dict) -> dict:
    """Interleaved eager windows of every (implementation, step): ``implementations`` maps a
    name to its ``(forward, forward_backward)`` closures. Returns name -> {key: times}."""
    steps_by_label = {f"{name}/{step}": closures[i] for name, closures in implementations.items()
                      for i, step in enumerate(EAGER_STEPS)}
    timed = interleaved_eager(steps_by_label)
    out = {name: {} for name in implementations}
    for label, times in timed.items():
        name, step = label.split("/")
        out[name][f"eager_{step}_us"] = times["eager_us"]
        out[name][f"host_{step}_us"] = times["host_us"]
    return out


class _NoAutogradWork(torch.autograd.Function):
    """An autograd Function doing no work (empty outputs, empty gradients): what any op with a
    Python autograd Function pays the engine, ours and Deformable DETR's alike."""

    @staticmethod
    def forward(ctx, value, locations, weights):
        ctx.save_for_backward(value, locations, weights)
        return value.new_empty(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        return tuple(t.new_empty(t.shape) for t in ctx.saved_tensors)


def _no_autograd_work(value, _spatial_shapes, locations, weights):
    return _NoAutogradWork.apply(value.contiguous(), locations.contiguous(),
                                 weights.contiguous())


def without_triton_launches(step, plan):
    """``step`` with the plan's kept Triton launches (Triton's C launcher and the driver: the
    Launcher's own Python still runs) replaced by no-ops for its duration."""
    launchers = [plan.launches[key] for key in ("forward", "zeroing forward", "backward")
                 if key in plan.launches]
    if not all(launch._fast for launch in launchers):
        raise SystemExit("a plan's launch has no direct relaunch to stub: warm it up first")

    def run():
        kept = [launch._fast for launch in launchers]
        for launch in launchers:
            launch._fast = (lambda *args: None, *launch._fast[1:])
        try:
            step()
        finally:
            for launch, fast in zip(launchers, kept, strict=True):
                launch._fast = fast

    return run


def launch_share(case, inputs, peer: Peer) -> dict:
    """Where an eager helper call's host time goes beside the peer's (interleaved windows):
    ours, ours with Triton's launches stubbed, the peer, and an autograd Function doing no work.
    ``ours - peer`` against ``ours - ours without launches`` says whether what we lose is inside
    Triton's launcher and the driver (issue 12's escape clause)."""
    from libreyolo.kernels.attention.ms_deform_attn.triton_provider import accepts

    rows = {"ours": steps(_helper, *inputs), "peer": steps(_peer_function(peer, case.levels),
                                                           *inputs),
            "no autograd work": steps(_no_autograd_work, *inputs)}
    for _ in range(3):
        for forward, forward_backward in rows.values():
            forward()
            forward_backward()
    plan = accepts(*inputs)
    rows["ours, Triton launches stubbed"] = tuple(without_triton_launches(s, plan)
                                                  for s in rows["ours"])
    return eager_rows(rows)


def bench_case(case, dtype, iters, peer: Peer | None, host_path: bool = True) -> dict:
    inputs = make_inputs(case, dtype=dtype, device="cuda", seed=0)
    result = {"case": case.name, "source": case.source, "dtype": str(dtype).removeprefix("torch."),
              "check": verify(case, dtype)}
    hub = "hub" in IMPLEMENTATIONS and dtype == torch.float32
    if hub:
        result["hub_check"] = verify(case, dtype, IMPLEMENTATIONS["hub"])
    for name, fn in IMPLEMENTATIONS.items():
        if name == "hub" and not hub:
            continue
        forward, forward_backward = steps(fn, *inputs)
        result[name] = {"forward_ms": time_ms(forward, iters),
                        "forward_backward_ms": time_ms(forward_backward, iters)}
    for name in ("triton", "hub") if hub else ("triton",):
        forward, forward_backward = steps(IMPLEMENTATIONS[name], *inputs)
        result[name]["graph_forward_ms"] = time_graph_ms(forward, iters)
        result[name]["graph_forward_backward_ms"] = time_graph_ms(forward_backward, iters)
    if not host_path:
        return result
    # the host path: the case's own layout (pairs or a tensor, channel-major views) as callers
    # hand it over
    ours = MSDeformAttn(case.heads * case.channels, len(case.levels), case.heads,
                        case.points).to("cuda", dtype)
    eager = {"helper": steps(_helper, *inputs),
             "module": module_steps(ours, *module_inputs(case, dtype, inputs[1]))}
    if peer is not None and dtype == torch.float32:  # the op dispatches float and double only
        eager["peer_function"] = steps(_peer_function(peer, case.levels), *inputs)
        theirs = peer.module(case.heads * case.channels, len(case.levels), case.heads,
                             case.points).to("cuda", dtype)
        theirs.load_state_dict(ours.state_dict())
        shapes = torch.tensor(case.levels, dtype=torch.int64, device="cuda")
        eager["peer_module"] = module_steps(theirs, *module_inputs(case, dtype, shapes))
    result.update(eager_rows(eager))
    if "peer_function" in eager and case.size == "medium":  # the decoders: host-bound calls
        result["launch_share"] = launch_share(case, inputs, peer)
    result["helper"].update(time_graphs(_helper, inputs, iters))
    if "peer_function" in result:
        result["peer_function"].update(time_graphs(_peer_function(peer, case.levels), inputs,
                                                   iters))
    return result


def median(times: list[float]) -> float:
    return statistics.median(times)


def table(results: list[dict]) -> str:
    rows = ["| case | dtype | portable fwd ms | triton fwd ms | fwd speedup | portable fwd+bwd ms "
            "| triton fwd+bwd ms | fwd+bwd speedup | triton graph fwd / fwd+bwd ms |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        p, t = r["portable"], r["triton"]
        pf, tf = median(p["forward_ms"]), median(t["forward_ms"])
        pb, tb = median(p["forward_backward_ms"]), median(t["forward_backward_ms"])
        gf, gb = median(t["graph_forward_ms"]), median(t["graph_forward_backward_ms"])
        rows.append(f"| {r['case']} | {r['dtype']} | {pf:.3f} | {tf:.3f} | {pf / tf:.1f}x "
                    f"| {pb:.3f} | {tb:.3f} | {pb / tb:.1f}x | {gf:.3f} / {gb:.3f} |")
    return "\n".join(rows)


def _ratio(ours: dict, theirs: dict | None, key: str) -> str:
    mine = median(ours[key]) if isinstance(ours[key], list) else ours[key]
    if theirs is None:
        return f"{mine:.3f} / -"
    other = median(theirs[key]) if isinstance(theirs[key], list) else theirs[key]
    return f"{mine:.3f} / {other:.3f} = {mine / other:.2f}x"


def round_ratio(ours: dict, theirs: dict | None, key: str) -> str:
    """Median over rounds of ours / theirs within a round (interleaved eager windows, µs), with
    the medians themselves; below 1x we are faster."""
    if theirs is None:
        return f"{median(ours[key]):.1f} / -"
    ratios = [a / b for a, b in zip(ours[key], theirs[key], strict=True)]
    return (f"{median(ours[key]):.1f} / {median(theirs[key]):.1f} = {median(ratios):.2f}x "
            f"[{min(ratios):.2f}-{max(ratios):.2f}]")


def hub_table(results: list[dict]) -> str:
    """Triton / Hub kernel (ms; below 1x Triton is faster), the slot's implementations called
    directly on the same inputs, eager and as CUDA-graph replays."""
    columns = [("forward_ms", "fwd"), ("forward_backward_ms", "fwd+bwd"),
               ("graph_forward_ms", "graph fwd"), ("graph_forward_backward_ms", "graph fwd+bwd")]
    rows = ["| case | dtype | portable fwd / fwd+bwd ms | "
            + " | ".join(f"triton / hub {label}" for _, label in columns) + " |",
            "|---|---|---|" + "---|" * len(columns)]
    for r in results:
        if "hub" not in r:
            continue
        portable = (f"{median(r['portable']['forward_ms']):.3f} / "
                    f"{median(r['portable']['forward_backward_ms']):.3f}")
        cells = [_ratio(r["triton"], r["hub"], key) for key, _ in columns]
        rows.append(f"| {r['case']} | {r['dtype']} | {portable} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def peer_table(results: list[dict]) -> str:
    """Ours / Deformable DETR's op; below 1x we are faster. Eager columns: µs a call in the
    interleaved windows (median over rounds of the per-round ratio, its range in brackets);
    graph columns: ms a replay."""
    eager = [("helper", "peer_function", "eager_forward_us", "helper fwd"),
             ("helper", "peer_function", "eager_forward_backward_us", "helper fwd+bwd"),
             ("module", "peer_module", "eager_forward_us", "module fwd"),
             ("module", "peer_module", "eager_forward_backward_us", "module fwd+bwd"),
             ("helper", "peer_function", "host_forward_us", "helper host fwd"),
             ("module", "peer_module", "host_forward_us", "module host fwd")]
    graph = [("helper", "peer_function", "graph_forward_ms", "graph fwd"),
             ("helper", "peer_function", "graph_forward_backward_ms", "graph fwd+bwd")]
    rows = ["| case | dtype | " + " | ".join(c[3] for c in eager + graph) + " |",
            "|---|---|" + "---|" * len(eager + graph)]
    for r in results:
        cells = [round_ratio(r[ours], r.get(theirs), key) for ours, theirs, key, _ in eager]
        cells += [_ratio(r[ours], r.get(theirs), key) for ours, theirs, key, _ in graph]
        rows.append(f"| {r['case']} | {r['dtype']} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def launch_share_table(results: list[dict]) -> str:
    """Host µs a call (medians of the interleaved windows), forward / forward+backward."""
    names = ("ours", "ours, Triton launches stubbed", "peer", "no autograd work")
    rows = ["| case | " + " | ".join(names) + " | ours - peer | Triton's launches |",
            "|---|" + "---|" * (len(names) + 2)]
    for r in results:
        share = r.get("launch_share")
        if share is None:
            continue
        cells, med = [], {}
        for name in names:
            med[name] = [median(share[name][f"host_{step}_us"]) for step in EAGER_STEPS]
            cells.append(" / ".join(f"{v:.1f}" for v in med[name]))
        gap = [a - b for a, b in zip(med["ours"], med["peer"], strict=True)]
        launches = [a - b for a, b in zip(med["ours"], med["ours, Triton launches stubbed"],
                                          strict=True)]
        rows.append(f"| {r['case']} | " + " | ".join(cells) + " | "
                    + " / ".join(f"{v:+.1f}" for v in gap) + " | "
                    + " / ".join(f"{v:.1f}" for v in launches) + " |")
    return "\n".join(rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where to write the raw JSON")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--cases", nargs="*", help="case names (default: medium and large)")
    parser.add_argument("--skip-host-path", action="store_true",
                        help="leave out the helper, module and peer rows (and the profile)")
    parser.add_argument("--profile-cases", nargs="*", default=list(DEFAULT_PROFILE_CASES),
                        help="cases whose eager calls are profiled into OUT_profile.md "
                             "(profile_ms_deform_attn.py; none: no profile)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("this benchmark needs a CUDA GPU")
    # LIBREYOLO_KERNELS=triton selects the implementation even while it awaits its record
    os.environ.setdefault("LIBREYOLO_KERNELS", "triton")
    dtype = getattr(torch, args.dtype)
    cases = load_cases(sizes=("medium", "large"))
    if args.cases:
        cases = [c for c in load_cases() if c.name in args.cases]
    peer, peer_status = (None, "not compared: --skip-host-path") if args.skip_host_path \
        else load_peer()
    print(f"Deformable DETR's op: {peer_status}")
    hub, hub_status = load_hub()
    print(f"Hub kernel: {hub_status}")
    results = [bench_case(case, dtype, args.iters, peer, not args.skip_host_path)
               for case in cases]
    environment = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "cuda": torch.version.cuda, "triton": __import__("triton").__version__,
                   "python": platform.python_version()}
    peer_record = {"source": "fundamentalvision/Deformable-DETR models/ops (Apache-2.0)",
                   "commit": peer.commit if peer else None, "status": peer_status}
    args.out.write_text(json.dumps({"environment": environment, "peer": peer_record,
                                    "hub": {"build": hub, "status": hub_status},
                                    "results": results}, indent=1))
    print(table(results))
    if hub is not None:
        print()
        print(f"Triton / Hub kernel ({hub_status}):")
        print(hub_table(results))
    if args.skip_host_path:
        return
    print()
    print(f"Ours / Deformable DETR's op ({peer_status}):")
    print(peer_table(results))
    if any("launch_share" in r for r in results):
        print()
        print("Host µs a call, forward / forward+backward, helper-level (interleaved windows):")
        print(launch_share_table(results))
    profiled = [c for c in load_cases() if c.name in args.profile_cases]
    if profiled:  # last: the timings above ran on a quiet host
        path = args.out.with_name(f"{args.out.stem}_profile.md")
        path.write_text(profile_cases(profiled, functools.partial(profiled_steps, peer=peer),
                                      dtype, "cuda", PROFILE_CALLS,
                                      peer=os.environ.get(PEER_VARIABLE) if peer else None))
        print(f"\nHost-time profile by owner: {path}")


if __name__ == "__main__":
    main()

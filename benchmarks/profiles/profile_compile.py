"""Where a compiled slot call's time goes, on a CUDA GPU: the host side and the kernels.

Usage: ``python benchmarks/profiles/profile_compile.py OUT.txt [--any-device]``

``bench_compile.py`` measures compiled calls slower than eager (a fake-quant call's host time
~4x eager's, the FP8 ViT-L MLP compiled slower than eager); this says why, for the next change:
- the host: cProfile of 2,000 calls of ``ops.fake_quant_fp8`` (16384x1024 bf16, inference)
  eager and compiled, by cumulative time;
- the device: ``torch.profiler`` of the FP8 ``FinalizedMLP`` (16384 tokens) eager and compiled,
  each kernel's name, count and total CUDA time, so a copy that compile added shows by name;
- the FP8 MLP's host side, eager and compiled (cProfile of ``MLP_CALLS`` calls): the compiled
  MLP ran the eager kernels (325 µs of GPU time a call) yet took 485 µs a call in queued
  windows against eager's 394, so its host time per call is the suspect;
- the registry's selection by stage, eager and compiled (``selection_stages``, wall clock, no
  profiler): on an H100 the selection alone took 26-36 µs a call eager and 52-58 µs inside the
  compiled operator, with the dispatch state, ATen calls, the launch path, Python itself, the GC
  and Dynamo's frame hook ruled out (``benchmarks/NOTES.md``); this says which stage grows,
  and how many distinct input objects the selection saw (a memo keyed by the input's identity
  misses on every call if the compiled operator hands the kernel a new tensor object each time);
- the FP8 MLP eager and compiled in queued windows (µs a call and host µs a call, as
  ``bench_compile.py`` times them) and whether a steady-state call synchronizes the host (a
  call whose window time is its host time plus its GPU time waits on the device), and if so at
  which of this repository's lines (torch's sync debug mode raises there).
``--any-device``: the FP8 policy engages on any CUDA device in every region it lists for any
measured device (``fp8_policy.toml`` holds each card's own), to probe the fused path's mechanics
where they would not run (the folded MLP on an H100, which engages on ViT-L's fc1 only); such a
run's MLP rows say nothing of whether FP8 is faster there.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
import traceback
from collections import defaultdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.bench.bench_host import profile_table  # noqa: E402
from libreyolo.kernels import ops  # noqa: E402

CALLS = 2000
MLP_CALLS = 200
STAGE_CALLS = 500
#: The stages of ``registry.run_selected`` timed by ``selection_stages``, in the order they run.
STAGES = ("selected", "eligible", "decline", "accepts", "fn", "fits")


def host_profile(fn, x, calls: int = CALLS) -> str:
    for _ in range(50):  # compiled, planned, warm
        fn(x)
    torch.cuda.synchronize()
    return profile_table(lambda: fn(x), calls, sort="cumulative", rows=30)


def selection_stages(fn, x, op: str, calls: int = STAGE_CALLS) -> dict[str, float]:
    """µs a call of ``fn(x)`` spent in each stage of the registry's selection of slot ``op``
    (``STAGES``: the whole ``run_selected``, then ``_eligible``, the declared capabilities'
    decline, the implementations' ``accepts`` and run, the output judge) and in the whole call
    ("call"), by wall clock around each stage; the wrappers cost eager and compiled calls
    alike."""
    from libreyolo.kernels import capabilities, registry

    spent: dict[str, float] = defaultdict(float)
    inputs: dict[int, object] = {}  # kept alive, so no id is reused

    def timed(stage, f):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                spent[stage] += time.perf_counter() - start
        return wrapper

    wrapped: dict[int, registry.Implementation] = {}

    def with_timed_stages(impl):
        if id(impl) not in wrapped:
            wrapped[id(impl)] = dataclasses.replace(
                impl, fn=timed("fn", impl.fn),
                accepts=impl.accepts and timed("accepts", impl.accepts))
        return wrapped[id(impl)]

    eligible, declared = registry._eligible, registry._DECLARED[op]
    selected = registry.run_selected

    def selecting(op_, args, kwargs):
        inputs.setdefault(id(args[0]), args[0])
        return selected(op_, args, kwargs)

    patches = [(registry, "run_selected", timed("selected", selecting)),
               (registry, "_eligible", timed("eligible", lambda name: tuple(
                   with_timed_stages(i) for i in eligible(name)))),
               (capabilities.Capabilities, "decline",
                timed("decline", capabilities.Capabilities.decline))]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    registry._DECLARED[op] = dataclasses.replace(declared, fits=timed("fits", declared.fits))
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        for _ in range(20):
            fn(x)
        sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
        sync()
        spent.clear()
        inputs.clear()
        start = time.perf_counter()
        for _ in range(calls):
            fn(x)
        spent["call"] = time.perf_counter() - start
        sync()
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
        registry._DECLARED[op] = declared
    times = {stage: spent[stage] / calls * 1e6 for stage in ("call", *STAGES)}
    return {**times, "inputs": len(inputs)}


def kernel_table(model, x) -> str:
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        model(x)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            model(x)
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="cuda_time_total", row_limit=20)


def synchronizes(fn, x) -> str:
    """Whether a steady-state call of ``fn(x)`` synchronizes the host with the device, and if so
    where: torch's sync debug mode raises at the synchronizing call, and the answer names this
    repository's innermost frames on the way to it."""
    fn(x)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn(x)
    except RuntimeError as exc:
        return f"yes ({str(exc).splitlines()[0][:120]}; at {frames_in_repository(exc)})"
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return "no"


def frames_in_repository(exc: BaseException, most: int = 4) -> str:
    """The innermost ``most`` frames of ``exc``'s traceback that lie in this repository's code (not
    in installed packages, a virtual environment inside the repository included), innermost first,
    as ``path:line function`` (paths from the repository root), or "no frame of ours"."""
    ours = [(path, frame) for frame in traceback.extract_tb(exc.__traceback__)
            if (path := Path(frame.filename).resolve()).is_relative_to(ROOT)
            and "site-packages" not in path.parts]
    return " <- ".join(f"{path.relative_to(ROOT)}:{frame.lineno} {frame.name}"
                       for path, frame in reversed(ours[-most:])) or "no frame of ours"


def main(out: str, any_device: bool = False) -> None:
    parts = []
    if any_device:
        from benchmarks.bench.bench_compile import engage_fp8_policy_anywhere

        engage_fp8_policy_anywhere()
        parts.append(f"## --any-device: the FP8 policy engages on {torch.cuda.get_device_name()}")
    x = torch.randn(16384, 1024, device="cuda").to(torch.bfloat16)
    with torch.no_grad():
        compiled = torch.compile(lambda t: ops.fake_quant_fp8(t))
        for name, fn in (("eager", lambda t: ops.fake_quant_fp8(t)), ("compiled", compiled)):
            parts.append(f"## host: ops.fake_quant_fp8 {name}, {CALLS} calls\n"
                         f"{host_profile(fn, x)}")
        small = torch.randn(1024, 1024, device="cuda").to(torch.bfloat16)  # host-bound
        rows = ["| call | " + " | ".join(("call", *STAGES, "inputs")) + " |",
                "|---|" + "---|" * (len(STAGES) + 2)]
        for name, fn in (("eager", lambda t: ops.fake_quant_fp8(t)), ("compiled", compiled)):
            stages = selection_stages(fn, small, "fake_quant_fp8")
            rows.append(f"| {name} | " + " | ".join(f"{stages[s]:.1f}" for s in
                                                     ("call", *STAGES)) +
                        f" | {stages['inputs']} |")
        parts.append(f"## the selection by stage, ops.fake_quant_fp8 1024x1024 bf16, µs a call "
                     f"over {STAGE_CALLS} calls\n" + "\n".join(rows))
        from libreyolo.nn.finalized import FinalizedLinear, FinalizedMLP

        torch.manual_seed(0)
        fc1, fc2 = torch.nn.Linear(1024, 4096), torch.nn.Linear(4096, 1024)
        mlp = FinalizedMLP(FinalizedLinear.from_float(fc1, "fp8", "fp8_dynamic"),
                           FinalizedLinear.from_float(fc2, "fp8", "fp8_dynamic")).to("cuda").eval()
        from libreyolo.kernels.quant.execute import fp8_linear

        layers = [(m.codes, m.scale, m.bias) for m in (mlp.fc1, mlp.fc2)]
        parts.append(f"## the FP8 MLP's path: policy engages "
                     f"{fp8_linear._policy_engages(x, layers[0][0], layers[1][0])}, folded path "
                     f"{'declined' if fp8_linear.fused_fp8_mlp(x, *layers) is None else 'runs'}")
        from benchmarks.bench.bench_ms_deform_attn import interleaved_eager

        models = {"eager": mlp, "compiled": torch.compile(mlp)}
        for name, model in models.items():
            parts.append(f"## kernels: FP8 FinalizedMLP {name}, 10 calls\n{kernel_table(model, x)}")
            parts.append(f"## host: FP8 FinalizedMLP {name}, {MLP_CALLS} calls\n"
                         f"{host_profile(model, x, MLP_CALLS)}")
        windows = interleaved_eager({k: (lambda m=m: m(x)) for k, m in models.items()}, 20)
        lines = ["| FP8 MLP | µs a call (windows) | host µs a call | synchronizes |",
                 "|---|---|---|---|"]
        for name, model in models.items():
            med = {k: statistics.median(v) for k, v in windows[name].items()}
            lines.append(f"| {name} | {med['eager_us']:.1f} | {med['host_us']:.1f} | "
                         f"{synchronizes(model, x)} |")
        parts.append("## the FP8 MLP in queued windows (20 rounds of 20 calls)\n" +
                     "\n".join(lines))
    text = "\n\n".join(parts)
    Path(out).write_text(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1], any_device="--any-device" in sys.argv[2:])

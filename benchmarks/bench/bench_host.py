"""Host time of the slot call path (issue #12): the registry's own overhead, and each fake-quant
and unpack slot's per-call host time on a 64K-element tensor.

    python benchmarks/bench/bench_host.py RESULTS.json [--calls 2000] [--rounds 7] \
        [--profile PROF.txt]

1. Registry overhead: ``dispatch`` of a slot whose newest implementation is a no-op (without and
   with an ``accepts``), minus a direct call of the same no-op: what the registry adds per call.
   Target on the H200 host: <= 5 us. Pure Python, so it runs (reported, not judged) without CUDA.
2. Fake-quant calls (``host_calls.toml``; CUDA only): ``calls`` back-to-back calls through
   ``libreyolo.kernels.ops`` after a warm-up, timed on the host with ``perf_counter`` and no
   synchronization inside the loop, so a call's time is what the host spends on it (the GPU's
   work on 64K elements, a few microseconds, hides behind the next call's host work).
   ``torch.neg`` on the same tensor, timed the same way, is the floor any eager op pays. Rounds
   are interleaved: each round times ``torch.neg`` and then every call once (v3: the host's speed
   drifted by 2x within one run, cProfile showing the same C functions twice as slow in the
   first rows as in the last, so rows timed one after the other compared different hosts); each
   row reports the median over rounds and the median of its ratio to ``torch.neg`` in the same
   round. Each row also says which implementation ran and whether a steady-state call
   synchronizes (one call under ``torch.cuda.set_sync_debug_mode("error")``). Target <= 30 us.
   The unpack slots (``UNPACK_CALLS``: each packed format to bfloat16, a 256x256 weight) are
   timed in the same rounds: bench_unpack.py timed them one row after another at 4096x4096,
   where the host drifted between rows and each call's 15-25 µs of GPU work was as long as its
   host time, so a back-to-back loop could wait on the GPU.
3. ``--profile``: a cProfile table (top functions by own time) of each fake-quant call, to place
   the time that remains: our code, Triton's launcher, torch.
4. The registry's output judge (issue 35: it binds each call to the slot's signature and checks
   what an accelerated implementation returns against the slot's declared output): every row of
   1. and 2. is timed with the judge on and off (``registry.JUDGE_OUTPUTS``, a benchmark-only
   knob) in the same interleaved rounds; "judge µs" is the median over rounds of on minus off.
   Target: <= 1 µs a call.

Raw results go to the JSON path; markdown tables go to stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import platform
import pstats
import statistics
import sys
import time
import tomllib
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from libreyolo.kernels import dispatch, ops, register, registry, unregister  # noqa: E402

CALLS_FILE = Path(__file__).with_name("host_calls.toml")
SHAPE = (256, 256)  # 64K elements
REGISTRY_TARGET_US = 5.0
CALL_TARGET_US = 30.0
JUDGE_TARGET_US = 1.0
NOOP_SLOT = "ms_deform_attn"
#: (label, slot, pack arguments after the weight): bench_unpack.py's formats, to bfloat16.
UNPACK_CALLS = (
    ("unpack int4 g128 -> bf16", "unpack_int_grouped", (4, 128)),
    ("unpack int8 g128 -> bf16", "unpack_int_grouped", (8, 128)),
    ("unpack nvfp4 -> bf16", "unpack_nvfp4", ()),
    ("unpack mxfp4 -> bf16", "unpack_mxfp4", ()),
    ("unpack mxfp8 -> bf16", "unpack_mxfp8", ()),
)


def per_call_us(fn, calls: int, rounds: int, cuda: bool) -> tuple[float, list[float]]:
    """Median over ``rounds`` of the host time of one call, from ``calls`` back-to-back calls."""
    for _ in range(min(calls, 50)):
        fn()
    medians = []
    for _ in range(rounds):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        medians.append((time.perf_counter() - start) / calls * 1e6)
        if cuda:
            torch.cuda.synchronize()
    return statistics.median(medians), medians


def noop_call() -> tuple[tuple, torch.Tensor]:
    """A valid call of ``NOOP_SLOT`` (one 2x2 level, one query) and its declared output, which
    the no-op returns (allocated once: the registry judges it, and nothing else is timed)."""
    args = (torch.zeros(1, 4, 1, 2), [(2, 2)], torch.zeros(1, 1, 1, 1, 1, 2),
            torch.ones(1, 1, 1, 1, 1))
    return args, torch.zeros(1, 1, 2)


@contextlib.contextmanager
def judge(on: bool):
    """The registry's output judge on or off (``registry.JUDGE_OUTPUTS``: benchmark only)."""
    saved, registry.JUDGE_OUTPUTS = registry.JUDGE_OUTPUTS, on
    try:
        yield
    finally:
        registry.JUDGE_OUTPUTS = saved


def judge_cost(on_rounds: list[float], off_rounds: list[float]) -> float:
    """Median over rounds of (judge on - judge off): the rounds interleave the two."""
    return statistics.median(a - b for a, b in zip(on_rounds, off_rounds, strict=True))


def registry_overhead(calls: int, rounds: int) -> list[dict]:
    args, out = noop_call()

    def noop(*args, **kwargs):
        return out

    def takes(*args, **kwargs):
        return None

    rows = []
    direct, _ = per_call_us(lambda: noop(*args), calls * 10, rounds, False)
    for label, accepts in (("no-op, no accepts", None), ("no-op, accepts -> None", takes)):
        register(NOOP_SLOT, noop, name="bench-noop", accepts=accepts)
        try:
            assert dispatch(NOOP_SLOT, *args) is out
            on_rounds, off_rounds = [], []
            for _ in range(rounds):  # interleaved, judge on then off, one round each
                for on, kept in ((True, on_rounds), (False, off_rounds)):
                    with judge(on):
                        kept.append(per_call_us(lambda: dispatch(NOOP_SLOT, *args),
                                                calls * 10, 1, False)[0])
        finally:
            unregister(NOOP_SLOT, "bench-noop")
        took, off = statistics.median(on_rounds), statistics.median(off_rounds)
        cost = judge_cost(on_rounds, off_rounds)
        rows.append({"case": label, "dispatch_us": took, "direct_us": direct,
                     "overhead_us": took - direct, "rounds_us": on_rounds,
                     "judge_off_us": off, "judge_off_rounds_us": off_rounds, "judge_us": cost,
                     "target_us": REGISTRY_TARGET_US, "met": took - direct <= REGISTRY_TARGET_US,
                     "judge_target_us": JUDGE_TARGET_US, "judge_met": cost <= JUDGE_TARGET_US})
    return rows


def arguments(call: dict, gen: torch.Generator) -> tuple[tuple, dict]:
    """A ``host_calls.toml`` call's arguments, on the generator's device."""
    x = torch.randn(SHAPE, device=gen.device, generator=gen)
    kwargs = dict(call.get("kwargs", {}))
    scale = {"tensor": lambda: x.abs().amax() / 448,
             "channel": lambda: x.abs().amax(dim=1 - kwargs.get("axis", 0)) / 127}.get(
        call.get("scale"), lambda: None)()
    args = (x,) + ((scale,) if scale is not None else ()) + tuple(call.get("args", ()))
    return args, kwargs


def which_ran(slot: str, args: tuple, kwargs: dict) -> str:
    for impl, reason in registry.explain(slot, *args, **kwargs):
        if reason is None:
            return impl.name
    return "none"


def synchronizes(fn) -> str | None:
    """None when a steady-state call does not synchronize, else the error that says it does."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        fn()
    except RuntimeError as exc:
        return str(exc).splitlines()[0]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return None


def profile_table(fn, calls: int, sort: str = "tottime", rows: int = 15) -> str:
    """cProfile of ``calls`` calls of ``fn``: its top ``rows`` functions by ``sort``."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats(sort).print_stats(rows)
    return out.getvalue()


def interleaved_us(fns: list, calls: int, rounds: int,
                   judges: list[bool] | None = None) -> list[list[float]]:
    """Per function, the host time of one call in each round (``calls`` back-to-back calls);
    every round times every function in turn, so a drift of the host falls on all alike.
    ``judges[i]``: whether function ``i`` runs with the registry's output judge on (default:
    on)."""
    judges = judges or [True] * len(fns)
    for fn, on in zip(fns, judges, strict=True):
        with judge(on):
            for _ in range(min(calls, 50)):
                fn()
    times = [[] for _ in fns]
    for _ in range(rounds):
        for fn, on, kept in zip(fns, judges, times, strict=True):
            with judge(on):
                torch.cuda.synchronize()
                start = time.perf_counter()
                for _ in range(calls):
                    fn()
                kept.append((time.perf_counter() - start) / calls * 1e6)
                torch.cuda.synchronize()
    return times


def unpack_arguments(slot: str, pack_args: tuple, gen: torch.Generator) -> tuple[tuple, dict]:
    """A packed ``SHAPE`` weight (the packer's own output) and bfloat16 as the output dtype."""
    from libreyolo.quant import packing

    weight = torch.randn(SHAPE, device=gen.device, generator=gen)
    packed = getattr(packing, slot.replace("unpack_", "pack_"))(weight, *pack_args)
    return tuple(packed), {"dtype": torch.bfloat16}


def slot_calls(calls: int, rounds: int, profile: Path | None) -> tuple[list[dict], list[dict]]:
    """The fake-quant calls and the unpack calls, timed in the same interleaved rounds."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    floor_x = torch.randn(SHAPE, device="cuda", generator=gen)
    table = [dict(call) for call in tomllib.loads(CALLS_FILE.read_text())["call"]]
    inputs = [arguments(call, gen) for call in table]
    fake_quant = len(table)
    for label, slot, pack_args in UNPACK_CALLS:
        table.append({"label": label, "slot": slot})
        inputs.append(unpack_arguments(slot, pack_args, gen))
    fns = [lambda: torch.neg(floor_x)]
    for call, (args, kwargs) in zip(table, inputs, strict=True):
        slot_call = getattr(ops, call["slot"])
        fns.append(lambda slot_call=slot_call, args=args, kwargs=kwargs: slot_call(*args,
                                                                                  **kwargs))
    # each call twice: judge on, then judge off (the same function)
    timed = [fns[0], *(fn for fn in fns[1:] for _ in (True, False))]
    judges = [True, *(on for _ in fns[1:] for on in (True, False))]
    neg_rounds, *both = interleaved_us(timed, calls, rounds, judges)
    call_rounds, off_rounds = both[0::2], both[1::2]
    rows, profiles = [], []
    for call, fn, (args, kwargs), all_rounds, off in zip(table, fns[1:], inputs, call_rounds,
                                                         off_rounds, strict=True):
        took = statistics.median(all_rounds)
        cost = judge_cost(all_rounds, off)
        rows.append({"call": call["label"], "slot": call["slot"],
                     "implementation": which_ran(call["slot"], args, kwargs),
                     "host_us": took, "rounds_us": all_rounds,
                     "judge_off_us": statistics.median(off), "judge_off_rounds_us": off,
                     "judge_us": cost, "judge_met": cost <= JUDGE_TARGET_US,
                     "neg_us": statistics.median(neg_rounds), "neg_rounds_us": neg_rounds,
                     "negs": statistics.median(t / n for t, n in zip(all_rounds, neg_rounds,
                                                                     strict=True)),
                     "steady_state_sync": synchronizes(fn),
                     "target_us": CALL_TARGET_US, "met": took <= CALL_TARGET_US})
        if profile is not None:
            profiles.append(f"## {call['label']} ({call['slot']}), {calls} calls\n\n"
                            + profile_table(fn, calls))
    if profile is not None:
        profile.write_text("\n".join(profiles))
    return rows[:fake_quant], rows[fake_quant:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile", type=Path, default=None)
    options = parser.parse_args()
    cuda = torch.cuda.is_available()
    results = {
        "machine": {"python": platform.python_version(), "torch": torch.__version__,
                    "gpu": torch.cuda.get_device_name(0) if cuda else None,
                    "cpu": platform.processor() or platform.machine()},
        "calls": options.calls, "rounds": options.rounds,
        "registry": registry_overhead(options.calls, options.rounds),
    }
    fake_quant, unpack = slot_calls(options.calls, options.rounds, options.profile) if cuda \
        else ("skipped: no CUDA device",) * 2
    results |= {"fake_quant": fake_quant, "unpack": unpack}
    options.results.write_text(json.dumps(results, indent=1) + "\n")
    print("| registry dispatch | dispatch µs | direct call µs | overhead µs | <= 5 µs "
          "| judge off µs | judge µs | <= 1 µs |")
    print("|---|---|---|---|---|---|---|---|")
    for row in results["registry"]:
        print(f"| {row['case']} | {row['dispatch_us']:.2f} | {row['direct_us']:.2f} | "
              f"{row['overhead_us']:.2f} | {'yes' if row['met'] else 'NO'} | "
              f"{row['judge_off_us']:.2f} | {row['judge_us']:.2f} | "
              f"{'yes' if row['judge_met'] else 'NO'} |")
    if not cuda:
        print("\nfake-quant and unpack calls: skipped, no CUDA device")
        return
    print("\n| call (64K float32; unpack: 64K bfloat16 out) | implementation | host µs per call "
          "| torch.neg µs | torch.negs | steady-state sync | <= 30 µs | judge off µs "
          "| judge µs | <= 1 µs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in fake_quant + unpack:
        sync = "none" if row["steady_state_sync"] is None else row["steady_state_sync"]
        print(f"| {row['call']} | {row['implementation']} | {row['host_us']:.1f} | "
              f"{row['neg_us']:.1f} | {row['negs']:.1f} | {sync} | "
              f"{'yes' if row['met'] else 'NO'} | {row['judge_off_us']:.1f} | "
              f"{row['judge_us']:.2f} | {'yes' if row['judge_met'] else 'NO'} |")


if __name__ == "__main__":
    main()

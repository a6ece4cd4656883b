"""Where the host time of an eager deformable-attention call goes, grouped by who owns the code:
the profiler that ``profile_ms_deform_attn.py`` (alone) and ``bench_ms_deform_attn.py`` (beside its
JSON) both run, kept apart from either script so neither imports the other's command line.

Issue 12 asks our MSDA to beat Deformable DETR's compiled op on every configuration or, where it
does not, for a profile placing the remaining time outside this repository's code. This writes
that profile: cProfile's own time (``tottime``) of every function run by a decoder-sized call
through ``maybe_ms_deform_attn`` and through ``MSDeformAttn``, forward and forward+backward,
summed into the groups below, in µs per call. ``bench_ms_deform_attn.py`` writes it beside its
JSON on the GPU; on a CPU it runs under ``TRITON_INTERPRET=1``, where
Triton's interpreter runs the kernels in Python: the grouping works there, the numbers mean
nothing.

With ``LIBREYOLO_PEER_DEFORMABLE_DETR`` set on a GPU (as ``bench_ms_deform_attn.py`` takes it),
the helper-level steps of Deformable DETR's autograd Function and of an autograd Function doing
no work are profiled beside ours, so a table says what each side's own code costs and what the
autograd engine costs both.

Groups (``classify``): this repository's ``libreyolo/``; the peer's Python and its compiled
``ms_deform_attn_forward``/``_backward``; Triton's Python (its launcher's
``CudaLauncher.__call__``, knobs; under the interpreter, the interpreted kernel); the kernel
launch (Triton's compiled C stub, whose own time is mostly ``cuLaunchKernelEx`` in the CUDA
driver); torch (its Python, its C functions: allocations, fills and copies through the CUDA
runtime, the autograd engine's ``run_backward``); waiting for the device (the
``torch.cuda.synchronize`` after each call, so queued work never piles up into a later launch;
left out of the host time); other (the profiling loop). Code that names no owner (C functions
such as ``isinstance``, ``dict.get`` or autograd's ``apply``; the standard library's Python)
counts for whoever called it, split by the time each caller gave it.

Two biases, both against us: cProfile adds a fixed cost to every Python call, so Python-heavy
groups read larger than they run (the unprofiled host time per call is printed beside each
table); and tensor arithmetic written as operators (``a + b / c`` in ``MSDeformAttn``) runs
torch's C code without an entry of its own, so its launches count as the calling function's
own time. A backward that runs on
autograd's device thread is profiled only where cProfile sees every thread (Python 3.12's
``sys.monitoring``); each forward+backward table says whether our backward was seen, and if it
was not, its time is inside ``run_backward``.
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

GROUPS = {
    "ours": "ours (libreyolo/)",
    "peer": "Deformable DETR's op (its Python, its compiled forward and backward)",
    "triton": "Triton's Python (launcher; the interpreter on CPU)",
    "launch": "kernel launch: Triton's C stub + CUDA driver",
    "torch": "torch: Python, C ops (allocation, fills, copies), autograd engine",
    "other": "other (the profiling loop)",
    "sync": "waiting for the device (not host time)",
}
HOST_GROUPS = ("ours", "peer", "triton", "launch", "torch", "other")
#: The peer's compiled functions (``MultiScaleDeformableAttention``), as cProfile names them.
PEER_BUILTINS = ("ms_deform_attn_forward", "ms_deform_attn_backward")
#: The decoder rows issue 12 still misses: a contiguous value, RF-DETR's channel-major one, and
#: D-FINE-N's (the one of three 60-round runs of v12 lost at 1.07x).
DEFAULT_CASES = ("deformable_detr_decoder", "rf_detr_s_like", "dfine_n_decoder")
WARMUP = 5
TOP = 12


def package_root(module) -> str:
    return str(Path(module.__file__).resolve().parent)


@dataclass(frozen=True)
class Roots:
    """The folders whose Python files are ours, Triton's, torch's and the benchmarks' (the
    profiled steps and this loop)."""

    ours: str
    triton: str | None
    torch: str
    loop: str
    peer: str | None = None

    @classmethod
    def here(cls, peer: str | None = None) -> Roots:
        """``peer``: the folder of the peer's source checkout, when its op is profiled too."""
        import libreyolo

        try:
            import triton
        except ImportError:
            triton = None
        return cls(package_root(libreyolo), triton and package_root(triton), package_root(torch),
                   str(Path(__file__).resolve().parents[1]),
                   peer and str(Path(peer).resolve()))


def classify(func: tuple, roots: Roots) -> str | None:
    """The group of one pstats entry ``(file, line, name)``; None for code that names no owner
    (a C function such as ``isinstance``, or the standard library's Python): it counts for its
    callers."""
    filename, _, name = func
    if "synchronize" in name:
        return "sync"
    if filename == "~":
        if "__triton_launcher" in name:
            return "launch"
        if any(builtin in name for builtin in PEER_BUILTINS):
            return "peer"
        return "torch" if "torch" in name else None
    path = str(Path(filename).resolve())
    for group, root in (("ours", roots.ours), ("peer", roots.peer), ("triton", roots.triton),
                        ("torch", roots.torch), ("other", roots.loop)):
        if root and path.startswith(root + "/"):
            return group
    return None


@dataclass
class Profile:
    """One step's profile: own seconds per group and per function, over ``calls`` calls."""

    label: str
    calls: int
    groups: dict[str, float] = field(default_factory=dict)
    functions: list[tuple[float, str, int, str]] = field(default_factory=list)  # s, group, n, name
    unprofiled_us: float = 0.0
    backward_seen: int | None = None

    def us(self, seconds: float) -> float:
        return seconds / self.calls * 1e6


def group_stats(stats: pstats.Stats, roots: Roots) -> tuple[dict[str, float], list]:
    """Own time per group, a C function without an owner split among its callers by the time
    each gave it, and every function's (own time, group, calls, short name)."""
    entries = stats.stats  # func -> (primitive calls, calls, own s, cumulative s, callers)
    known: dict[tuple, dict[str, float]] = {}

    def group_of(func, seen=frozenset()) -> dict[str, float]:
        """Fractions of ``func``'s own time per group (remembered: caller chains repeat)."""
        if func in known:
            return known[func]
        group = classify(func, roots)
        if group is not None:
            return {group: 1.0}
        callers = {c: t for c, t in entries[func][4].items() if c not in seen}
        total = sum(t[2] for t in callers.values())
        if total <= 0:  # called from nowhere profiled (or only from itself)
            return {"other": 1.0}
        shares: dict[str, float] = defaultdict(float)
        for caller, timing in callers.items():
            for group, part in group_of(caller, seen | {func}).items():
                shares[group] += part * timing[2] / total
        known[func] = dict(shares)
        return known[func]

    groups: dict[str, float] = dict.fromkeys(GROUPS, 0.0)
    functions = []
    for func, (_, calls, own, _, _) in entries.items():
        shares = group_of(func)
        for group, part in shares.items():
            groups[group] += own * part
        functions.append((own, max(shares, key=shares.get), calls, short_name(func, roots)))
    functions.sort(reverse=True)
    return groups, functions


def short_name(func: tuple, roots: Roots) -> str:
    filename, line, name = func
    if filename == "~":
        return name
    for root in (roots.ours, roots.triton, roots.torch):
        if root and filename.startswith(root):
            filename = Path(root).name + filename[len(root):]
            break
    return f"{filename}:{line}({name})"


def profile_step(label: str, step: Callable[[], object], calls: int,
                 sync: Callable[[], None], roots: Roots,
                 backward: Callable | None = None, warmup: int = WARMUP) -> Profile:
    """Profile ``calls`` calls of ``step``, each followed by ``sync``; ``backward`` is our
    autograd backward, counted in the profile (None: not a backward step)."""
    for _ in range(warmup):
        step()
        sync()
    start = time.perf_counter()
    for _ in range(calls):
        step()
    unprofiled = (time.perf_counter() - start) / calls * 1e6
    sync()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        step()
        sync()
    profiler.disable()
    stats = pstats.Stats(profiler)
    groups, functions = group_stats(stats, roots)
    seen = None
    if backward is not None:
        code = backward.__code__
        seen = sum(entry[1] for func, entry in stats.stats.items()
                   if func == (code.co_filename, code.co_firstlineno, code.co_name))
    return Profile(label, calls, groups, functions, unprofiled, seen)


def render(profile: Profile) -> str:
    host = sum(profile.groups[g] for g in HOST_GROUPS)
    lines = [f"### {profile.label}: {profile.calls} calls",
             "",
             f"Host time per call without the profiler: {profile.unprofiled_us:.1f} µs (back to "
             f"back); under it: {profile.us(host):.1f} µs.",
             "",
             "| group | µs per call (profiled) | share of host time |",
             "|---|---|---|"]
    for group, label in GROUPS.items():
        seconds = profile.groups[group]
        share = f"{seconds / host:.0%}" if group in HOST_GROUPS and host > 0 else "-"
        lines.append(f"| {label} | {profile.us(seconds):.1f} | {share} |")
    if profile.backward_seen is not None:
        lines += ["", f"Our autograd backward seen by the profiler: {profile.backward_seen} of "
                  f"{profile.calls} calls" + ("." if profile.backward_seen else
                                              " (it ran on autograd's device thread, outside "
                                              "this profile: its time is inside run_backward, "
                                              "counted as torch).")]
    lines += ["", "| function (own time) | group | calls per step | µs per call |",
              "|---|---|---|---|"]
    for own, group, calls, name in profile.functions[:TOP]:
        lines.append(f"| `{name}` | {group} | {calls / profile.calls:.0f} | "
                     f"{profile.us(own):.2f} |")
    return "\n".join(lines)


def sync_for(device: torch.device) -> Callable[[], None]:
    """The device's synchronize as one C function, so the profile shows it as one entry
    (``torch.cuda.synchronize``'s Python device guard would count as torch's host time)."""
    if device.type == "cuda":
        return getattr(torch._C, "_cuda_synchronize", torch.cuda.synchronize)
    return lambda: None


def profile_cases(cases, steps_for: Callable, dtype, device, calls: int,
                  warmup: int = WARMUP, peer: str | None = None) -> str:
    """The markdown profile of every case's steps: ``steps_for(case, dtype, device)`` gives them
    as label -> (step, our backward or None) (``bench_ms_deform_attn.profiled_steps``);
    ``peer``: the peer checkout's folder when its op's steps are among them."""
    roots, sync = Roots.here(peer), sync_for(torch.device(device))
    sections = [f"# Host time of eager MSDA calls by owner ({device}, {dtype}, python "
                f"{sys.version.split()[0]}, torch {torch.__version__})", "",
                "Generated by benchmarks/profiles/profile_ms_deform_attn.py "
                "(benchmarks/profiles/msda_host_profile.py's docstring: the groups)."]
    for case in cases:
        for label, (step, backward) in steps_for(case, dtype, device).items():
            profile = profile_step(label, step, calls, sync, roots, backward, warmup)
            sections += ["", render(profile)]
    return "\n".join(sections) + "\n"

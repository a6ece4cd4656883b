"""Where an eager forward+backward's host time goes, by timestamps, ours beside the peer's.

    LIBREYOLO_PEER_DEFORMABLE_DETR=/path/to/Deformable-DETR \
        python benchmarks/profiles/timestamps_ms_deform_attn.py OUT.md [--case rt_detr_decoder] \
        [--steps 400]

cProfile (``profile_ms_deform_attn.py``) adds a fixed cost to every Python call and, before
Python 3.12, does not see autograd's device thread, where a CUDA backward runs. This times the
same helper-level step as ``bench_ms_deform_attn.py``'s eager rows (a grad-mode forward, then
``backward()``, the leaves' gradients reset) with clock reads only, for three autograd Functions:
ours (through ``maybe_ms_deform_attn``), Deformable DETR's op (when the peer is built, as the
benchmark builds it) and one doing no work (empty outputs and gradients). Segments, each the
median over the steps (a sync every 20 steps, as a model's queue would drain), µs:

- the forward, on the main thread;
- from ``backward()``'s call to the Function's backward starting (the engine hands it to its
  device thread), the Function's backward, and from its end to ``backward()`` returning;
- inside our forward and inside our backward, the time spent in each torch allocation
  (``new_zeros``, ``new_empty``, ``torch.empty_like``) and in our ``Launcher`` (its Python,
  Triton's C launcher and the driver), the rest being our Python (in the forward: the registry's
  dispatch, the plan lookup and the Function's apply too): each wrapped for the run, and counted
  only while our forward or backward runs. A host-bound call's forward allocates the backward's
  buffers and its kernel zeroes the value gradient
  (``triton_common.GRADIENTS_IN_FORWARD_BELOW``), so which side pays for them shows here.

A wrapped call costs two clock reads more than it does unwrapped (~0.1 µs). NOTES.md, "MSDA v8",
has the first table this measured (by an ad-hoc script of the same method). On a CPU it runs under
``TRITON_INTERPRET=1`` without the peer: the segments exist, the numbers mean nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections import defaultdict
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.bench import bench_ms_deform_attn as bench  # noqa: E402
from conformance.inputs.ms_deform_attn_cases import load_cases, make_inputs  # noqa: E402
from libreyolo.kernels import triton_launch  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn import triton_provider  # noqa: E402

DEFAULT_CASES = ("rt_detr_decoder", "deformable_detr_decoder")
SYNC_EVERY = 20
WARMUP = 50
_clock = time.perf_counter_ns


class _Marks(threading.local):
    """Which of ours runs on this thread, "forward" or "backward" (autograd runs the backward on
    its own device thread), or None."""

    def __init__(self):
        self.inside = None


_marks = _Marks()
_shared: dict = {}  # written by the backward's thread, read by the main thread after it
_spent: dict = defaultdict(int)  # ns inside each wrapped call, by (ours' side, call)
COUNTED = ("new_zeros", "new_empty", "empty_like", "Launcher (Python, C launch)")
REST = {"forward": "the rest (dispatch, plan lookup, apply, our Python)",
        "backward": "the rest (our Python)"}


@contextmanager
def _timed_backward(function: type[torch.autograd.Function], ours: bool):
    """``function.backward`` stamped at its start and end (and, for ours, the wrapped calls
    inside it counted) for the duration."""
    original = function.__dict__["backward"]

    def stamped(ctx, *grads):
        _marks.inside = "backward" if ours else None
        _shared["enter"] = _clock()
        try:
            return original.__func__(ctx, *grads)
        finally:
            _shared["exit"] = _clock()
            _marks.inside = None

    function.backward = staticmethod(stamped)
    try:
        yield
    finally:
        function.backward = original


def _counted(owner, name: str, label: str):
    """``owner.name`` replaced by a wrapper adding its time to ``_spent[(side, label)]`` while
    our forward or backward runs; returns a function restoring it."""
    own = name in owner.__dict__  # else inherited (torch.Tensor's methods are TensorBase's)
    original = getattr(owner, name)

    def wrapper(*args, **kwargs):
        side = _marks.inside
        if side is None:
            return original(*args, **kwargs)
        start = _clock()
        try:
            return original(*args, **kwargs)
        finally:
            _spent[side, label] += _clock() - start

    setattr(owner, name, wrapper)
    return (lambda: setattr(owner, name, original)) if own else (lambda: delattr(owner, name))


@contextmanager
def _counting_ours():
    restores = [_counted(torch.Tensor, "new_zeros", COUNTED[0]),
                _counted(torch.Tensor, "new_empty", COUNTED[1]),
                _counted(torch, "empty_like", COUNTED[2]),
                _counted(triton_launch.Launcher, "__call__", COUNTED[3])]
    try:
        yield
    finally:
        for restore in restores:
            restore()


def _step_segments(fn, inputs, steps: int, warmup: int, ours: bool) -> dict[str, list[float]]:
    """Per segment, its µs in each step after the warm-up."""
    value, shapes, locations, weights = inputs
    leaves = [t.detach().clone().requires_grad_() for t in (value, locations, weights)]
    grad = torch.randn(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3],
                       device=value.device, dtype=value.dtype)
    rows: dict[str, list[float]] = defaultdict(list)
    for i in range(warmup + steps):
        for leaf in leaves:
            leaf.grad = None
        _spent.clear()
        _marks.inside = "forward" if ours else None
        start = _clock()
        out = fn(leaves[0], shapes, leaves[1], leaves[2])
        forward_done = _clock()
        _marks.inside = None
        out.backward(grad)
        done = _clock()
        if i % SYNC_EVERY == SYNC_EVERY - 1 and value.is_cuda:
            torch.cuda.synchronize()
        if i < warmup:
            continue
        inside = {"forward": forward_done - start,
                  "backward": _shared["exit"] - _shared["enter"]}
        rows["forward (grad mode)"].append(inside["forward"] / 1e3)
        if ours:
            _counted_rows(rows, "forward", inside["forward"])
        rows["backward() to the Function's backward"].append(
            (_shared["enter"] - forward_done) / 1e3)
        rows["the Function's backward"].append(inside["backward"] / 1e3)
        if ours:
            _counted_rows(rows, "backward", inside["backward"])
        rows["its end to backward() returning"].append((done - _shared["exit"]) / 1e3)
    return rows


def _counted_rows(rows: dict, side: str, total: int) -> None:
    """Rows under ``side`` of ours: each counted call (0 when it made none), and the rest."""
    spent = [_spent.get((side, label), 0) for label in COUNTED]
    for label, ns in zip(COUNTED, spent, strict=True):
        rows[f"  {side}: {label}"].append(ns / 1e3)
    rows[f"  {side}: {REST[side]}"].append((total - sum(spent)) / 1e3)


def measure(case, peer, steps: int, device: str,
            warmup: int = WARMUP) -> dict[str, dict[str, list[float]]]:
    """Per implementation (ours, peer, no work), its segments on ``case``."""
    inputs = make_inputs(case, dtype=torch.float32, device=device, seed=0)
    functions = {"ours": (bench._helper, triton_provider._MSDeformAttnFunction),
                 "no work": (bench._no_autograd_work, bench._NoAutogradWork)}
    if peer is not None:
        functions["peer"] = (bench._peer_function(peer, case.levels), peer.function)
    out = {}
    for label, (fn, function) in functions.items():
        ours = label == "ours"
        with _timed_backward(function, ours), (_counting_ours() if ours else nullcontext()):
            out[label] = _step_segments(fn, inputs, steps, warmup, ours)
    return out


def _cell(values: list[float] | None) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    n = len(ordered)
    return f"{statistics.median(ordered):.1f} ({ordered[n // 4]:.1f}-{ordered[3 * n // 4]:.1f})"


def table(case_name: str, measured: dict) -> str:
    labels = list(measured)
    segments = list(dict.fromkeys(s for rows in measured.values() for s in rows))
    lines = [f"### {case_name}: median µs a step (p25-p75)", "",
             "| segment | " + " | ".join(labels) + " |",
             "|---|" + "---|" * len(labels)]
    for segment in segments:
        cells = [_cell(measured[label].get(segment)) for label in labels]
        lines.append(f"| {segment} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--case", action="append", dest="cases")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=WARMUP)
    args = parser.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    peer, status = bench.load_peer() if device == "cuda" else (None, "not compared: no GPU")
    by_name = {case.name: case for case in load_cases()}
    environment = (f"{torch.cuda.get_device_name() if device == 'cuda' else 'CPU'}, torch "
                   f"{torch.__version__}, python {sys.version.split()[0]}; peer: {status}")
    parts = [f"# Timestamps of an eager MSDA forward+backward ({environment})", "",
             "Generated by benchmarks/profiles/timestamps_ms_deform_attn.py "
             "(docstring: the segments).", ""]
    for name in args.cases or DEFAULT_CASES:
        parts.append(table(name, measure(by_name[name], peer, args.steps, device,
                                         args.warmup)))
    text = "\n".join(parts)
    args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

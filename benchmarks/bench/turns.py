"""Steps of one comparison timed in turns, round by round, and their ratios read by the rounds.

A host-bound step drifts with the machine (clocks, other processes, Python's garbage collector)
by more than the differences a benchmark compares, so steps timed one after the other, minutes
apart, compare the machine's moments as much as the steps. Taking turns, the steps of a round
share its moment: the ratio of two steps within a round holds where their times move, and the
ratios' spread over the rounds says how far to trust it (bench_detectors.py, bench_qat.py).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.bench.bench_ms_deform_attn import time_ms  # noqa: E402


def interleaved_ms(steps: dict, rounds: int, iters: int, warmup: int,
                   timer=time_ms) -> dict[str, list]:
    """Each step's median time (ms) in each of ``rounds`` rounds, the steps taking turns.
    ``timer(step, iters, warmup)`` gives one turn's per-step times (ms)."""
    for step in steps.values():
        timer(step, 1, warmup)
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            times[name].append(statistics.median(timer(step, iters, 0)))
    return times


def round_ratios(times: dict, over: str, under: str) -> tuple[float, list]:
    """The median of the rounds' ``over``/``under`` time ratios, and their spread."""
    ratios = sorted(a / b for a, b in zip(times[over], times[under], strict=True))
    return statistics.median(ratios), [ratios[0], ratios[-1]]

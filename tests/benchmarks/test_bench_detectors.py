"""bench_detectors times stock and wired steps in turns, round by round, and its table calls a
ratio whose rounds straddle 1.00x noise: what makes a whole-model row worth reading when the
ceiling is a few percent (docs/detectors.md, "Speed")."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from benchmarks.bench import bench_detectors  # noqa: E402


def test_the_steps_take_turns_round_by_round(monkeypatch):
    order = []

    def time_ms(step, iters, warmup):
        order.append((step(), iters, warmup))
        return [1.0] * max(iters, 1)

    monkeypatch.setattr(bench_detectors, "time_ms", time_ms)
    times = bench_detectors.interleaved_ms({"stock": lambda: "stock", "ours": lambda: "ours"},
                                           rounds=3, iters=4, warmup=2)
    assert order == [("stock", 1, 2), ("ours", 1, 2)] + [("stock", 4, 0), ("ours", 4, 0)] * 3
    assert times == {"stock": [1.0] * 3, "ours": [1.0] * 3}


ROW = {"family": "rt_detr", "mode": "compiled", "batch": 1, "dtype": "fp32", "stock_ms": 10.0,
       "ours_ms": 9.5}


@pytest.mark.parametrize("speedup, spread, verdict", [
    (1.05, [0.97, 1.10], "noise (the rounds straddle 1.00x)"),
    (1.05, [1.02, 1.10], "faster"),
    (0.95, [0.90, 0.98], "below stock"),
], ids=["straddles", "above", "below"])
def test_the_table_reads_a_ratio_by_its_rounds_spread(speedup, spread, verdict):
    row = ROW | {"speedup": speedup, "spread": spread}
    assert bench_detectors.table([row]).splitlines()[-1].endswith(f"| {verdict} |")

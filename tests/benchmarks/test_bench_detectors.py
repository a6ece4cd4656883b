"""bench_detectors times stock and wired steps in turns, round by round, and its table calls a
ratio whose rounds straddle 1.00x noise: what makes a whole-model row worth reading when the
ceiling is a few percent (docs/detectors.md, "Speed")."""

from __future__ import annotations

import json
import types

import pytest
import torch

pytest.importorskip("transformers")

from benchmarks.bench import bench_detectors  # noqa: E402

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


@pytest.mark.parametrize("mode, marks", [("compiled-ro", True), ("compiled", False)])
def test_a_reduce_overhead_step_marks_each_invocation(monkeypatch, mode, marks):
    """As a user runs a CUDA-graphed model: a new step begins before each call (after one mark,
    CUDA-graph trees begin a step only when marked)."""
    events = []
    monkeypatch.setattr(torch, "compile", lambda model, **options: model)
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin",
                        lambda: events.append("mark"))

    class Model(torch.nn.Module):
        def forward(self, x):
            events.append("call")
            return x

    step = bench_detectors.make_step(Model(), mode, {"x": torch.ones(1)}, "fp32")
    step()
    step()
    assert events == (["mark", "call"] if marks else ["call"]) * 2


def test_the_stock_logits_outlive_the_wired_step():
    """A reduce-overhead step's outputs live in the CUDA graphs' pool, which the next step's
    replay overwrites: one buffer written by both steps stands for it."""
    pool = torch.zeros(3)

    def replay(value):
        def step():
            pool.fill_(value)
            return types.SimpleNamespace(logits=pool)
        return step

    assert bench_detectors.wired_logits_difference({"stock": replay(1.0),
                                                    "ours": replay(3.0)}) == 2.0


def test_the_report_lists_the_rows_the_budget_left(monkeypatch, tmp_path):
    monkeypatch.setattr(bench_detectors, "environment", lambda hub_build=None: {})
    monkeypatch.setattr(bench_detectors, "build", lambda family, device: object())
    out = tmp_path / "detectors.json"
    bench_detectors.main([str(out), "--families", "rt_detr", "--modes", "compiled",
                          "--batches", "1", "8", "--dtypes", "fp32", "--budget", "0"])
    assert json.loads(out.read_text())["not_measured"] == [
        ["rt_detr", "compiled", 1, "fp32"], ["rt_detr", "compiled", 8, "fp32"]]

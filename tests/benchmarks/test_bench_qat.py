"""bench_qat's verdicts: a kernels row is judged against its recipe's references (eager), the
unquantized step of its own mode and its recipe's eager step; a row whose mode failed is shown
with its error and judged nowhere; ``--unbound``'s rows (the layers calling ``ops`` per call)
are listed apart, their ratio to the bound step read on the kernels row.

The eager rows of a comparison are all built, then timed in turns round by round, and a ratio
between them is read by its rounds: one whose rounds straddle the target is noise, neither met
nor missed (a host-bound step moved 30% between rows timed minutes apart on an H100)."""

import statistics
import types

import pytest
import torch

from benchmarks.bench import bench_qat
from benchmarks.bench.bench_qat import UNBOUND, table, verdicts


def _row(mode, recipe, ms, impl="kernels"):
    return {"model": "m", "mode": mode, "recipe": recipe, "impl": impl, "ms": ms}


ROWS = [
    _row("eager", "bf16", 10.0, "-"),
    _row("eager", "fp8", 25.0),
    _row("eager", "fp8", 100.0, "reference"),
    _row("eager", "fp8", 30.0, UNBOUND),
    _row("graphed", "bf16", 4.0, "-"),
    _row("graphed", "fp8", 5.0),
    {"model": "m", "mode": "reduce-overhead", "recipe": "fp8", "impl": "kernels",
     "error": "RuntimeError: capture failed"},
]


def test_each_kernels_row_is_judged_in_its_own_mode():
    eager, graphed = verdicts(ROWS)
    assert eager["mode"] == "eager" and graphed["mode"] == "graphed"
    assert eager["vs_reference"] == pytest.approx(4.0) and eager["vs_reference_met"]
    assert eager["vs_unquantized"] == pytest.approx(2.5) and not eager["vs_unquantized_met"]
    assert "vs_eager" not in eager
    # a graph mode: against its own unquantized step (4 ms), not eager's (10 ms)
    assert graphed["vs_unquantized"] == pytest.approx(1.25) and graphed["vs_unquantized_met"]
    assert graphed["vs_eager"] == pytest.approx(0.2) and graphed["no_slower_than_eager_met"]
    assert graphed["vs_reference"] == pytest.approx(20.0)


def test_a_failed_row_is_reported_and_judged_nowhere():
    report = {"rows": ROWS, "checks": {}, "verdicts": verdicts(ROWS)}
    assert [v["mode"] for v in report["verdicts"]] == ["eager", "graphed"]
    lines = table(report).splitlines()
    (failed,) = [line for line in lines if "reduce-overhead" in line]
    assert "failed: RuntimeError: capture failed" in failed
    (references,) = [line for line in lines if "(references)" in line]
    assert "100.000" in references


def test_an_unbound_row_is_listed_apart_and_read_on_the_bound_row():
    report = {"rows": ROWS, "checks": {}, "verdicts": verdicts(ROWS)}
    (eager, _) = report["verdicts"]
    assert [v["ms"] for v in report["verdicts"] if v["mode"] == "eager"] == [25.0]
    assert eager["unbound_over_bound"] == pytest.approx(1.2) and eager["binding"] == "saves"
    (unbound,) = [line for line in table(report).splitlines() if "ops per call" in line]
    assert "30.000" in unbound


#: made-up rounds' medians (ms) of the eager steps timed in turns
ROUND_MS = {
    ("bf16", "-"): [10.0, 14.0, 12.0],
    ("fp8", "kernels"): [15.0, 23.0, 19.0],   # 1.50, 1.64, 1.58 the unquantized step
    ("fp8", UNBOUND): [16.0, 22.0, 21.0],     # 1.07, 0.96, 1.11 the bound step
}


def test_the_eager_steps_are_all_built_then_take_turns(monkeypatch):
    events = []

    def build(model_name, recipe, device):
        events.append(("build", recipe))
        return types.SimpleNamespace(recipe=recipe or "bf16", unbound=False), None, None, None

    def make_step(model, optimizer, inputs, target, mode):
        def step():
            return torch.tensor(1.0)
        step.key = (model.recipe, UNBOUND if model.unbound else
                    "-" if model.recipe == "bf16" else "kernels")
        return step

    turns = {key: iter(ms) for key, ms in ROUND_MS.items()}

    def step_times(step, steps, warmup):
        events.append((step.key, steps, warmup))
        if warmup:
            return [0.0] * steps
        median = next(turns[step.key])
        return [median - 1.0, median, median + 5.0]

    monkeypatch.setattr(bench_qat, "build", build)
    monkeypatch.setattr(bench_qat, "make_step", make_step)
    monkeypatch.setattr(bench_qat, "step_times", step_times)
    monkeypatch.setattr(bench_qat, "calling_ops_per_call",
                        lambda model: setattr(model, "unbound", True))
    args = types.SimpleNamespace(rounds=3, steps=3, warmup=5)
    rows = bench_qat.measure_in_turns("m", bench_qat.in_turns(["fp8"], unbound=True), args, "cpu")
    keys = list(ROUND_MS)
    assert events == ([("build", None), ("build", "fp8"), ("build", "fp8")]
                      + [(key, 1, 5) for key in keys] + [(key, 3, 0) for key in keys] * 3)
    assert [(r["recipe"], r["impl"]) for r in rows] == keys
    for row in rows:
        expected = ROUND_MS[row["recipe"], row["impl"]]
        assert row["round_ms"] == expected and row["ms"] == statistics.median(expected)
        assert row["mode"] == "eager" and row["losses_first_last"] == [1.0, 1.0]


def test_the_references_and_the_graph_modes_are_timed_one_after_the_other():
    assert bench_qat.one_after_another(["eager", "graphed"], ["fp8"]) == [
        ("eager", "fp8", "reference", "reference"),
        ("graphed", "bf16", "-", None), ("graphed", "fp8", "kernels", None)]


def _in_turns(recipe, impl, round_ms):
    return {"model": "m", "mode": "eager", "recipe": recipe, "impl": impl,
            "ms": statistics.median(round_ms), "round_ms": round_ms}


@pytest.mark.parametrize("round_ms, median, spread, verdict", [
    # the median (1.58) alone would say met
    ([15.0, 23.0, 19.0], 19 / 12, [1.5, 23 / 14], "noise"),
    ([12.0, 16.0, 15.0], 1.2, [16 / 14, 1.25], "met"),
    ([20.0, 28.0, 25.0], 2.0, [2.0, 25 / 12], "missed"),
], ids=["straddles", "under", "over"])
def test_an_eager_ratio_is_read_by_its_rounds(round_ms, median, spread, verdict):
    rows = [_in_turns("bf16", "-", ROUND_MS["bf16", "-"]), _in_turns("fp8", "kernels", round_ms)]
    (entry,) = verdicts(rows)
    assert entry["vs_unquantized"] == pytest.approx(median)
    assert entry["vs_unquantized_spread"] == pytest.approx(spread)
    assert entry["vs_unquantized_target"] == 1.6
    assert entry["vs_unquantized_verdict"] == verdict
    assert entry["vs_unquantized_met"] == (verdict == "met")


@pytest.mark.parametrize("unbound_ms, binding", [
    (ROUND_MS["fp8", UNBOUND], "noise"),  # 0.96 .. 1.11
    ([18.0, 26.0, 22.0], "saves"),         # 1.13 .. 1.20
    ([14.0, 21.0, 18.0], "saves nothing"),  # 0.91 .. 0.95
], ids=["straddles", "over", "under"])
def test_the_bound_sites_saving_is_read_by_its_rounds(unbound_ms, binding):
    rows = [_in_turns(*key, ms) for key, ms in ROUND_MS.items() if key[1] != UNBOUND]
    (entry,) = verdicts(rows + [_in_turns("fp8", UNBOUND, unbound_ms)])
    assert entry["binding"] == binding
    report = {"rows": rows, "checks": {}, "verdicts": [entry]}
    (line,) = [line for line in table(report).splitlines() if "| fp8 |" in line]
    assert line.endswith(f" binding {binding} |")


def test_the_table_shows_a_straddling_ratio_as_noise_with_its_spread():
    rows = [_in_turns(*key, ms) for key, ms in ROUND_MS.items()]
    report = {"rows": rows, "checks": {}, "verdicts": verdicts(rows)}
    (line,) = [line for line in table(report).splitlines() if "| fp8 |" in line]
    assert "| 1.58 (1.50-1.64) noise |" in line


@pytest.mark.parametrize("option", ["--rounds", "--steps", "--reference-steps"])
@pytest.mark.parametrize("count", ["0", "-1", "2.5"])
def test_a_count_below_one_is_refused(option, count, capsys):
    with pytest.raises(SystemExit):
        bench_qat.main(["out.json", option, count])
    assert (f"argument {option}: expected a positive number of steps or rounds, got '{count}'"
            in capsys.readouterr().err)

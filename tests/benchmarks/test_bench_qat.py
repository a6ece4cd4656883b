"""bench_qat's verdicts: a kernels row is judged against its recipe's references (eager), the
unquantized step of its own mode and its recipe's eager step; a row whose mode failed is shown
with its error and judged nowhere; ``--unbound``'s rows (the layers calling ``ops`` per call)
are listed apart and judged nowhere."""

import pytest

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


def test_an_unbound_row_is_listed_apart_and_judged_nowhere():
    report = {"rows": ROWS, "checks": {}, "verdicts": verdicts(ROWS)}
    assert [v["ms"] for v in report["verdicts"] if v["mode"] == "eager"] == [25.0]
    (unbound,) = [line for line in table(report).splitlines() if "ops per call" in line]
    assert "30.000" in unbound


"""The steps of one comparison take turns round by round, each turn timed by the benchmark's own
timer, and a ratio is read round by round: what keeps a host-bound comparison from comparing the
machine's moments (benchmarks/bench/turns.py)."""

from __future__ import annotations

from benchmarks.bench import turns


def test_the_steps_take_turns_round_by_round():
    order = []

    def timer(step, iters, warmup):
        order.append((step(), iters, warmup))
        return [1.0] * max(iters, 1)

    times = turns.interleaved_ms({"stock": lambda: "stock", "ours": lambda: "ours"},
                                 rounds=3, iters=4, warmup=2, timer=timer)
    assert order == [("stock", 1, 2), ("ours", 1, 2)] + [("stock", 4, 0), ("ours", 4, 0)] * 3
    assert times == {"stock": [1.0] * 3, "ours": [1.0] * 3}


def test_a_turn_counts_the_median_of_its_steps():
    rounds = iter([[9.0], [9.0], [1.0, 5.0, 2.0], [4.0, 3.0, 30.0]])
    times = turns.interleaved_ms({"a": None, "b": None}, rounds=1, iters=3, warmup=1,
                                 timer=lambda step, iters, warmup: next(rounds))
    assert times == {"a": [2.0], "b": [4.0]}


def test_a_ratio_is_the_median_of_the_rounds_ratios_with_their_spread():
    times = {"slow": [20.0, 33.0, 24.0], "fast": [10.0, 11.0, 12.0]}
    assert turns.round_ratios(times, "slow", "fast") == (2.0, [2.0, 3.0])

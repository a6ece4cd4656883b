"""How a number reads in a table: ratios, percentages, spans and the table's markdown, one
convention for every area."""

from __future__ import annotations

import statistics
from collections.abc import Callable

median = statistics.median


def ratio(x: float) -> str:
    """A ratio to two decimals, or three where two would print 1.00 for one that is not 1."""
    return f"{x:.3f}x" if 0.995 <= x < 1.005 and x != 1 else f"{x:.2f}x"


def pct(x: float) -> str:
    return f"{x:.0%}"


def num(x: float) -> str:
    """A floor or a time in µs: whole above 10, one decimal above 1, else two."""
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}" if x >= 1 else f"{x:.2f}"


def span(values: list[float], fmt: Callable[[float], str]) -> str:
    lo, hi = fmt(min(values)), fmt(max(values))
    return lo if lo == hi else f"{lo}-{hi}"


def pct_span(values) -> str:
    return f"{min(values):.0%}-{max(values):.0%}"


def x_span(values, digits=1) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}x"


def times(x: float) -> str:
    return f"{x:.3f}x"


def verdict(met: bool) -> str:
    return "met" if met else "**missed**"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(r) + " |" for r in rows])


def missed_line(missed: list[str]) -> list[str]:
    return ["", "Missed: " + ("; ".join(missed) + "." if missed else "none.")]

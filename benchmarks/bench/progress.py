"""One line per measured row on stderr as it starts: a benchmark that runs for minutes says where
it is (the table and the JSON still come at the end, on stdout and in the file)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def each(items: Iterable[T], what=str) -> Iterator[T]:
    """``items`` one by one, printing ``[i/n, s elapsed] what(item)`` before each."""
    items = list(items)
    start = time.monotonic()
    for index, item in enumerate(items, 1):
        print(f"[{index}/{len(items)}, {time.monotonic() - start:.0f} s] {what(item)}",
              file=sys.stderr, flush=True)
        yield item

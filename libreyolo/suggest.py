"""The nearest name to a mistyped one, for error messages: a typo's fix should be one glance
away, not somewhere in a list of every name."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the choice nearest to ``word`` (difflib's ratio, at its
    default cutoff of 0.6), or ``""`` when none is near or ``word`` is no str."""
    if not isinstance(word, str):
        return ""
    near = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""

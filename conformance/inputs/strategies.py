"""Hypothesis strategies for layouts, and the suite's profiles (ci / dev / thorough / validate).

Values come from the seeded generators (`conformance.inputs.generators`), which inject the edge
cases; hypothesis explores what the shape sets cannot enumerate: shapes, axes, group sizes, dtypes,
layouts and seeds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

#: Sides that straddle the block sizes kernels use (16 and 32 element blocks, 128..1024 tiles).
AWKWARD_SIDES = (0, 1, 2, 3, 7, 13, 15, 16, 17, 31, 32, 33, 63, 65, 127, 129, 257)
MAX_ELEMENTS = 1 << 14


def sides() -> st.SearchStrategy[int]:
    return st.one_of(st.integers(1, 48), st.sampled_from(AWKWARD_SIDES))


def shapes(min_dims: int = 1, max_dims: int = 4) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes of `min_dims`..`max_dims` dimensions, at most MAX_ELEMENTS elements, empty allowed."""
    return st.lists(sides(), min_size=min_dims, max_size=max_dims).map(tuple).filter(
        lambda s: math.prod(s) <= MAX_ELEMENTS)


def group_sizes() -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from([1, 16, 32, 64, 128]), st.integers(1, 70))


@dataclass(frozen=True)
class Profile:
    """How much the suite explores: shape-set sizes it includes, the sizes run in every dtype and
    layout (the others run once, in the first dtype and layout), hypothesis examples per test."""

    name: str
    sizes: frozenset
    full_grid_sizes: frozenset
    max_examples: int
    derandomize: bool


_SMALL, _MEDIUM = frozenset({"small"}), frozenset({"small", "medium"})
_ALL_SIZES = _MEDIUM | {"large"}
PROFILES = {
    "ci": Profile("ci", _MEDIUM, _SMALL, max_examples=6, derandomize=True),
    "dev": Profile("dev", _MEDIUM, _MEDIUM, max_examples=40, derandomize=False),
    # Sized to fit one 10-minute GPU command (-n 15 on the H200's 16 cores): large cases once
    # each, since their CPU reference dominates; 12 random examples per hypothesis target,
    # because each new shape compiles its kernels (60 had not finished in 400 s on the H200).
    "thorough": Profile("thorough", _MEDIUM | {"large"}, _MEDIUM, max_examples=12,
                        derandomize=False),
    # What validating one named implementation (`--impl`) runs unless told otherwise: every case
    # in every dtype and layout its slot declares, so a bug specific to one size x dtype or
    # size x layout combination fails; derandomized, so a third party's CI is reproducible.
    "validate": Profile("validate", _ALL_SIZES, _ALL_SIZES, max_examples=12, derandomize=True),
}
#: The profile of a run that names no --profile: `validate` when --impl names an implementation.
DEFAULT_PROFILE, IMPL_DEFAULT_PROFILE = "ci", "validate"
#: The interpreter costs ~0.7 ms per program instance (docs/architecture.md, "Facts for kernel
#: authors"): it only gets small cases.
INTERPRETER_SIZES = frozenset({"small"})


def profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"--profile: expected one of {sorted(PROFILES)}, got {name!r}") from None


def hypothesis_settings(p: Profile) -> settings:
    """No `@reproduce_failure` blob: the suite saves a failing example and prints the one command
    that replays it, which works without editing a test (a third party cannot edit ours)."""
    return settings(max_examples=p.max_examples, derandomize=p.derandomize, deadline=None,
                    database=None, print_blob=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])

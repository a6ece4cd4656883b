"""Launch plans remembered under what decides them, so a decoder's steady-state call skips
validation and planning.

Validating and planning a deformable-attention input reads only metadata: the tensors' shapes,
dtypes and devices, the level sizes given as host ``(H, W)`` pairs, the point counts and the
sampling method, and whether the interpreter is on. A decoder layer calls with the same metadata
every time, and this Python work was most of a small call's host time (``benchmarks/NOTES.md``,
"Plans kept by description"), so a plan is remembered under exactly those. Only plans are
remembered: a decline can depend on a capture in progress and is worked out again. Level sizes
given as a tensor key a plan by the values read from it once (``levels.remembered``: that tensor
at its current version; the classic provider does this, and its plans hold their own device copy
of the sizes); until they are read, or when sizes or counts are not plain ints, the input is
planned every call (a float must not pass for an int). Kept in a
``libreyolo.kernels.plan_cache.PlanCache``, as the other slots' plans are.
"""

from __future__ import annotations

import itertools

import torch

from libreyolo.kernels.plan_cache import PlanCache
from libreyolo.kernels.prepared import Prepared
from libreyolo.kernels.settings import interpreting

MAX_PLANS = 64

_plans = PlanCache(MAX_PLANS)


def key(tensors: tuple, spatial_shapes, counts: object = (),
        method: object = "bilinear") -> tuple | None:
    """What decides the plan for this input, or None when it cannot be keyed cheaply."""
    levels = _int_tuples(spatial_shapes, 2)
    counts = _ints(counts)
    if levels is None or counts is None or type(method) is not str:
        return None
    return _with_tensors(tensors, (levels, counts, method))


def checked_levels_key(tensors: tuple, levels: tuple[tuple[int, int], ...]) -> tuple | None:
    """``key(tensors, levels)`` for level sizes ``levels.level_shapes`` already checked (a tuple
    of ``(int, int)`` tuples, as read from a tensor): equal to it, without checking them again
    (the check was half of ``key``'s cost: ``benchmarks/NOTES.md``, "Checked level sizes")."""
    return _with_tensors(tensors, (levels, (), "bilinear"))


def _with_tensors(tensors: tuple, head: tuple) -> tuple | None:
    """``head`` followed by each tensor's shape, dtype and device, and the interpreter setting;
    None when one is not a tensor. Flat and built in one expression (a decoder asks this every
    call): value, locations and weights, in that order."""
    value, locations, weights = tensors
    if not (isinstance(value, torch.Tensor) and isinstance(locations, torch.Tensor)
            and isinstance(weights, torch.Tensor)):
        return None
    return (*head, value.shape, value.dtype, value.device, locations.shape, locations.dtype,
            locations.device, weights.shape, weights.dtype, weights.device, interpreting())


def recall(plan_key: tuple | None) -> Prepared | None:
    return None if plan_key is None else _plans.get(plan_key)


def remember(plan_key: tuple | None, plan) -> None:
    """Keep ``plan`` under ``plan_key`` (declines and unkeyed inputs are not kept)."""
    if plan_key is not None and isinstance(plan, Prepared):
        _plans.put(plan_key, plan)


_SEQUENCES = frozenset({list, tuple})
_INTS = frozenset({int})


def _ints(values: object) -> tuple[int, ...] | None:
    """``values`` as a tuple when it is a list or tuple of ints (bool, float, numpy ints: None,
    planned every call); the type checks iterate in C (a decoder asks this every call)."""
    if type(values) not in _SEQUENCES or not set(map(type, values)) <= _INTS:
        return None
    return tuple(values)


def _int_tuples(pairs: object, width: int) -> tuple[tuple[int, ...], ...] | None:
    """``pairs`` as a tuple of ``width``-tuples of ints, or None (see ``_ints``)."""
    if type(pairs) not in _SEQUENCES or not set(map(type, pairs)) <= _SEQUENCES:
        return None
    if pairs and set(map(len, pairs)) != {width}:
        return None
    if not set(map(type, itertools.chain.from_iterable(pairs))) <= _INTS:
        return None
    return tuple(map(tuple, pairs))

"""Launch plans remembered under what decides them, so a decoder's steady-state call skips
validation and planning.

Validating and planning a deformable-attention input reads only metadata: the tensors' shapes,
dtypes and devices, the level sizes given as host ``(H, W)`` pairs, the point counts and the
sampling method, and whether the interpreter is on. A decoder layer calls with the same metadata
every time, and on the H200 this Python work was most of a small call's host time
(``docs/performance.md``), so a plan is remembered under exactly those. Only plans are
remembered: a decline can depend on a capture in progress and is worked out again. An input whose
level sizes come as a tensor, or whose sizes or counts are not plain ints, is planned every call
(its key would need its values, or a float would pass for an int). Bounded like ``levels.py``.
"""

from __future__ import annotations

import threading

import torch

from libreyolo.kernels.prepared import Prepared
from libreyolo.kernels.settings import interpreting

MAX_PLANS = 64

_lock = threading.Lock()
_plans: dict[tuple, Prepared] = {}


def key(tensors: tuple, spatial_shapes, counts: object = (),
        method: object = "bilinear") -> tuple | None:
    """What decides the plan for this input, or None when it cannot be keyed cheaply."""
    levels = _int_tuples(spatial_shapes, 2)
    counts = _ints(counts)
    if levels is None or counts is None or type(method) is not str:
        return None
    metadata = []
    for tensor in tensors:
        if not isinstance(tensor, torch.Tensor):
            return None
        metadata.append((tensor.shape, tensor.dtype, tensor.device))
    return levels, counts, method, *metadata, interpreting()


def recall(plan_key: tuple | None) -> Prepared | None:
    return None if plan_key is None else _plans.get(plan_key)


def remember(plan_key: tuple | None, plan) -> None:
    """Keep ``plan`` under ``plan_key`` (declines and unkeyed inputs are not kept)."""
    if plan_key is None or not isinstance(plan, Prepared):
        return
    with _lock:
        _plans.pop(plan_key, None)
        _plans[plan_key] = plan
        while len(_plans) > MAX_PLANS:
            _plans.pop(next(iter(_plans)))


def _ints(values: object) -> tuple[int, ...] | None:
    if type(values) not in (list, tuple):
        return None
    if any(type(v) is not int for v in values):  # bool, float, numpy ints: planned every call
        return None
    return tuple(values)


def _int_tuples(pairs: object, width: int) -> tuple[tuple[int, ...], ...] | None:
    if type(pairs) not in (list, tuple):
        return None
    rows = []
    for pair in pairs:
        row = _ints(pair)
        if row is None or len(row) != width:
            return None
        rows.append(row)
    return tuple(rows)

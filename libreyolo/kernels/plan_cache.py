"""Plans kept under a description of the arguments that decide them.

A detector calls each slot with the same shapes, dtypes and settings every time, so the Python
that validates and plans a call (most of a small call's host time: ``benchmarks/NOTES.md``,
"Plans kept by description") can run once per description and be looked up afterwards. A description
holds what checks and plans depend on: each tensor's dtype, shape, strides, device and layout,
and every other argument with its exact type (``4``, ``4.0`` and ``True`` hash alike and check
differently). Tensor *values* are not in it: a plan that depends on values it read (a user-given
scale checked for NaN, a zero point baked into the plan) names those tensors as *watched*, and is
reused only for the very same tensors, unchanged since it was made (identity, version counter
and storage, as ``libreyolo.quant.validation.HostReads`` knows a tensor; an inference tensor has
no version counter, so a plan watching one is never kept).

What stays per call is what can change between equal descriptions: graph capture, grad mode, and
the pointers' alignment (``triton_launch``). While a compiled graph traces an implementation
(``libreyolo.capture.tracing_kernels``) nothing is kept or looked up: a fake tensor describes
itself as a real one does, and neither's plan serves the other.
"""

from __future__ import annotations

import threading
import weakref

import torch

from libreyolo.capture import TRACING
from libreyolo.quant.validation import HOST_READS

_STRIDED = torch.strided


def describe(arg: object) -> tuple:
    """What checks, declines and a kernel's specialization depend on, of one argument."""
    if isinstance(arg, torch.Tensor):
        if arg.layout is not _STRIDED:
            return (arg.dtype, arg.shape, arg.layout, arg.device)
        return (arg.dtype, arg.shape, arg.stride(), arg.device)
    if type(arg) in (tuple, list):
        return (type(arg), *map(describe, arg))
    return (type(arg), arg)


class PlanCache:
    """A bounded map from descriptions to plans (past ``limit`` entries it starts over: the
    distinct shapes of the models in use are far fewer). A plan that watches tensors is kept
    per description *and* watched tensors: the layers of a model share descriptions but each
    has its own calibrated scale, and one entry per description made them evict each other on
    every call (a QAT decoder's 55 ``fake_quant_int8_affine`` calls a step all re-planned)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._entries: dict[tuple, tuple[tuple, object]] = {}
        self._lock = threading.Lock()

    def get(self, key: tuple, watched: tuple[torch.Tensor, ...] = ()) -> object | None:
        """The plan kept under ``key``, if it was made from these ``watched`` tensors and none of
        them changed since; else None."""
        if getattr(TRACING, "on", False):
            return None
        try:
            entry = self._entries.get((key, *map(id, watched)) if watched else key)
        except TypeError:  # an unhashable argument: the checks run every call (and reject it)
            return None
        if entry is None:
            return None
        stamps, plan = entry
        if len(stamps) != len(watched):
            return None
        for (ref, version, pointer), tensor in zip(stamps, watched, strict=True):
            if ref() is not tensor or tensor._version != version or tensor.data_ptr() != pointer:
                return None
        return plan

    def put(self, key: tuple, plan: object, watched: tuple[torch.Tensor, ...] = ()) -> None:
        """Keep ``plan`` under ``key``, if the values of every watched tensor were read for it
        (``HOST_READS`` knows them; not so for one planned while reads were forbidden, under a
        CUDA graph capture, or for an inference tensor)."""
        if getattr(TRACING, "on", False) or not all(HOST_READS.known(t) for t in watched):
            return
        stamps = tuple((weakref.ref(t), t._version, t.data_ptr()) for t in watched)
        with self._lock:
            if len(self._entries) >= self._limit:
                self._entries.clear()
            try:  # an id is checked against its weak reference on every get
                self._entries[(key, *map(id, watched)) if watched else key] = (stamps, plan)
            except TypeError:  # unhashable: never kept
                pass

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


"""The kernel registry: slots, their references and the accelerated implementations on top.

Importing this package imports neither triton nor the ``kernels`` package: accelerated
providers load lazily, on the first resolution. ``docs/kernels.md`` describes the behaviour.
"""

from .registry import (
    REFERENCE,
    Implementation,
    KernelDisabledWarning,
    NoImplementationError,
    PredicateWarning,
    SelectionWarning,
    active,
    candidates,
    clear_cache,
    decline_reason,
    dispatch,
    explain,
    register,
    registered,
    resolve,
    unregister,
)
from .slots import SLOTS, Slot, get_slot, slot_names

__all__ = [
    "REFERENCE",
    "SLOTS",
    "Implementation",
    "KernelDisabledWarning",
    "NoImplementationError",
    "PredicateWarning",
    "SelectionWarning",
    "Slot",
    "active",
    "candidates",
    "clear_cache",
    "decline_reason",
    "dispatch",
    "explain",
    "get_slot",
    "register",
    "registered",
    "resolve",
    "slot_names",
    "unregister",
]

"""The kernel registry: slots, their references and the accelerated implementations on top.

Importing this package imports neither triton nor the ``kernels`` package: accelerated
providers (in-tree, entry points of the group ``libreyolo.kernels``, the ``libreyolo_kernels``
package) load lazily, on the first resolution. ``docs/kernels.md`` describes the behaviour.
"""

from .capabilities import Capabilities
from .prepared import Prepared
from .registry import (
    REFERENCE,
    Implementation,
    KernelDisabledWarning,
    KernelOutputError,
    NoImplementationError,
    OutOfTreeWarning,
    PredicateWarning,
    SelectionWarning,
    active,
    candidates,
    clear_cache,
    decline_reason,
    dispatch,
    explain,
    failures,
    register,
    registered,
    resolve,
    unregister,
)
from .slots import SLOTS, Slot, get_slot, slot_names

__all__ = [
    "REFERENCE",
    "SLOTS",
    "Capabilities",
    "Implementation",
    "KernelDisabledWarning",
    "KernelOutputError",
    "NoImplementationError",
    "OutOfTreeWarning",
    "PredicateWarning",
    "Prepared",
    "SelectionWarning",
    "Slot",
    "active",
    "candidates",
    "clear_cache",
    "decline_reason",
    "dispatch",
    "explain",
    "failures",
    "get_slot",
    "register",
    "registered",
    "resolve",
    "slot_names",
    "unregister",
]

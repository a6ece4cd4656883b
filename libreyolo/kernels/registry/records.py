"""What the registry hands out and raises: an implementation's record, a choice, the errors and
the warnings. No state and no behaviour: every other room of the registry reads these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .. import settings
from ..capabilities import Capabilities
from ..prepared import Prepared
from ..providers import CALLER

REFERENCE = settings.REFERENCE

# Bad input is reported by ValueError and TypeError. Which of them an implementation's error is
# (bad input, or its own bug) is decided by the slot's judge: the reference, or the validator.
INPUT_ERRORS = (ValueError, TypeError)


class KernelDisabledWarning(RuntimeWarning):
    """An accelerated implementation failed and is disabled for the rest of the process."""


class PredicateWarning(RuntimeWarning):
    """An implementation's predicate raised; the implementation is treated as ineligible."""


class SelectionWarning(UserWarning):
    """``LIBREYOLO_KERNELS`` names an unknown slot, or no registered implementation."""


class OutOfTreeWarning(UserWarning):
    """An implementation an installed package registered runs a slot in place of an in-tree one
    (the reference included): installing a package changes that slot's numbers."""


class NoImplementationError(LookupError):
    """A slot with a reference found no implementation willing to take an input."""


class KernelOutputError(RuntimeError):
    """An implementation that declared it may write its inputs (``writes_inputs=True``) returned
    something other than the slot's declared output: nothing else may run those inputs now."""


@dataclass(frozen=True, eq=False)
class Implementation:
    """One registered implementation of a slot. Compared by identity."""

    op: str
    name: str
    fn: Callable
    predicate: Callable[[], bool | str] | None = None
    accepts: Callable[..., str | Prepared | None] | None = None
    sources: tuple[str, ...] = field(default=())
    origin: str = CALLER
    capabilities: Capabilities | None = None
    #: ``backward(grad, *args, **kwargs)``: the gradients of the slot's differentiable inputs
    #: (declared in ``slots.py``), for the slot's operator; None: recomputed through ``fn``.
    backward: Callable[..., tuple] | None = None
    #: It may write an input tensor: after it raised or returned a wrong output nothing else may
    #: run the (possibly changed) inputs, so its error propagates (``register``).
    writes_inputs: bool = False
    #: It may be traced into a compiled graph (``libreyolo.kernels.traced``): run on fake
    #: tensors, it launches its Triton kernels through ``triton_launch`` (or calls torch
    #: operators), keeps nothing between calls but its plans, and reads no tensor's values.
    #: Honoured for in-tree implementations only; any other keeps the slot's opaque operator.
    traceable: bool = False
    #: Who registered it: the distribution of an entry point, else the module of ``fn`` (for a
    #: package the registry or the CLI's ``--import`` imported, that package's module).
    provider: str | None = None
    #: The slot's own reference (the name ``reference``); a field, not a property: dispatch
    #: asks it per call.
    is_reference: bool = field(init=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "is_reference", self.name == REFERENCE)


@dataclass(slots=True)
class Choice:
    """The implementation a call would run first, and the plan its ``accepts`` made for it.
    Not frozen: a call makes one per implementation it asks, and a frozen record costs four
    times as much to make (no code changes one)."""

    impl: Implementation
    plan: Prepared | None = None

    @property
    def prepared(self) -> dict:
        """The keyword the implementation takes its plan by: ``{"prepared": plan}``, or ``{}``."""
        return {} if self.plan is None else {"prepared": self.plan}


@dataclass(slots=True)
class Declined:
    """An implementation's no to a call, with why. ``wrong_answer``: its ``accepts`` answered
    something other than None, a reason string or a ``Prepared`` plan, which a call disables."""

    reason: str
    wrong_answer: bool = False

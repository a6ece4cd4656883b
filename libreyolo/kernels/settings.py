"""Every environment setting of the kernel subsystem, read in one place.

Settings are read on each call (an ``os.environ`` lookup is cheap), so a change between calls is
honoured without restarting the process. ``docs/settings.md`` documents each one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

KERNELS = "LIBREYOLO_KERNELS"
LEGACY_KERNELS = "LIBREYOLO_QUANT_KERNELS"  # read only when KERNELS is unset
HUB_KERNELS = "LIBREYOLO_HUB_KERNELS"

_FORCE_REFERENCE = frozenset({"off", "reference"})
_FALSE = frozenset({"0", "false", "off", "no"})


@dataclass(frozen=True)
class Selection:
    """Which implementations may be selected.

    ``only is None`` and ``reference_only`` false: every eligible implementation, newest first.
    ``reference_only``: references alone, and accelerated providers are not even imported.
    ``only == NAME``: implementations registered under NAME, then the reference.
    """

    reference_only: bool = False
    only: str | None = None
    source: str | None = None  # the variable the value came from, for messages

    def allows(self, name: str, is_reference: bool) -> bool:
        if is_reference:
            return True
        if self.reference_only:
            return False
        return self.only is None or name == self.only


def _normalized(variable: str) -> str | None:
    value = os.environ.get(variable)
    if value is None:
        return None
    value = value.strip().lower()
    return value or None


def selection() -> Selection:
    """The selection in effect: ``LIBREYOLO_KERNELS``, else the legacy alias, else everything."""
    for variable in (KERNELS, LEGACY_KERNELS):
        if variable in os.environ:
            value = _normalized(variable)
            if value is None:
                return Selection(source=variable)
            if value in _FORCE_REFERENCE:
                return Selection(reference_only=True, source=variable)
            return Selection(only=value, source=variable)
    return Selection()


TRITON_INTERPRET = "TRITON_INTERPRET"
# Triton's own reading of the variable (triton 3.6, knobs.getenv_bool): these, case-insensitive.
_TRITON_TRUE = frozenset({"1", "true", "on", "yes"})


def interpreting() -> bool:
    """Triton kernels run on CPU tensors through the interpreter (a test mode)."""
    return (os.environ.get(TRITON_INTERPRET) or "").strip().lower() in _TRITON_TRUE


def hub_kernels_enabled() -> bool:
    """False when ``LIBREYOLO_HUB_KERNELS`` is 0/false/off/no (case- and space-insensitive)."""
    value = _normalized(HUB_KERNELS)
    return value is None or value not in _FALSE


def in_effect() -> dict[str, str | None]:
    """The raw values of every setting, for the CLI and for parity records."""
    variables = (KERNELS, LEGACY_KERNELS, HUB_KERNELS, TRITON_INTERPRET)
    return {name: os.environ.get(name) for name in variables}

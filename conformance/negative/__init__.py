"""Negative controls: deliberately broken implementations the suite must reject.

Each module in this package exposes `CONTROLS = [(name, fn, "check: why it must catch it"), ...]`.
The check is the text before the first colon (`exact`, `ste`, `bounded`, `dtype`,
`inputs-unmodified`, `accepts`...). A control's slot is `fn.slot` if set (see `breaks`), else the
module's name. `fn.accepts`, if set, is registered as the control's per-input check, and
`fn.capabilities` as its declaration (an out-of-tree backend's `Capabilities`).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Control:
    slot: str
    name: str
    fn: Any
    check: str
    why: str

    def register(self) -> None:
        from libreyolo.kernels import register

        register(self.slot, self.fn, name=self.name, accepts=getattr(self.fn, "accepts", None),
                 capabilities=getattr(self.fn, "capabilities", None))

    def unregister(self) -> None:
        from libreyolo.kernels import unregister

        unregister(self.slot, self.name)


def breaks(slot: str, accepts=None, capabilities=None):
    """Mark a control as an implementation of `slot` (for modules holding several slots)."""

    def mark(fn):
        fn.slot = slot
        if accepts is not None:
            fn.accepts = accepts
        if capabilities is not None:
            fn.capabilities = capabilities
        return fn

    return mark


def parametrize_controls(metafunc, argname: str, controls, **kwargs) -> None:
    """Parametrize `argname`, where the test takes it, with the controls of the slots this run
    takes: under `--slot`, another slot's control has no cell that could reject it, so it is
    left out of the run rather than failed (pytest reports an empty set as skipped, naming it).
    For a module's `pytest_generate_tests`; `kwargs` go to `metafunc.parametrize`."""
    if argname not in metafunc.fixturenames:
        return
    from conformance.plugin import options

    run = options(metafunc.config)
    metafunc.parametrize(argname, [c for c in controls if run.takes(c.slot)],
                         ids=lambda c: c.name, **kwargs)


def load_controls(attribute: str = "CONTROLS") -> list[Control]:
    """Every module's `attribute` list: `CONTROLS` are judged by the matrix cells under the run's
    profile; other lists by the test that names them (`ERROR_CONTROLS`: the error cells,
    `VALIDATE_CONTROLS`: the matrix under the `validate` profile)."""
    controls = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for name, fn, check in getattr(module, attribute, ()):
            check_name, _, why = check.partition(":")
            controls.append(Control(getattr(fn, "slot", info.name), f"negative-{name}", fn,
                                    check_name.strip(), why.strip()))
    return controls

"""Names that moved, still importable from their old module with a ``DeprecationWarning`` that
says where they went (docs/migration.md lists them, for out-of-tree backends).

A module that lost names sets ``__getattr__ = moved(__name__, {...})``: each old name maps to
``"package.module:name"`` (the same object, now there) or to a callable that stands in for it
(a function whose meaning changed, such as a predicate that now answers a reason).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable


def moved(module: str, names: dict[str, str | Callable]) -> Callable[[str], object]:
    """A module ``__getattr__`` serving ``names``: an attribute error for any other name."""

    def __getattr__(name: str):
        target = names.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        where = f"moved to {target}" if isinstance(target, str) else \
            target.__doc__.split("\n")[0]
        warnings.warn(f"{module}.{name} is deprecated: {where} (docs/migration.md)",
                      DeprecationWarning, stacklevel=2)
        if not isinstance(target, str):
            return target
        path, _, attr = target.partition(":")
        return getattr(importlib.import_module(path), attr)

    return __getattr__

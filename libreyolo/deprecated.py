"""Names and modules that moved, still importable from their old place with a
``DeprecationWarning`` that says where they went (docs/migration.md lists them, for out-of-tree
backends).

A module that lost names sets ``__getattr__ = moved(__name__, {...})``: each old name maps to
``"package.module:name"`` (the same object, now there) or to a callable that stands in for it
(a function whose meaning changed, such as a predicate that now answers a reason). A package
whose modules moved calls ``moved_modules({old: new, ...})``: ``import old`` gives the new module
itself, and ``python -m old`` runs it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
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


def moved_modules(modules: dict[str, str]) -> None:
    """Serve each old module name in ``modules`` with its new module (installed once per table),
    ahead of the path finders: an old name may now be a data folder (``conformance/records/``),
    which they would import as an empty namespace package."""
    if not any(getattr(f, "modules", None) is modules for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModules(modules))


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds only the old names; loading one imports the new module and puts it in the old
    name's place in ``sys.modules``, which importlib then returns. The new module is never
    the one importlib loads: importlib would set its ``__spec__`` to the old name's (origin
    None), and the conformance digests find a catalogue module by its spec."""

    def __init__(self, modules: dict[str, str]):
        self.modules = modules
        #: Every package above an old name, once: the finder runs on every import anywhere, so
        #: telling whether a name is one must not scan the table each time.
        self.parents = {old.rsplit(".", depth)[0] for old in modules
                        for depth in range(1, old.count(".") + 1)}

    def find_spec(self, name, path=None, target=None):
        if name in self.modules:
            return importlib.util.spec_from_loader(name, self)
        if name in self.parents and \
                importlib.machinery.PathFinder.find_spec(name, path) is None:  # a package gone
            return importlib.util.spec_from_loader(name, self, is_package=True)
        return None

    def _warn(self, name: str) -> str:
        new = self.modules[name]
        warnings.warn(f"{name} is deprecated: moved to {new} (docs/migration.md)",
                      DeprecationWarning, stacklevel=3)
        return new

    def create_module(self, spec):
        """A plain module: a gone package's, or the old name's until ``exec_module``."""
        return types.ModuleType(spec.name, "moved: see docs/migration.md")

    def exec_module(self, module) -> None:
        """An old name becomes the new module (a gone package stays the plain module: only
        its moved modules import from it)."""
        if module.__name__ in self.modules:
            sys.modules[module.__name__] = importlib.import_module(self._warn(module.__name__))

    def get_code(self, name: str):
        """For ``python -m old``: the new module's code."""
        new = self._warn(name)
        return importlib.util.find_spec(new).loader.get_code(new)

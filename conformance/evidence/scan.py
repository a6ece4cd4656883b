"""The scan: every implementation registered from the `libreyolo` package, with the source files
it registered with.

In-tree means anything in the tree: the scan imports every module of `libreyolo` and collects
every registration whose function comes from it, so no hand-kept list can miss one. The
recorder needs only this to know what to record, so it lives apart from the gate's checks
(`gate.py`): the recorder's modules are in every record's source digest, and an edit to a check
must not stale every record.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from conformance.schema.declarations import is_in_tree

IN_TREE_PACKAGE = "libreyolo"


@dataclass(frozen=True)
class Target:
    """One in-tree implementation of one slot, with the source files it registered with."""

    slot: str
    impl: str
    sources: tuple
    capabilities: object = None  # its declaration (libreyolo.kernels.Capabilities), if any

    @property
    def key(self) -> str:
        return f"{self.slot}/{self.impl}"


def import_package(package: str = IN_TREE_PACKAGE) -> list[str]:
    """Import every module of `package` (so every registration it makes runs); their names.

    A module that needs a missing optional dependency (triton's kernels themselves) may fail to
    import, but only if it registers nothing: registrations live in modules that import without
    those dependencies, so a machine without them cannot make the scan see less.
    """
    from libreyolo.kernels import providers, registry

    # the providers first, in their declared order, so the scan registers them as a run does
    providers.import_in_tree(registry.loading)
    root = importlib.import_module(package)
    names = [package]
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue  # running it is the CLI, not a registration
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] not in providers.OPTIONAL_DEPENDENCIES:
                raise
            spec = importlib.util.find_spec(info.name)
            source = Path(spec.origin).read_text()
            if register_calls(source):
                raise ImportError(f"{info.name} registers implementations but needs "
                                  f"{exc.name} to import: registration must not depend on an "
                                  "optional dependency") from exc
            continue
        names.append(info.name)
    return names


def register_calls(source: str, name: str = "<source>") -> list[ast.Call]:
    """The `register(...)` calls in `source`, the registry's own for the references excepted."""
    calls = []
    for node in ast.walk(ast.parse(source, name)):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else \
            getattr(node.func, "id", None)
        reference = any(k.arg == "name" and getattr(k.value, "id", None) == "REFERENCE"
                        for k in node.keywords)
        if callee == "register" and not reference:
            calls.append(node)
    return calls


@cache
def in_tree_targets() -> tuple[Target, ...]:
    """Every registration made by an in-tree module, after importing all of them."""
    from libreyolo.kernels import registered, slot_names

    import_package()
    return tuple(Target(slot, impl.name, tuple(impl.sources), impl.capabilities)
                 for slot in slot_names() for impl in registered(slot) if is_in_tree(impl))

"""The suite's modules import each other without a cycle (function-level imports counted: a cycle
hidden in a function still ties the modules together), so each can be read from the bottom up; and
they sit in folders by purpose, each folder importing only the folders before it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "conformance"


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    modules = {_module(p): p for p in SUITE.rglob("*.py") if "test_" not in p.name}
    graph = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            found |= {t for t in targets if t in modules and t != name}
        graph[name] = found
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_suite_has_no_import_cycle():
    assert cycles(import_graph()) == []


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]


#: The suite's folders by purpose, in import order: a module imports its own folder's or earlier
#: ones'. ``plugin.py`` (which drives a run), ``negative/`` (the controls, which the gate counts)
#: and ``golden/`` stand outside the order.
LAYERS = ("schema", "inputs", "catalogue", "running", "evidence", "reporting")
TOP_LEVEL = {"__init__.py", "plugin.py"}


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a later folder from an earlier one, as ``module -> module``."""
    def layer(module: str) -> int | None:
        parts = module.split(".")
        return LAYERS.index(parts[1]) if len(parts) > 2 and parts[1] in LAYERS else None

    return sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps
                  if layer(m) is not None and (layer(d) or 0) > layer(m))


def test_the_suite_modules_sit_in_folders_by_purpose():
    loose = sorted(p.name for p in SUITE.glob("*.py")
                   if p.name not in TOP_LEVEL and not p.name.startswith("test_"))
    assert loose == [], f"move these into a folder by purpose ({', '.join(LAYERS)}): {loose}"
    for folder in LAYERS:
        assert (SUITE / folder / "__init__.py").read_text().startswith('"""'), \
            f"conformance/{folder}/__init__.py says what the folder holds"


def test_no_folder_imports_a_later_one():
    assert upward_imports(import_graph()) == []


def test_the_layer_check_finds_an_upward_import():
    graph = {"conformance.schema.spec": {"conformance.running.cells"},
             "conformance.running.cells": {"conformance.schema.spec"}}
    assert upward_imports(graph) == ["conformance.schema.spec -> conformance.running.cells"]

"""The benchmark modules import each other without a circle (issue 51: bench_ms_deform_attn and
profile_ms_deform_attn imported each other; the profiler they share is now its own module), so
each can be read, and moved, from the bottom up. Every ``benchmarks.`` import counts, those inside
functions too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def imports(path: Path) -> set[str]:
    """The ``benchmarks.`` modules ``path`` imports (``from benchmarks.x import y`` names ``y``
    when ``benchmarks.x.y`` is a module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return {name for name in out if name.startswith("benchmarks.")}


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` (module -> modules it imports), or [] if there is none."""
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> list[str]:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return trail[trail.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt, trail + [nxt])):
                return found
        state[node] = "done"
        return []

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return []


def graph_of(paths: list[Path]) -> dict[str, set[str]]:
    modules = {module_name(p): p for p in paths}
    return {name: imports(path) & set(modules) for name, path in modules.items()}


def test_no_benchmark_module_imports_itself_back():
    paths = [p for p in (ROOT / "benchmarks").glob("**/*.py") if p.name != "__init__.py"]
    graph = graph_of(paths)
    assert "benchmarks.profiles.msda_host_profile" in graph["benchmarks.bench.bench_ms_deform_attn"]
    assert cycle(graph) == [], " -> ".join(cycle(graph))


def test_a_circle_is_found(tmp_path):
    """Negative control: a circle of three modules is named, and an import inside a function
    counts."""
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) == []
    script = tmp_path / "script.py"
    script.write_text("def main():\n    from benchmarks.bench import bench_host\n")
    assert imports(script) == {"benchmarks.bench", "benchmarks.bench.bench_host"}

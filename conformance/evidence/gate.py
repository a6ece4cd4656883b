"""The gate: every accelerated implementation registered from the `libreyolo` package needs a
green CUDA parity record for the digest of its current sources, made on the declared GPU stack,
or an entry in `libreyolo/kernels/awaiting_record.toml` (which keeps it from being selected by
default).

In-tree means anything in the tree: the gate imports every module of `libreyolo` and collects
every registration whose function comes from it, so no hand-kept list can miss one. A record is
verified, not trusted: its digest is re-derived from its own file hashes, its commit must be in
the history with those files, its machine must be a declared one, its counts must be those of
its cells, and its cells those the catalogue expects. The recomputation of its outputs on CPU
lives in `tests/conformance/test_gate_records.py` (one test per cell, so a failure names it).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch

from conformance.catalogue import CATALOGUE
from conformance.evidence import provenance, records, stack
from conformance.evidence.records import RECORD_PROFILE
from conformance.schema.declarations import is_in_tree

#: The one command that re-records what the gate reports: it finds the stale records itself.
RECORD_COMMAND = "python -m conformance.evidence.rerecord"
IN_TREE_PACKAGE = "libreyolo"
GPU_MODES = ("cuda", "cuda-graph")


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

    @property
    def command(self) -> str:
        return RECORD_COMMAND


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
            if _registrations(source):
                raise ImportError(f"{info.name} registers implementations but needs "
                                  f"{exc.name} to import: registration must not depend on an "
                                  "optional dependency") from exc
            continue
        names.append(info.name)
    return names


#: Where a `register(...)` call may stand: at module level, or in a loop there. Under an `if`,
#: a `try` or in a function it could be skipped on a machine without triton or CUDA, and the
#: gate's scan would see nothing there; eligibility belongs in `predicate` and `accepts`.
_UNCONDITIONAL = (ast.Module, ast.For, ast.Expr, ast.Assign, ast.AnnAssign)


def _registrations(source: str, name: str = "<source>") -> list[ast.Call]:
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


def conditional_registrations(source: str, name: str = "<source>") -> list[str]:
    """`file:line` of each `register(...)` call in `source` that is not unconditional."""
    tree = ast.parse(source, name)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    calls = {(c.lineno, c.col_offset) for c in _registrations(source, name)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or (node.lineno, node.col_offset) not in calls:
            continue
        chain, parent = [], parents.get(node)
        while parent is not None:
            chain.append(parent)
            parent = parents.get(parent)
        if not all(isinstance(p, _UNCONDITIONAL) for p in chain):
            found.append(f"{name}:{node.lineno}")
    return found


@cache
def in_tree_targets() -> tuple[Target, ...]:
    """Every registration made by an in-tree module, after importing all of them."""
    from libreyolo.kernels import registered, slot_names

    import_package()
    return tuple(Target(slot, impl.name, tuple(impl.sources), impl.capabilities)
                 for slot in slot_names() for impl in registered(slot) if is_in_tree(impl))


def expected_cells(target: Target) -> set[str]:
    """The cell keys a complete record of `target` holds: every shape-set cell of the record
    profile in both GPU modes, and the hypothesis exploration of each mode."""
    from conformance.inputs.strategies import profile
    from conformance.running.plan import RunOptions, cell_plans

    run = RunOptions(profile=profile(RECORD_PROFILE), gpu=True, impl=target.impl,
                     slots=frozenset({target.slot}))
    keys = {f"{p.mode}|{p.dtype_name}|{p.case.name}@{p.layout}" for p in cell_plans(run)}
    return keys | {f"{mode}|any|hypothesis" for mode in GPU_MODES}


def declaration_problem(target: Target) -> str | None:
    """Why an in-tree declaration is not allowed (None: it is): the catalogue is the bar in
    tree, so a declaration cannot leave out a case the catalogue holds the implementation to."""
    expectation = CATALOGUE[target.slot].expectation(target.impl)
    left_out = expectation.excluded_by(target.capabilities)
    if not left_out:
        return None
    return (f"{target.key}: its declared capabilities ({target.capabilities}) leave out "
            f"{'; '.join(left_out)}, which the catalogue holds it to: an in-tree implementation "
            "cannot declare a case away (widen the declaration, or change the catalogue's "
            "expects in conformance/catalogue/ and re-record)")


# Each check: (target, record, current source digest) -> the problem, or None.

def _format(target, record, current):
    if record.get("format") != records.FORMAT_VERSION:
        return (f"the record has format {record.get('format')}, not {records.FORMAT_VERSION}: "
                "it lacks what the gate verifies")
    if (record.get("slot"), record.get("impl")) != (target.slot, target.impl):
        return f"the record is of {record.get('slot')}/{record.get('impl')}"
    return None


def _own_digest(target, record, current):
    files, entry = record.get("source_files"), record.get("catalogue_entry")
    if not isinstance(files, dict) or not isinstance(entry, dict) or \
            provenance.combined_digest(files, entry) != record.get("source_digest"):
        return "its source_digest is not the digest of its own source_files and catalogue entry"
    return None


def _stale(target, record, current):
    if record["source_digest"] == current["digest"]:
        return None
    files = record["source_files"]
    changed = sorted(f for f in {*files, *current["files"]}
                     if files.get(f) != current["files"].get(f))
    if record["catalogue_entry"] != current["entry"]:
        changed.append("the catalogue entry")
    return (f"the record checked other sources (digest {record['source_digest'][:12]}, now "
            f"{current['digest'][:12]}; changed: {', '.join(changed[:6]) or 'none'})")


def _git(target, record, current):
    git = record.get("git") or {}
    commit = git.get("commit")
    if git.get("dirty", True) or not isinstance(commit, str):
        return "the record comes from a DIRTY tree (or names no commit); commit, then re-record"
    if not provenance.in_history(commit):
        return f"its commit {commit[:12]} is not in this repository's history"
    for path, want in sorted(record["source_files"].items()):
        data = provenance.file_at(commit, path)
        if data is None or provenance.content_hash(path, data) != want:
            return f"at its commit {commit[:12]}, {path} is not the file the record hashed"
    return None


def _declared(target, record, current):
    """A record states the declaration it was made under (records before it did not: absent)."""
    if "capabilities" not in record:
        return None
    now = target.capabilities.as_dict() if target.capabilities is not None else None
    if record["capabilities"] != now:
        return (f"it was made under other declared capabilities ({record['capabilities']}, "
                f"now {now})")
    return None


def _machine(target, record, current):
    problems = stack.machine_problems(record.get("machine") or {})
    return ("its machine is not on the declared GPU stack (conformance/stack.toml): "
            + "; ".join(problems)) if problems else None


def _run(target, record, current):
    if not record.get("complete") or record.get("profile") != RECORD_PROFILE:
        return (f"the record is from a partial run (complete={record.get('complete')}, "
                f"profile={record.get('profile')})")
    missing = [mode for mode in GPU_MODES if mode not in record.get("modes", ())]
    if missing:
        return f"the record has no {' or '.join(missing)} cells (interpreter runs never count)"
    return None


def _cells(target, record, current):
    cells = record.get("cells")
    if not isinstance(cells, dict):
        return "the record lists no cells"
    want = expected_cells(target)
    missing, extra = sorted(want - cells.keys()), sorted(cells.keys() - want)
    if missing or extra:
        return (f"its cells are not the catalogue's: {len(missing)} missing "
                f"{missing[:3]}, {len(extra)} unexpected {extra[:3]}")
    if record.get("counts") != records.counts(cells):
        return "its counts are not the counts of its cells"
    return None


def _verdicts(target, record, current):
    spec = CATALOGUE[target.slot]
    expectation = spec.expectation(target.impl)
    states = record["counts"]["state"]
    if states.get("fail", 0) or states.get("crash", 0) or not states.get("pass", 0):
        return f"the record is not green ({states}); fix the implementation"
    for key, (state, _size) in sorted(record["cells"].items()):
        mode, dtype, case = key.split("|", 2)
        held = case == "hypothesis" or expectation.covers(
            mode, getattr(torch, dtype), case.partition("@")[2])
        if held and state != "pass":
            return f"cell {key} is {state}, where the catalogue holds {target.impl} to it"
    return None


def _evidence(target, record, current):
    """Each passing suite cell carries what lets CPU CI re-derive its reference side."""
    kind = CATALOGUE[target.slot].contract.kind
    field = "output_digests" if kind == "exact" else "bounded"
    passed = {k for k, (state, _) in record["cells"].items()
              if state == "pass" and not k.endswith("|hypothesis")}
    have = set(record.get(field) or {})
    if passed - have or have - passed:
        return (f"{field} covers {len(have)} cells, the record passed {len(passed)} "
                f"(missing: {sorted(passed - have)[:3]})")
    return None


CHECKS: tuple[Callable, ...] = (_format, _own_digest, _stale, _git, _declared, _machine, _run,
                                _cells, _verdicts, _evidence)


def record_problem(target: Target, record: dict | None, current: dict) -> str | None:
    """Why `record` does not make `target` green (None: it does). `current` is
    `provenance.source_digest` of today's sources."""
    declaration = declaration_problem(target)
    if declaration is not None:
        return declaration  # re-recording cannot help: the declaration must change
    if record is None:
        problem = "no CUDA parity record"
    else:
        problem = next((p for check in CHECKS if (p := check(target, record, current))), None)
    if problem is None:
        return None
    return f"{target.key}: {problem}; re-record on a declared GPU with: {target.command}"


def gate_problems(targets, load: Callable[[str, str], dict | None],
                  digest: Callable[[Target], dict]) -> list[str]:
    """Every reason the gate fails, one per target that is not green."""
    problems = (record_problem(t, load(t.slot, t.impl), digest(t)) for t in targets)
    return [p for p in problems if p is not None]


def current_digest(target: Target) -> dict:
    return provenance.source_digest(CATALOGUE[target.slot], target.impl, target.sources)

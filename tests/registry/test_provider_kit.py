"""One provider kit: every in-tree accelerated implementation declares its capabilities, and its
capture and device declines come from that declaration, before its own ``accepts`` is asked.

Behaviour first (each implementation on a real input of its slot, from the catalogue's first
small case, with an ``accepts`` that fails the test if it is reached), then a source rule that
keeps the hand-written declines from coming back."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import torch

from conformance.catalogue import CATALOGUE
from conformance.inputs import shapesets
from libreyolo.kernels import registered, triton_kit
from libreyolo.kernels.providers import IN_TREE
from libreyolo.kernels.registry import answer
from libreyolo.kernels.slots import SLOTS

IN_TREE_ACCELERATED = [impl for slot in SLOTS for impl in registered(slot.name)
                       if not impl.is_reference and impl.origin == IN_TREE]
IDS = [f"{impl.op}/{impl.name}" for impl in IN_TREE_ACCELERATED]
KERNELS = Path(triton_kit.__file__).resolve().parent
#: The provider modules and the plan modules whose ``accepts`` they register.
PROVIDER_SOURCES = sorted({*KERNELS.rglob("*provider.py"), *KERNELS.rglob("*plan.py")})


def _small_inputs(op: str, device: str = "cpu"):
    spec = CATALOGUE[op]
    case = next(c for c in shapesets.load(spec.shapes) if c.size == "small")
    inputs = spec.make_inputs(case, spec.dtypes[0], "contiguous", torch.Generator().manual_seed(0))
    return tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in inputs.args), \
        inputs.kwargs


def _unreachable_accepts(impl):
    def accepts(*args, **kwargs):
        pytest.fail(f"{impl.op}/{impl.name}: accepts() was asked; the declaration must decline")

    return dataclasses.replace(impl, accepts=accepts)


def test_there_are_in_tree_accelerated_implementations_to_check():
    assert {impl.name for impl in IN_TREE_ACCELERATED} >= {"triton", "scaled_mm", "hub"}


@pytest.mark.parametrize("impl", IN_TREE_ACCELERATED, ids=IDS)
def test_every_in_tree_implementation_declares_that_it_is_not_traced(impl):
    assert impl.capabilities is not None and impl.capabilities.traced is False


@pytest.mark.parametrize("impl", IN_TREE_ACCELERATED, ids=IDS)
def test_a_traced_call_is_declined_by_the_declaration(impl, monkeypatch):
    args, kwargs = _small_inputs(impl.op)
    monkeypatch.setattr(torch.jit, "is_tracing", lambda: True)
    reason = answer(_unreachable_accepts(impl), args, kwargs)
    assert reason.startswith("declared unsupported (a graph is being captured")


@pytest.mark.parametrize("impl", IN_TREE_ACCELERATED, ids=IDS)
def test_a_meta_tensor_is_declined_by_the_declaration(impl):
    if impl.name == "hub":
        pytest.skip("the Hub adapter's device is its DEVICE (the CPU tests run a stand-in there)")
    args, kwargs = _small_inputs(impl.op, "meta")
    reason = answer(_unreachable_accepts(impl), args, kwargs)
    assert reason == "declared unsupported (device meta not in declared devices cpu, cuda)"


@pytest.mark.parametrize("impl", [i for i in IN_TREE_ACCELERATED if i.name == "triton"],
                         ids=[i for i in IDS if i.endswith("/triton")])
def test_a_cpu_call_without_the_interpreter_is_declined_by_the_declared_modes(impl,
                                                                               monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    args, kwargs = _small_inputs(impl.op)
    reason = answer(_unreachable_accepts(impl), args, kwargs)
    assert reason == ("declared unsupported (mode cpu not in declared modes interpreter, cuda, "
                      "cuda-graph)")


#: The capture module's one name that decides nothing: it checks arguments without reading their
#: values (a plan made inside a CUDA graph capture, or an operator's fake kernel).
NOT_A_DECLINE = frozenset({"no_host_reads"})


def _hand_written_declines(path: Path, root: Path = KERNELS) -> list[str]:
    """What in a provider or plan module decides capture or device itself: the capture module's
    names, or a ``!=`` against a device type (the shape every hand-written device rule had)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module == "libreyolo.capture":
            found += [f"imports {a.name} from libreyolo.capture" for a in node.names
                      if a.name not in NOT_A_DECLINE]
        if isinstance(node, ast.Compare) and any(isinstance(op, ast.NotEq) for op in node.ops):
            constants = [c.value for c in node.comparators if isinstance(c, ast.Constant)]
            if any(value in ("cpu", "cuda") for value in constants):
                found.append(f"line {node.lineno}: a device rule ({ast.unparse(node)})")
    return [f"{path.relative_to(root)}: {what}" for what in found]


def test_the_source_rule_finds_a_hand_written_decline(tmp_path):
    provider = tmp_path / "provider.py"
    provider.write_text("from libreyolo.capture import capture_reason, no_host_reads\n"
                        "def accepts(x):\n    if x.device.type != 'cuda':\n        return 'no'\n")
    found = [line.split(": ", 1)[1] for line in _hand_written_declines(provider, tmp_path)]
    assert found == ["imports capture_reason from libreyolo.capture",
                     "line 3: a device rule (x.device.type != 'cuda')"]


def test_no_provider_or_plan_writes_a_capture_or_device_decline_itself():
    assert len(PROVIDER_SOURCES) >= 8, PROVIDER_SOURCES
    assert [line for path in PROVIDER_SOURCES for line in _hand_written_declines(path)] == []


#: Every module of the kernels package: a launch may be made anywhere there (the deterministic
#: MSDA backward made its own), and is kept only with the plan it was made for.
KERNEL_SOURCES = sorted(KERNELS.rglob("*.py"))
_LAUNCH_NAMES = ("launch", "launcher")


def _launch_named(name: str) -> bool:
    return name.lower().endswith(_LAUNCH_NAMES)


def _makes_a_launcher(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and (getattr(n.func, "id", None) == "Launcher"
                                            or getattr(n.func, "attr", None) == "Launcher")
               for n in ast.walk(node))


def _is_launches(node: ast.AST) -> bool:
    """``launches`` or ``<plan>.launches``: the one place a launch is kept."""
    return getattr(node, "id", None) == "launches" or getattr(node, "attr", None) == "launches"


def _launches_kept_elsewhere(path: Path, root: Path = KERNELS) -> list[str]:
    """Where a module keeps a launch other than in a plan's ``launches`` dict (keyed by what the
    launch is, made on first use): an attribute, slot or class field named ``*launch`` or
    ``*launcher``; a ``Launcher(...)`` stored in an attribute or a container other than
    ``launches`` (by assignment or ``setdefault``); a module-level container named after
    launches (a process-wide cache outlives the plans whose launches it holds, and needs a cap
    of its own)."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None \
                and not isinstance(node.value, ast.Constant):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [f"line {node.lineno}: a module-level cache of launches ({t.id})"
                      for t in targets if isinstance(t, ast.Name) and "launch" in t.id.lower()]
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) \
                        and _launch_named(item.target.id):
                    found.append(f"line {item.lineno}: field {item.target.id}")
                if isinstance(item, ast.Assign) and any(getattr(t, "id", None) == "__slots__"
                                                        for t in item.targets):
                    found += [f"line {item.lineno}: slot {c.value}" for c in ast.walk(item.value)
                              if isinstance(c, ast.Constant) and isinstance(c.value, str)
                              and _launch_named(c.value)]
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                found += [f"line {node.lineno}: attribute {a.attr}" for a in ast.walk(target)
                          if isinstance(a, ast.Attribute) and _launch_named(a.attr)]
            if node.value is not None and _makes_a_launcher(node.value):
                stores = [e for t in targets for e in getattr(t, "elts", [t])
                          if isinstance(e, ast.Attribute) and not _launch_named(e.attr)
                          or isinstance(e, ast.Subscript) and not _is_launches(e.value)]
                found += [f"line {node.lineno}: a Launcher stored in {ast.unparse(e)}"
                          for e in stores]
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "setdefault" \
                and not _is_launches(node.func.value) \
                and any(_makes_a_launcher(a) for a in node.args):
            found.append(f"line {node.lineno}: a Launcher stored in "
                         f"{ast.unparse(node.func.value)}")
    return [f"{path.relative_to(root)}: {what}" for what in found]


def test_the_source_rule_finds_a_launch_kept_outside_launches(tmp_path):
    plan = tmp_path / "plan.py"
    plan.write_text("_launches = {}\n"
                    "class Plan:\n"
                    "    __slots__ = ('forward_launch', 'launches')\n"
                    "    launcher: object = None\n"
                    "    def __init__(self):\n"
                    "        self.forward_launch, self.launches = None, {}\n"
                    "def run(plan, kernel, cache):\n"
                    "    plan.kept, n = Launcher(kernel, (1,)), 1\n"
                    "    plan.launches['backward'] = Launcher(kernel, (1,))\n"
                    "    cache.setdefault(0, Launcher(kernel, (1,)))\n"
                    "    plan.launches.setdefault(0, Launcher(kernel, (1,)))\n")
    found = [line.split(": ", 1)[1] for line in _launches_kept_elsewhere(plan, tmp_path)]
    assert sorted(found) == sorted([
        "line 1: a module-level cache of launches (_launches)",
        "line 3: slot forward_launch", "line 4: field launcher",
        "line 6: attribute forward_launch", "line 8: a Launcher stored in plan.kept",
        "line 10: a Launcher stored in cache"])


def test_every_launch_is_kept_in_its_plans_launches():
    assert len(KERNEL_SOURCES) >= 30, KERNEL_SOURCES
    assert [line for path in KERNEL_SOURCES for line in _launches_kept_elsewhere(path)] == []

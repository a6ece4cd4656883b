"""Declared capabilities (`libreyolo.kernels.Capabilities`): an out-of-tree backend is held to
the catalogue's cases within its declaration, and the cells outside are `not-applicable:
declared unsupported (...)`, counted apart; a decline or a wrong answer inside still fails. In
tree, the catalogue stays the bar whatever is declared.

CUDA-graph capture is simulated on CPU (`simulated_capture`): what a capture forbids, a value read
on the host, raises as it does on a GPU. `test_on_cuda_*` run the real thing where CUDA exists
(`benchmarks/gpu_run.sh`, stage `declarations`)."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import replace
from unittest import mock

import pytest
import torch

from conformance import plugin
from conformance.catalogue import slot
from conformance.evidence import gate
from conformance.evidence.scan import Target
from conformance.inputs.strategies import profile
from conformance.negative import load_controls
from conformance.running import cells, matrix
from conformance.running.cells import run_cell
from conformance.running.child import run_pytest
from conformance.running.plan import RunOptions, cell_plans
from conformance.schema import declarations
from libreyolo import capture
from libreyolo.kernels import Capabilities, dispatch, explain, register, unregister
from libreyolo.quant.fake_quant import fake_quant_int8_per_channel

SLOT = "fake_quant_int8_per_channel"
NO_CAPTURE = Capabilities(modes={"cpu", "cuda"})
EXAMPLE = "examples/libreyolo_example_backend"


def reads_scale_on_host(x, scale, axis=0):
    """Right on every valid input (the reference's numbers), but it checks the scale's values on
    the host first, as the example backend does: correct, and not capturable."""
    if not bool((scale >= 0).all()):
        raise ValueError("scale must be non-negative")
    return fake_quant_int8_per_channel(x, scale, axis)


@contextlib.contextmanager
def simulated_capture():
    """What a CUDA graph capture does, on CPU: reading a tensor's value on the host raises (the
    error CUDA gives), and the references skip their value checks (`host_reads_forbidden`)."""
    def refuse(*args, **kwargs):
        raise RuntimeError("operation not permitted when stream is capturing (simulated)")

    with mock.patch.object(torch.Tensor, "__bool__", refuse), \
            mock.patch.object(torch.Tensor, "item", refuse), \
            mock.patch.object(capture, "host_reads_forbidden", lambda: True):
        yield


@pytest.fixture
def graph_cells_on_cpu(monkeypatch):
    """`cuda-graph` cells run on CPU tensors, the call inside `simulated_capture`."""
    def call(fn, inputs, mode):
        context = simulated_capture() if mode == "cuda-graph" else contextlib.nullcontext()
        with context:
            return fn(*inputs.args, **inputs.kwargs)

    monkeypatch.setattr(cells, "GPU_MODES", ("cuda",))
    monkeypatch.setattr(cells, "_call", call)


@pytest.fixture
def backend():
    """`backend(fn, capabilities, **register_kwargs)`: `fn` registered as `third-party` for
    the test."""
    def install(fn, capabilities=None, **kwargs):
        return register(SLOT, fn, name="third-party", capabilities=capabilities, **kwargs)

    yield install
    unregister(SLOT, "third-party")


def plans(mode: str, impl: str = "third-party", slot_name: str = SLOT):
    run = RunOptions(profile=profile("ci"), impl=impl, slots=frozenset({slot_name}))
    return [replace(p, mode=mode) for p in cell_plans(run) if p.case.size == "small"]


def run(plans_):
    return [run_cell(slot(p.slot), p) for p in plans_]


# The done-when of issue 20, with the capture simulated.

def test_a_correct_backend_declaring_no_graph_capture_has_declared_not_applicable_graph_cells(
        backend, graph_cells_on_cpu):
    backend(reads_scale_on_host, NO_CAPTURE)
    graph, eager = run(plans("cuda-graph")), run(plans("cpu"))
    assert graph and {c.state for c in graph} == {"not-applicable"}
    assert {c.declined_by for c in graph} == {"declaration"}
    assert {c.reason for c in graph} == {
        "declared unsupported (mode cuda-graph not in declared modes cpu, cuda)"}
    assert eager and {c.state for c in eager} == {"pass"}


def test_the_same_backend_without_the_declaration_fails_its_graph_cells(backend,
                                                                       graph_cells_on_cpu):
    backend(reads_scale_on_host)
    graph = run(plans("cuda-graph"))
    assert graph and {c.state for c in graph} == {"crash"}, [c.reason for c in graph][:2]
    assert "not permitted when stream is capturing" in graph[0].reason


def test_the_simulated_capture_fails_only_host_reads(backend, graph_cells_on_cpu):
    """Control of the simulation: a backend that reads nothing on the host passes it."""
    backend(lambda x, scale, axis=0: fake_quant_int8_per_channel(x, scale, axis))
    graph = run(plans("cuda-graph"))
    assert graph and {c.state for c in graph} == {"pass"}, [c.reason for c in graph][:2]


# A declaration narrows the cases, never the checks inside them.

DECLARED_FP32 = next(c for c in load_controls()
                     if c.name == "negative-declared_fp32_rounds_half_away")


@pytest.fixture
def fp32_only():
    DECLARED_FP32.register()
    yield DECLARED_FP32
    DECLARED_FP32.unregister()


def test_cells_outside_a_dtype_declaration_are_declared_unsupported_and_inside_still_judged(
        fp32_only):
    cells_ = run(plans("cpu", fp32_only.name))
    outside = [c for c in cells_ if c.dtype != "float32"]
    inside = [c for c in cells_ if c.dtype == "float32"]
    assert outside and all(c.state == "not-applicable" and c.declined_by == "declaration"
                           for c in outside)
    assert outside[0].reason.startswith(
        f"declared unsupported (dtype {outside[0].dtype} not in declared dtypes float32)")
    assert any("exact" in c.failed_checks for c in inside), [c.state for c in inside]


def tie_inputs(dtype):
    """x / scale = 0.5 and 2.5: round half to even gives 0 and 2, away from zero 1 and 3."""
    x = torch.tensor([[0.5, 2.5]], dtype=dtype)
    return x, torch.ones(1)


def test_the_registry_declines_what_a_backend_declares_unsupported_instead_of_its_numbers(
        fp32_only):
    x, scale = tie_inputs(torch.float16)
    wrong = fp32_only.fn(x, scale)
    reference = fake_quant_int8_per_channel(x, scale)
    assert not torch.equal(wrong, reference), "called directly, it is wrong in float16"
    assert torch.equal(dispatch(SLOT, x, scale), reference)
    reasons = {impl.name: reason for impl, reason in explain(SLOT, x, scale)}
    assert reasons[fp32_only.name] == ("declared unsupported (dtype float16 not in declared "
                                       "dtypes float32)")


def test_a_decline_inside_the_declaration_still_fails(backend):
    backend(reads_scale_on_host, Capabilities(dtypes={torch.float32}),
            accepts=lambda *args, **kwargs: "not today")
    cells_ = run(plans("cpu"))
    assert {c.state for c in cells_ if c.dtype == "float32"} == {"fail"}
    assert {c.declined_by for c in cells_ if c.dtype != "float32"} == {"declaration"}


# In tree, the catalogue is the bar.

def test_an_in_tree_implementation_cannot_declare_a_mode_away():
    """A function of the `libreyolo` package is in-tree, whoever registers it."""
    impl = register(SLOT, fake_quant_int8_per_channel, name="in-tree-declares-no-cpu",
                    capabilities=Capabilities(modes={"cuda", "cuda-graph"}))
    try:
        assert declarations.is_in_tree(impl)
        cells_ = run(plans("cpu", impl.name))
        assert cells_ and {c.state for c in cells_} == {"fail"}
        assert {tuple(c.failed_checks) for c in cells_} == {("declared",)}
        assert "mode cpu not in declared modes cuda, cuda-graph" in cells_[0].reason
        target = Target(SLOT, impl.name, (), impl.capabilities)
        problem = gate.declaration_problem(target)
        assert problem and "modes cpu" in problem and "cannot declare a case away" in problem
        assert gate.record_problem(target, {"a": "green record"}, {}) == problem
    finally:
        unregister(SLOT, impl.name)


def test_an_in_tree_declaration_within_the_catalogue_is_allowed():
    target = Target(SLOT, "triton", (), Capabilities(modes={"cuda", "cuda-graph", "interpreter"},
                                                     devices={"cpu", "cuda"}))
    assert gate.declaration_problem(target) is None


def test_out_of_tree_the_held_cases_are_the_catalogues_within_the_declaration(backend):
    backend(reads_scale_on_host, Capabilities(devices={"cuda"}, dtypes={torch.float16}))
    held = declarations.held_to(slot(SLOT), "third-party")
    assert held.modes == {"cuda", "cuda-graph"} and held.dtypes == {torch.float16}
    assert held.layouts == set(slot(SLOT).expectation("third-party").layouts)


# What a reader of the matrix sees.

def test_the_matrix_counts_declared_cells_apart_and_lists_each_declaration(backend):
    backend(reads_scale_on_host, Capabilities(dtypes={torch.float32}))
    cells_ = run(plans("cpu"))
    counts = {c.counted_as for c in cells_}
    assert counts == {"pass", matrix.DECLARED}
    line = matrix.count_line(cells_)
    passed = sum(c.state == "pass" for c in cells_)
    assert line == (f"{len(cells_)} cells: {passed} pass, {len(cells_) - passed} declared "
                    "unsupported")
    listed = plugin.declared(cells_)
    entry = listed[f"{SLOT}/third-party"]
    assert entry["declared"]["dtypes"] == ["float32"] and entry["bar"] == "declaration"
    assert entry["held_to"]["dtypes"] == ["float32"]
    markdown = matrix.render_markdown(cells_, {"declarations": listed})
    assert "### Declared capabilities" in markdown
    assert f"{SLOT}/third-party (caller): declares dtypes float32" in markdown


PLUGIN = """
import torch
from libreyolo.kernels import Capabilities, register
from libreyolo.quant.fake_quant import fake_quant_int8_per_channel



def fp32_backend(x, scale, axis=0):  # its own function: one of `libreyolo` would be in-tree
    return fake_quant_int8_per_channel(x, scale, axis)


register("fake_quant_int8_per_channel", fp32_backend, name="fp32-backend",
         capabilities=Capabilities(dtypes={torch.float32}))
"""


def test_impl_runs_show_declared_cells_in_the_count_and_the_matrix_json(tmp_path, request,
                                                                         whole_suite):
    (tmp_path / "fp32_backend.py").write_text(PLUGIN)
    matrix_path = tmp_path / "matrix.json"
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    result = run_pytest(request.config.rootpath, "conformance/test_matrix.py",
                        "conformance/test_layouts.py", "conformance/test_errors.py", "-q",
                        "-p", "fp32_backend", "--impl", "fp32-backend", "--slot", SLOT,
                        "--profile", "ci", "--matrix", str(matrix_path),
                        env={"PYTHONPATH": path})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    data = json.loads(matrix_path.read_text())
    declared = [c for c in data["cells"] if c["declined_by"] == "declaration"]
    assert declared and {c["dtype"] for c in declared} == {"float16", "bfloat16"}
    assert {c["origin"] for c in data["cells"]} == {"suite", "hypothesis", "errors"}
    assert {c["state"] for c in data["cells"] if c not in declared} == {"pass"}
    assert data["meta"]["declarations"][f"{SLOT}/fp32-backend"]["declared"]["dtypes"] == [
        "float32"]
    passed = len(data["cells"]) - len(declared)
    assert (f"--impl fp32-backend: {len(data['cells'])} cells: {passed} pass, {len(declared)} "
            "declared unsupported") in result.stdout
    assert "declared capabilities:" in result.stdout


# On CUDA: the real capture (benchmarks/gpu_run.sh, stage `declarations`).

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
UNDECLARED = """
from libreyolo.kernels import register
from libreyolo_example_backend.int8_per_channel import SLOT, fake_quant_int8_per_channel

register(SLOT, fake_quant_int8_per_channel, name="example-undeclared")
"""


def gpu_run(request, tmp_path, impl: str, *plugins: str):
    matrix_path = tmp_path / f"{impl}.json"
    root = request.config.rootpath
    path = os.pathsep.join([str(tmp_path), str(root / EXAMPLE / "src"),
                            os.environ.get("PYTHONPATH", "")])
    result = run_pytest(root, "conformance/test_matrix.py", "conformance/test_layouts.py",
                        "conformance/test_errors.py", "-q", "--gpu", "--impl", impl, "--slot",
                        SLOT, "--profile", "ci", "--matrix", str(matrix_path),
                        *(arg for p in plugins for arg in ("-p", p)), env={"PYTHONPATH": path})
    cells_ = json.loads(matrix_path.read_text())["cells"] if matrix_path.exists() else []
    return result, cells_


@cuda
def test_on_cuda_the_example_backend_passes_with_declared_graph_cells(request, tmp_path,
                                                                      whole_suite):
    result, cells_ = gpu_run(request, tmp_path, "example-correct", "libreyolo_example_backend")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    graph = [c for c in cells_ if c["mode"] == "cuda-graph"]
    assert graph and {c["declined_by"] for c in graph} == {"declaration"}
    assert {c["state"] for c in cells_ if c["mode"] == "cuda"} == {"pass"}
    print(result.stdout[-1500:])


@cuda
def test_on_cuda_the_example_backend_undeclared_fails_its_graph_cells(request, tmp_path,
                                                                      whole_suite):
    (tmp_path / "undeclared_example.py").write_text(UNDECLARED)
    result, cells_ = gpu_run(request, tmp_path, "example-undeclared", "undeclared_example")
    assert result.returncode != 0
    graph = [c for c in cells_ if c["mode"] == "cuda-graph" and c["origin"] == "suite"]
    assert graph and {c["state"] for c in graph} <= {"fail", "crash"}
    assert {c["state"] for c in cells_ if c["mode"] == "cuda"} == {"pass"}
    print(result.stdout[-1500:])

"""The deterministic MSDA backward compiled on a CUDA GPU (``deterministic.py``), on every row of
the speed table (the medium and large cases of both shape sets, as
``benchmarks/bench/bench_ms_deform_attn.py`` and ``bench_ms_deform_attn_ragged.py`` time): under
``torch.use_deterministic_algorithms(True)`` ten forward+backward runs give the same output and
gradients bit for bit, and the suite's bounded contract against float64 holds with the
fixed-point term far inside it; outside the mode the atomic backward still runs. Also: CUDA-graph
capture and no host sync in the mode, and the launch kept per mode (a negative control shows what
sharing one would do)."""

import os

import pytest
import torch

from conformance.catalogue import CATALOGUE
from conformance.catalogue.ms_deform_attn_ragged import draw_inputs
from conformance.inputs import shapesets
from conformance.inputs.ms_deform_attn_cases import load_cases
from conformance.inputs.ms_deform_attn_cases import make_inputs as classic_inputs
from conformance.running.cells import CellPlan, _grad_generator, input_seed, make_inputs, run_cell
from conformance.running.determinism import deterministic_algorithms, differing, same_bits

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                       reason="compiled kernels cannot share a process with the interpreter"),
]

classic = pytest.importorskip("libreyolo.kernels.attention.ms_deform_attn.triton_provider")
common = pytest.importorskip("libreyolo.kernels.attention.ms_deform_attn.triton_common")
ragged = pytest.importorskip("libreyolo.kernels.attention.ms_deform_attn.ragged_triton_provider")
deterministic = pytest.importorskip("libreyolo.kernels.attention.ms_deform_attn.deterministic")

RAGGED_SLOT = "ms_deform_attn_ragged"
#: The speed table's rows: what the two MSDA benchmarks time by default.
CLASSIC_ROWS = load_cases(sizes=("medium", "large"))
RAGGED_ROWS = [c for c in shapesets.load(CATALOGUE[RAGGED_SLOT].shapes)
               if c.size in ("medium", "large")]
ROWS = [pytest.param("ms_deform_attn", c, id=f"classic-{c.name}") for c in CLASSIC_ROWS] + [
    pytest.param(RAGGED_SLOT, c, id=f"ragged-{c.name}") for c in RAGGED_ROWS]
RUNS = 10
#: The worst-case fixed-point term must stay this far inside the bounded contract's limit (on
#: CPU, for the suite's float32 inputs, it is at most 9.2e-4 of the limit's floor alone, on the
#: encoder; 6e-6 on the decoders: docs/ms_deform_attn.md, "Determinism").
FAR_INSIDE = 1e-2


@pytest.fixture(autouse=True)
def select_triton_by_name(monkeypatch):
    monkeypatch.setenv("LIBREYOLO_KERNELS", "triton")


def row_inputs(slot, case, dtype=torch.float32, seed=5):
    """(fn, args): the Triton implementation and a seeded CUDA input of the row."""
    if slot == "ms_deform_attn":
        return classic.ms_deform_attn_triton, classic_inputs(case, dtype=dtype, device="cuda",
                                                             seed=seed)
    return ragged.ms_deform_attn_ragged_triton, draw_inputs(case.params, dtype, device="cuda",
                                                            seed=seed)


@pytest.mark.parametrize(("slot", "case"), ROWS)
def test_ten_runs_give_the_same_bits_in_deterministic_mode(slot, case):
    fn, args = row_inputs(slot, case)
    with deterministic_algorithms():
        counts = differing(fn, args, (0, 2, 3), runs=RUNS)
    assert not any(counts.values()), f"{case.name}: runs differing from the first: {counts}"


def suite_case(slot, case):
    """The suite's own case object (the classic generator's Case is not the catalogue's)."""
    return next(c for c in shapesets.load(CATALOGUE[slot].shapes) if c.name == case.name)


@pytest.mark.parametrize(("slot", "case", "dtype"), [
    pytest.param(*row.values, dtype, id=f"{row.id}-{str(dtype).removeprefix('torch.')}")
    for row in ROWS for dtype in (torch.float32, torch.bfloat16)
    if dtype is torch.float32 or row.values[1].size == "medium"])
def test_bounded_contract_in_deterministic_mode_with_the_fixed_point_term_far_inside(
        slot, case, dtype):
    """The suite's CUDA cell (bounded contract vs float64, computed on CPU) with the backward in
    the mode; the worst-case fixed-point term (``deterministic.fixed_point_error_bound``) at most
    ``FAR_INSIDE`` of the value gradient's limit."""
    spec, case = CATALOGUE[slot], suite_case(slot, case)
    plan = CellPlan(slot, "triton", "cuda", dtype, case, "contiguous",
                    input_seed(0, slot, case.name, dtype, "contiguous"))
    with deterministic_algorithms():
        cell = run_cell(spec, plan)
    assert cell.state == "pass", f"{case.name} {dtype}: {cell.state}: {cell.reason}"
    inputs = make_inputs(spec, plan)
    out_shape = (*inputs.args[2].shape[:2], inputs.args[0].shape[2] * inputs.args[0].shape[3])
    grad = torch.randn(out_shape, generator=_grad_generator(plan), dtype=torch.float64)
    term = deterministic.fixed_point_error_bound(grad.to(dtype).float(), inputs.args[3].float())
    limit = cell.measurements["grad_arg0"]["bound"]
    assert term <= FAR_INSIDE * limit, f"fixed-point term {term:.3e}, limit {limit:.3e}"


@pytest.fixture
def fixed_point_calls(monkeypatch):
    calls = []
    original = deterministic.gradients
    monkeypatch.setattr(deterministic, "gradients",
                        lambda *a: calls.append(1) or original(*a))
    return calls


@pytest.mark.parametrize(("slot", "case"), [ROWS[1], ROWS[len(CLASSIC_ROWS) + 1]])
def test_outside_deterministic_mode_the_atomic_backward_runs(slot, case, fixed_point_calls):
    fn, args = row_inputs(slot, case)
    with deterministic_algorithms(False):
        differing(fn, args, (0, 2, 3), runs=2)
    assert fixed_point_calls == []
    with deterministic_algorithms():
        differing(fn, args, (0, 2, 3), runs=2)
    assert len(fixed_point_calls) == 2


def steps(fn, args):
    leaves = [args[i].detach().clone().requires_grad_() for i in (0, 2, 3)]
    value, locations = args[0], args[2]
    grad = torch.randn(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3],
                       device="cuda", generator=torch.Generator("cuda").manual_seed(3))

    def step():
        for leaf in leaves:
            leaf.grad = None
        call = list(args)
        call[0], call[2], call[3] = leaves
        out = fn(*call)
        out.backward(grad)
        return out

    return step, leaves


@pytest.mark.parametrize(("slot", "name"), [("ms_deform_attn", "rt_detr_decoder"),
                                            (RAGGED_SLOT, "d_fine_decoder"),
                                            (RAGGED_SLOT, "rt_detrv2_dsp_decoder")])
def test_forward_and_backward_replay_in_a_cuda_graph_in_deterministic_mode(slot, name):
    """Warmed up in the mode, captured in the mode: the replay's gradients are the eager ones'
    bits."""
    rows = CLASSIC_ROWS if slot == "ms_deform_attn" else RAGGED_ROWS
    fn, args = row_inputs(slot, next(c for c in rows if c.name == name))
    step, leaves = steps(fn, args)
    with deterministic_algorithms():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            eager = step().detach().clone()
            eager_grads = [None if leaf.grad is None else leaf.grad.clone() for leaf in leaves]
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = step()
        graph.replay()
        torch.cuda.synchronize()
    assert same_bits(captured, eager)
    for leaf, expected in zip(leaves, eager_grads, strict=True):
        assert same_bits(leaf.grad, expected)


@pytest.mark.parametrize(("slot", "name"), [("ms_deform_attn", "rt_detr_decoder"),
                                            (RAGGED_SLOT, "d_fine_decoder")])
def test_no_host_sync_after_a_warm_up_call_in_deterministic_mode(slot, name):
    rows = CLASSIC_ROWS if slot == "ms_deform_attn" else RAGGED_ROWS
    fn, args = row_inputs(slot, next(c for c in rows if c.name == name))
    step, _ = steps(fn, args)
    with deterministic_algorithms():
        step()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def test_a_launch_shared_by_the_two_modes_gives_wrong_gradients(monkeypatch):
    """Negative control for the per-mode launch: a plan whose one Launcher, made by the atomic
    backward, also takes the int64 accumulator (a Launcher relaunches the dtypes it was made
    with: float32 atomics land in the int64 buffer) fails the bounded contract, where the kept
    per-mode launches pass it."""
    case = suite_case("ms_deform_attn", next(c for c in CLASSIC_ROWS
                                             if c.name == "rt_detr_decoder"))
    spec = CATALOGUE["ms_deform_attn"]
    plan = CellPlan("ms_deform_attn", "triton", "cuda", torch.float32, case, "contiguous", 7)
    fn, args = row_inputs("ms_deform_attn", next(c for c in CLASSIC_ROWS
                                                 if c.name == "rt_detr_decoder"))

    def one_launch_for_both(launch_plan, tensors):
        return launch_plan.launches.get("backward") or launch_plan.launches.setdefault(
            "backward", classic.Launcher(
                classic._kernels().ms_deform_attn_bwd_kernel, launch_plan.backward_grid,
                *tensors, *launch_plan.sizes, **launch_plan.constants,
                SPLIT_LEVELS=launch_plan.split_levels, num_warps=common.NUM_WARPS))

    classic.memo._plans.clear()
    monkeypatch.setattr(classic, "_backward_launch", one_launch_for_both)
    for _ in range(3):  # atomic backwards first: the Launcher takes its direct relaunch
        differing(fn, args, (0, 2, 3), runs=1)
    with deterministic_algorithms():
        cell = run_cell(spec, plan)
    classic.memo._plans.clear()
    assert cell.state == "fail" and "grad_arg0" in cell.reason, cell.reason

"""The ragged Triton kernels compiled on a CUDA GPU: the families' decoder calls reach them
through ``ms_deform_attn_ragged`` (spied), discrete sampling reads the portable path's pixel bit
for bit within its proven sum bound, the forward is deterministic, forward and backward replay
in a CUDA graph, and a steady-state call never synchronizes with the device. The bounded contract
on every case, dtype, layout and CUDA-graph cell is the conformance suite's (``pytest
conformance/ --gpu --slot ms_deform_attn_ragged``)."""

import os

import pytest
import torch

from conformance.catalogue import CATALOGUE
from conformance.catalogue.ms_deform_attn_ragged import draw_inputs
from conformance.inputs import shapesets
from libreyolo.kernels.attention.ms_deform_attn import (
    ms_deform_attn_ragged,
    ms_deform_attn_ragged_portable,
)

from .ragged_checks import discrete_sum_excess, pixel_mismatches

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                       reason="compiled kernels cannot share a process with the interpreter"),
]

provider = pytest.importorskip(
    "libreyolo.kernels.attention.ms_deform_attn.ragged_triton_provider")
CASES = shapesets.load(CATALOGUE["ms_deform_attn_ragged"].shapes)
FAMILIES = [c for c in CASES if c.size != "small"]
DISCRETE = [c for c in CASES if c.params["method"] == "discrete"]
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@pytest.fixture(autouse=True)
def select_triton_by_name(monkeypatch):
    """Select the Triton implementation by name, so these tests run it whether or not
    awaiting_record.toml lists it (a new kernel lands listed)."""
    monkeypatch.setenv("LIBREYOLO_KERNELS", "triton")


@pytest.fixture
def kernel_runs(monkeypatch):
    """The list every forward launch of the ragged kernel appends to (a spy)."""
    runs = []
    original = provider._forward
    monkeypatch.setattr(provider, "_forward", lambda *a: runs.append(1) or original(*a))
    return runs


@pytest.mark.parametrize("shapes_as", ["pairs", "tensor"])
@pytest.mark.parametrize("case", FAMILIES, ids=lambda c: c.name)
def test_family_decoder_calls_run_on_the_kernel(case, shapes_as, kernel_runs):
    args = draw_inputs({**case.params, "spatial_shapes": shapes_as}, device="cuda", seed=3)
    out = ms_deform_attn_ragged(*args)
    assert kernel_runs == [1], f"{case.name}: ms_deform_attn_ragged did not reach the kernel"
    torch.testing.assert_close(out, ms_deform_attn_ragged_portable(*args), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("case", DISCRETE, ids=lambda c: c.name)
def test_discrete_sampling_reads_the_portable_pixel_within_the_sum_bound(case, dtype):
    kernel = provider.ms_deform_attn_ragged_triton
    assert pixel_mismatches(kernel, case, dtype, device="cuda") == 0
    assert discrete_sum_excess(kernel, case, dtype, device="cuda") <= 1.0


@pytest.mark.parametrize("case", FAMILIES[:4], ids=lambda c: c.name)
def test_the_forward_gives_the_same_bits_every_run(case):
    args = draw_inputs(case.params, device="cuda", seed=4)
    first = provider.ms_deform_attn_ragged_triton(*args)
    for _ in range(5):
        assert torch.equal(provider.ms_deform_attn_ragged_triton(*args), first)


@pytest.mark.parametrize("case", [c for c in FAMILIES if c.name in
                                  ("d_fine_decoder", "rt_detrv2_dsp_decoder")],
                         ids=lambda c: c.name)
def test_forward_and_backward_replay_in_a_cuda_graph(case):
    value, shapes, locations, weights, points, method = draw_inputs(case.params, device="cuda")
    leaves = [t.detach().clone().requires_grad_() for t in (value, locations, weights)]
    grad = torch.randn(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3],
                       device="cuda")

    def step():
        for leaf in leaves:
            leaf.grad = None
        out = ms_deform_attn_ragged(leaves[0], shapes, leaves[1], leaves[2], points, method)
        out.backward(grad)
        return out

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
    torch.testing.assert_close(captured, eager)
    for leaf, expected in zip(leaves, eager_grads, strict=True):
        if expected is None:
            assert leaf.grad is None
        else:
            torch.testing.assert_close(leaf.grad, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shapes_as", ["pairs", "tensor"])
def test_a_steady_state_call_never_synchronizes(shapes_as, kernel_runs):
    case = next(c for c in FAMILIES if c.name == "d_fine_decoder")
    args = draw_inputs({**case.params, "spatial_shapes": shapes_as}, device="cuda")
    ms_deform_attn_ragged(*args)  # warm-up: compiles, and copies the pairs to the device once
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        ms_deform_attn_ragged(*args)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert kernel_runs == [1, 1]

"""The Triton kernels compiled on a CUDA GPU: bounded contract on every case and dtype, the
backward's run-to-run spread, CUDA-graph capture, and dispatch through the registry."""

import os

import pytest
import torch

from conformance.inputs.ms_deform_attn_cases import load_cases, make_inputs
from conformance.running.ms_deform_attn_parity import bounded_check

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                       reason="compiled kernels cannot share a process with the interpreter"),
]

triton_provider = pytest.importorskip(
    "libreyolo.kernels.attention.ms_deform_attn.triton_provider")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@pytest.fixture(autouse=True)
def select_triton_by_name(monkeypatch):
    """Select the Triton implementation by name, so these tests run it whether or not
    awaiting_record.toml lists it (a new kernel lands listed)."""
    monkeypatch.setenv("LIBREYOLO_KERNELS", "triton")


@pytest.mark.parametrize("dtype", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize("case", load_cases(), ids=lambda c: c.name)
def test_bounded_contract_on_every_case(case, dtype):
    inputs = make_inputs(case, dtype=dtype, device="cuda", seed=5)
    for verdict in bounded_check(triton_provider.ms_deform_attn_triton, *inputs):
        assert verdict.passed, f"{case.name} {dtype}: {verdict}"


@pytest.mark.parametrize("case", load_cases(sizes=("medium",))[:2], ids=lambda c: c.name)
def test_every_one_of_twenty_backward_runs_passes(case):
    inputs = make_inputs(case, device="cuda", seed=6)
    for _ in range(20):
        for verdict in bounded_check(triton_provider.ms_deform_attn_triton, *inputs, seed=7):
            assert verdict.passed, f"{case.name}: {verdict}"


@pytest.mark.parametrize("case_name", ["detr_4level_mini", "rt_detr_pairs_mini"])
def test_forward_and_backward_replay_in_a_cuda_graph(case_name):
    case = next(c for c in load_cases() if c.name == case_name)
    value, shapes, locations, weights = make_inputs(case, device="cuda")
    leaves = [t.detach().clone().requires_grad_() for t in (value, locations, weights)]
    grad = torch.randn(case.batch, case.queries, case.heads * case.channels, device="cuda")

    def step():
        for leaf in leaves:
            leaf.grad = None
        out = triton_provider.ms_deform_attn_triton(leaves[0], shapes, leaves[1], leaves[2])
        out.backward(grad)
        return out

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        eager = step().detach().clone()
        eager_grads = [leaf.grad.clone() for leaf in leaves]
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(captured, eager)
    for leaf, expected in zip(leaves, eager_grads, strict=True):
        torch.testing.assert_close(leaf.grad, expected, rtol=1e-5, atol=1e-6)


def test_a_level_size_tensor_first_seen_inside_a_capture_runs_the_kernel():
    """A ``reduce-overhead`` recording hands the graph its own copy of each input, so the level
    sizes arrive as a CUDA tensor never read on the host: the plan launches on it (the kernels
    read sizes on the device) instead of declining to a portable path that must read it."""
    from libreyolo.kernels import dispatch

    case = next(c for c in load_cases() if c.name == "detr_4level_mini")
    value, shapes, locations, weights = make_inputs(case, device="cuda")
    shapes = torch.as_tensor(shapes, dtype=torch.int64, device="cuda")
    eager = triton_provider.ms_deform_attn_triton(value, shapes, locations, weights)
    fresh = shapes.clone()  # same sizes, a tensor the level-size memo has not read
    triton_provider.ms_deform_attn_triton(value, shapes, locations, weights)  # warm: compiled
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = dispatch("ms_deform_attn", value, fresh, locations, weights)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)


def test_the_module_dispatches_to_triton_on_cuda():
    from libreyolo.kernels import active
    from libreyolo.kernels.attention.ms_deform_attn import maybe_ms_deform_attn

    assert active()["ms_deform_attn"] == "triton"
    inputs = make_inputs(load_cases()[0], device="cuda")
    assert maybe_ms_deform_attn(*inputs) is not None


def test_the_module_trains_through_triton_and_matches_the_portable_path(monkeypatch):
    from libreyolo.nn import MSDeformAttn
    from libreyolo.nn import ms_deform_attn as module_file

    torch.manual_seed(0)
    module = MSDeformAttn(d_model=256, n_levels=2, n_heads=8, n_points=4).cuda()
    shapes = torch.tensor([[20, 30], [10, 15]], dtype=torch.int64, device="cuda")
    query = torch.randn(2, 50, 256, device="cuda")
    reference = torch.rand(2, 50, 2, 2, device="cuda")
    value = torch.randn(2, 750, 256, device="cuda")
    slot_calls = []
    original = module_file.maybe_ms_deform_attn

    def counted(*args):
        out = original(*args)
        slot_calls.append(out is not None)
        return out

    def grads(slot):
        monkeypatch.setattr(module_file, "maybe_ms_deform_attn", slot)
        module.zero_grad()
        out = module(query, reference, value, shapes)
        out.square().mean().backward()
        return [out.detach()] + [p.grad.clone() for p in module.parameters()]

    via_triton = grads(counted)
    portable = grads(lambda *args: None)
    assert slot_calls == [True]
    for a, b in zip(via_triton, portable, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.fixture
def triton_runs(monkeypatch):
    """Spy on the Triton forward: the list of plans it ran with."""
    plans = []
    real_forward = triton_provider._forward
    monkeypatch.setattr(triton_provider, "_forward",
                        lambda plan, *args: plans.append(plan) or real_forward(plan, *args))
    return plans


def _call_sites():
    from .call_sites import CALL_SITES

    return CALL_SITES


@pytest.mark.parametrize("site", _call_sites(), ids=lambda s: s.name)
def test_each_family_layout_reaches_the_triton_kernels_on_cuda(site, triton_runs):
    from libreyolo.kernels.attention.ms_deform_attn.portable import ms_deform_attn_portable

    from .call_sites import native_inputs

    native, inputs = native_inputs(site, device="cuda")
    out = site.call(*native)
    assert len(triton_runs) == 1, f"{site.families}: the Triton kernels did not run"
    torch.testing.assert_close(out, ms_deform_attn_portable(*inputs), rtol=1e-4, atol=1e-5)


def _module_inputs(layout):
    levels = [(20, 30), (10, 15)]
    shapes = levels if layout == "pairs" else torch.tensor(levels, dtype=torch.int64,
                                                            device="cuda")
    generator = torch.Generator(device="cuda").manual_seed(0)
    return (torch.randn(2, 50, 256, device="cuda", generator=generator),
            torch.rand(2, 50, 2, 2, device="cuda", generator=generator),
            torch.randn(2, 750, 256, device="cuda", generator=generator), shapes)


@pytest.mark.parametrize("layout", ["pairs", "tensor"])
def test_the_module_reaches_the_triton_kernels_with_each_spatial_shapes_layout(layout,
                                                                              triton_runs):
    from libreyolo.nn import MSDeformAttn

    module = MSDeformAttn(d_model=256, n_levels=2, n_heads=8, n_points=4).cuda()
    module(*_module_inputs(layout))
    assert len(triton_runs) == 1


@pytest.mark.parametrize("layout", ["pairs", "tensor"])
def test_no_host_sync_after_a_warm_up_call(layout):
    """The module forward and backward, and the helper, under sync debug mode "error": the
    level sizes are read (tensor) or copied (pairs) once, in the warm-up call."""
    from libreyolo.kernels.attention.ms_deform_attn import maybe_ms_deform_attn
    from libreyolo.nn import MSDeformAttn

    module = MSDeformAttn(d_model=256, n_levels=2, n_heads=8, n_points=4).cuda()
    query, reference, value, shapes = _module_inputs(layout)
    case = next(c for c in load_cases() if c.name == "rt_detr_decoder")
    slot_inputs = make_inputs(case, device="cuda")
    if layout == "tensor":
        slot_inputs = (slot_inputs[0], torch.tensor(case.levels, device="cuda"),
                       *slot_inputs[2:])

    def step():
        module.zero_grad(set_to_none=True)
        module(query, reference, value, shapes).square().mean().backward()
        assert maybe_ms_deform_attn(*slot_inputs) is not None

    step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()

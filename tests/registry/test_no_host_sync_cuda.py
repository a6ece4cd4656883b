"""No host sync in steady state (issue #12, item 2), on a CUDA device.

Every slot with an in-tree accelerated implementation runs each of its shape-set cases through
``dispatch`` once (the warm-up: compiling, and reading a user-given scale once), then again
under ``torch.cuda.set_sync_debug_mode("error")``, where any synchronizing call raises; forward,
and backward where the slot is differentiable. ``MSDeformAttn`` runs forward and backward the
same way. Each test also asserts the accelerated implementation ran (a spy), so a silent fall
to the reference cannot pass for "no sync".

Collected with every test, skipped without CUDA; on the GPU machine:
    python -m pytest tests/registry/test_no_host_sync_cuda.py -v -p no:cacheprovider
"""

from __future__ import annotations

import os

import pytest
import torch

from conformance.catalogue import CATALOGUE
from conformance.inputs.shapesets import load
from libreyolo.kernels import decline_reason, dispatch, registered, registry

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                       reason="compiled kernels cannot share a process with the interpreter"),
]


def _accelerated(slot: str) -> list[str]:
    return [i.name for i in registered(slot) if not i.is_reference and i.origin == "in-tree"]


CELLS = [
    pytest.param(slot, name, case, id=f"{slot}-{name}-{case.name}")
    for slot, spec in CATALOGUE.items()
    for name in (_accelerated(slot) if torch.cuda.is_available() else ())
    for case in load(spec.shapes)
    if case.size != "large"
]


@pytest.fixture
def ran():
    """Names of the implementations dispatch called, in order: every registered entry is
    swapped for one whose function records its name, and the originals are put back after."""
    calls = []

    def spying(impl):
        def spy(*args, **kwargs):
            calls.append(impl.name)
            return impl.fn(*args, **kwargs)

        return registry.Implementation(impl.op, impl.name, spy, impl.predicate, impl.accepts,
                                       impl.sources, impl.origin, impl.capabilities)

    saved = {op: registered(op) for op in registry._impls}
    with registry._lock:
        registry._impls.update({op: [spying(i) for i in entries] for op, entries in saved.items()})
    registry.clear_cache()
    yield calls
    with registry._lock:
        registry._impls.update(saved)
    registry.clear_cache()


def in_steady_state(step) -> None:
    """Run ``step`` where any host synchronization raises (after the caller's warm-up)."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_negative_control_a_synchronizing_step_is_caught():
    x = torch.ones(4, device="cuda")
    with pytest.raises(RuntimeError, match="synchroniz"):
        in_steady_state(lambda: x.sum().item())


def _call(slot: str, args: tuple, kwargs: dict, backward: bool):
    out = dispatch(slot, *args, **kwargs)
    if backward and out is not None and out.requires_grad:
        out.backward(torch.ones_like(out))
    return out


@pytest.mark.parametrize("slot, name, case", CELLS)
def test_a_steady_state_call_does_not_synchronize(slot, name, case, ran, monkeypatch):
    monkeypatch.setenv("LIBREYOLO_KERNELS", f"{slot}={name}")  # listed or not, run it
    unable = decline_reason(slot, name)
    if unable is not None:  # e.g. a Hub kernel without the kernels package: reported, not passed
        pytest.skip(f"{slot}/{name} cannot run on this machine: {unable}")
    spec = CATALOGUE[slot]
    dtype = torch.float32 if torch.float32 in spec.dtypes else spec.dtypes[-1]
    inputs = spec.make_inputs(case, dtype, "contiguous",
                              torch.Generator().manual_seed(0)).to("cuda")
    backward = spec.contract.ste or spec.contract.kind == "bounded"
    args = tuple(a.requires_grad_() if i in inputs.grad_args and backward
                 and isinstance(a, torch.Tensor) and a.is_floating_point() else a
                 for i, a in enumerate(inputs.args))
    _call(slot, args, inputs.kwargs, backward)  # warm-up: may compile and read scales
    ran.clear()
    in_steady_state(lambda: _call(slot, args, inputs.kwargs, backward))
    assert ran[:1] == [name], f"{slot}: ran {ran}, not {name}"


LEVELS = [(32, 32), (16, 16), (8, 8), (4, 4)]
#: Both layouts the module takes for spatial_shapes (docs/ms_deform_attn.md; issue #14).
SPATIAL_SHAPES = {
    "pairs": lambda: LEVELS,
    "int64-tensor": lambda: torch.tensor(LEVELS, dtype=torch.int64, device="cuda"),
}


@pytest.mark.parametrize("layout", SPATIAL_SHAPES)
def test_ms_deform_attn_module_forward_and_backward_do_not_synchronize(layout, ran, monkeypatch):
    from libreyolo.nn.ms_deform_attn import MSDeformAttn

    if "triton" not in _accelerated("ms_deform_attn"):
        pytest.skip("no in-tree accelerated ms_deform_attn implementation registered")
    monkeypatch.setenv("LIBREYOLO_KERNELS", "ms_deform_attn=triton")
    torch.manual_seed(0)
    module = MSDeformAttn(d_model=256, n_levels=4, n_heads=8, n_points=4).cuda()
    shapes = SPATIAL_SHAPES[layout]()
    len_in = sum(h * w for h, w in LEVELS)
    query = torch.randn(2, 300, 256, device="cuda", requires_grad=True)
    value = torch.randn(2, len_in, 256, device="cuda", requires_grad=True)
    points = torch.rand(2, 300, 4, 2, device="cuda")

    def step():
        module(query, points, value, shapes).sum().backward()

    step()
    ran.clear()
    in_steady_state(step)
    assert ran == ["triton"]

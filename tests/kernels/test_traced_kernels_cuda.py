"""On CUDA a compiled slot call is the in-tree kernel itself: inductor's code launches it, with no
registry Python per call (``libreyolo.kernels.traced``). For every slot whose eager call runs an
in-tree traceable implementation, the compiled graph holds no ``libreyolo`` operator after
AOTAutograd, only that implementation's launches, and the compiled call gives the eager bits
forward and backward, traced alone and compiled by inductor (``test_operators.py`` checks the
bits for every listed slot); under ``reduce-overhead`` it replays in a CUDA graph with the same
bits."""

from __future__ import annotations

import pytest
import torch
from test_operators import _run, assert_eager_bits, repeatable, slot_call, slot_inputs

from libreyolo.kernels import SLOTS, registry, traced

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]


@pytest.fixture(autouse=True)
def every_traceable_implementation_traced(monkeypatch):
    """Traced whether ``traced_on_cuda.toml`` lists it yet or not: this file is what validates
    one for the list."""
    everything = frozenset(f"{impl.op}/{impl.name}" for op in registry._impls
                           for impl in registry.registered(op) if impl.traceable)
    monkeypatch.setattr(traced, "validated", lambda: everything)


def _traceable_eager_choice(name: str) -> registry.Implementation:
    """The implementation an eager call of the slot's case runs; the test skips unless it is
    traceable."""
    args, kwargs = slot_inputs(name, "cuda")
    choice = registry.choose(name, args, kwargs)
    impl = None if choice is None else choice.impl
    if impl is None or not impl.traceable:
        pytest.skip(f"{name}: eager runs {impl and impl.name}, not a traceable implementation")
    return impl


TRACEABLE = [slot.name for slot in SLOTS]


@pytest.mark.parametrize("name", TRACEABLE)
def test_a_compiled_call_is_traced_to_the_kernel_eager_selects(name, record_property):
    impl = _traceable_eager_choice(name)
    graphs = []

    def inner(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    from torch._dynamo.backends.common import aot_autograd

    with repeatable(name, "cuda"):
        torch._dynamo.reset()
        eager = _run(slot_call(name), name, "cuda")
        compiled = _run(torch.compile(slot_call(name), fullgraph=True,
                                      backend=aot_autograd(fw_compiler=inner,
                                                           bw_compiler=inner)), name, "cuda")
    assert traced.decisions().get(name) == f"traced: {impl.name}", traced.decisions()
    targets = {str(n.target) for gm in graphs for n in gm.graph.nodes if n.op == "call_function"}
    assert not {t for t in targets if t.startswith("libreyolo.")}, targets
    assert_eager_bits(compiled, eager)
    # what a passing run validates, for benchmarks/rendering/traced_list.py
    record_property("traced", f"{name}/{impl.name}")


@pytest.mark.parametrize("name", TRACEABLE)
def test_inductor_compiles_the_traced_implementation_to_the_eager_bits(name, record_property):
    """Inductor, not only AOTAutograd: a traced implementation's torch ops around its kernels are
    inductor's to fuse, and a fused epilogue can round differently from eager (it did for the FP8
    GEMM slots: benchmarks/NOTES.md)."""
    impl = _traceable_eager_choice(name)
    with repeatable(name, "cuda"):
        torch._dynamo.reset()
        eager = _run(slot_call(name), name, "cuda")
        compiled = _run(torch.compile(slot_call(name), fullgraph=True), name, "cuda")
    assert traced.decisions().get(name) == f"traced: {impl.name}", traced.decisions()
    assert_eager_bits(compiled, eager)
    record_property("compiled", f"{name}/{impl.name}")


@pytest.mark.parametrize("name", ["ms_deform_attn", "ms_deform_attn_ragged", "fake_quant_fp8"])
def test_reduce_overhead_replays_the_traced_kernels_with_the_eager_bits(name, record_property):
    from torch._dynamo.utils import counters

    with repeatable(name, "cuda"):
        torch._dynamo.reset()
        counters.clear()
        eager = _run(slot_call(name), name, "cuda")
        compiled_call = torch.compile(slot_call(name), mode="reduce-overhead", fullgraph=True)
        for _ in range(3):  # recorded, then replayed
            compiled = _run(compiled_call, name, "cuda")
    assert traced.decisions().get(name, "").startswith("traced:"), traced.decisions()
    assert not counters["inductor"]["cudagraph_skips"], "the graph was not run as a CUDA graph"
    assert_eager_bits(compiled, eager)
    record_property("replayed", name)

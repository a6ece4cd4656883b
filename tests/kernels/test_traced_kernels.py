"""Under ``torch.compile`` the registry chooses once, when the graph is traced
(``libreyolo.kernels.traced``): an in-tree implementation registered ``traceable=True`` is traced
in the slot operator's place, anything else keeps the opaque operator, and a changed setting or
registration recompiles. On CPU with a stand-in made of torch operators (the in-tree Triton
kernels are traced on CUDA: ``test_traced_kernels_cuda.py``), through AOTAutograd without
inductor, so the graphs are read as traced."""

from __future__ import annotations

import pytest
import torch
from test_operators import slot_inputs
from torch._dynamo.backends.common import aot_autograd
from torch._subclasses.fake_tensor import FakeTensorMode

from libreyolo.capture import tracing_kernels
from libreyolo.kernels import ops, registry, settings, traced
from libreyolo.kernels.prepared import Prepared
from libreyolo.kernels.providers import IN_TREE
from libreyolo.kernels.quant.simulate.plan import prepare
from libreyolo.quant.fake_quant import fake_quant_fp8 as reference

SLOT = "fake_quant_fp8"


def standin(x, *args, **kwargs):
    """The slot's math in torch operators, as a traceable implementation would run it."""
    return reference(x, *args, **kwargs)


def straight_through(grad, x, *args, **kwargs):
    return (grad.clone(),)


@pytest.fixture
def registered(monkeypatch):
    """``registered(fn, in_tree=True, **options)``: ``fn`` is slot ``fake_quant_fp8``'s newest
    implementation, named ``standin``, for this test."""
    for variable in (settings.KERNELS, settings.LEGACY_KERNELS):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(traced, "validated", lambda: frozenset({f"{SLOT}/standin"}))

    def install(fn, in_tree=True, **options):
        if in_tree:
            with registry.loading(IN_TREE):
                return registry.register(SLOT, fn, name="standin", **options)
        return registry.register(SLOT, fn, name="standin", **options)

    yield install
    registry.unregister(SLOT, "standin")
    torch._dynamo.reset()


def compiled(fn):
    """``fn`` compiled whole through AOTAutograd, and the forward and backward graphs it made."""
    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True,
                         backend=aot_autograd(fw_compiler=keep, bw_compiler=keep)), graphs


def libreyolo_ops(graphs) -> set[str]:
    return {str(n.target) for gm in graphs for n in gm.graph.nodes
            if n.op == "call_function" and str(n.target).startswith("libreyolo.")}


def test_an_in_tree_traceable_implementation_is_traced_in_the_operators_place(registered):
    registered(standin, traceable=True)
    x = torch.randn(8, 32)
    call, graphs = compiled(lambda x: ops.fake_quant_fp8(x) * 2)
    assert torch.equal(call(x), ops.fake_quant_fp8(x) * 2)
    assert traced.decisions()[SLOT] == "traced: standin"
    assert libreyolo_ops(graphs) == set()


def test_its_declared_backward_is_traced_too(registered):
    registered(standin, traceable=True, backward=straight_through)
    x = torch.randn(8, 32, requires_grad=True)
    call, graphs = compiled(lambda x: ops.fake_quant_fp8(x).square().sum())
    call(x).backward()
    assert torch.equal(x.grad, 2 * ops.fake_quant_fp8(x.detach()))
    assert traced.decisions()[f"{SLOT}_backward"] == "traced: standin"
    assert libreyolo_ops(graphs) == set()


@pytest.mark.parametrize("in_tree, traceable, why", [
    (False, True, "standin (caller) is not an in-tree traceable implementation"),
    (True, False, "standin (in-tree) is not an in-tree traceable implementation"),
], ids=["another's", "not-declared-traceable"])
def test_anything_else_keeps_the_opaque_operator(registered, in_tree, traceable, why):
    registered(standin, in_tree=in_tree, traceable=traceable)
    x = torch.randn(8, 32)
    call, graphs = compiled(lambda x: ops.fake_quant_fp8(x) * 2)
    assert torch.equal(call(x), ops.fake_quant_fp8(x) * 2)
    assert traced.decisions()[SLOT] == f"opaque: {why}"
    assert libreyolo_ops(graphs) == {"libreyolo.fake_quant_fp8.default"}


def test_one_no_cuda_run_validated_keeps_the_opaque_operator(registered, monkeypatch):
    registered(standin, traceable=True)
    monkeypatch.setattr(traced, "validated", frozenset)
    x = torch.randn(8, 32)
    call, graphs = compiled(lambda x: ops.fake_quant_fp8(x) * 2)
    assert torch.equal(call(x), ops.fake_quant_fp8(x) * 2)
    assert traced.decisions()[SLOT] == ("opaque: standin's traced form has not been validated "
                                        "on CUDA (libreyolo/kernels/traced_on_cuda.toml)")
    assert libreyolo_ops(graphs) == {"libreyolo.fake_quant_fp8.default"}


def test_every_implementation_listed_as_validated_is_an_in_tree_traceable_one():
    traced.validated.cache_clear()
    listed = traced.validated()
    known = {f"{impl.op}/{impl.name}" for op in registry._impls for impl in registry.registered(op)
             if impl.traceable and impl.origin == IN_TREE}
    assert listed <= known, listed - known


def test_the_reference_stays_opaque_so_inductor_cannot_refuse_its_bits(registered):
    x = torch.randn(8, 32)
    call, graphs = compiled(lambda x: ops.fake_quant_fp8(x) * 2)
    call(x)
    assert traced.decisions()[SLOT].startswith("opaque: the reference runs it")
    assert libreyolo_ops(graphs) == {"libreyolo.fake_quant_fp8.default"}


def test_an_implementation_whose_tracing_raises_leaves_the_opaque_operator(registered):
    def broken(x, *args, **kwargs):
        if isinstance(x, torch._subclasses.functional_tensor.FunctionalTensor):
            raise RuntimeError("cannot be traced")
        return reference(x, *args, **kwargs)

    registered(broken, traceable=True)
    x = torch.randn(8, 32)
    call, graphs = compiled(lambda x: ops.fake_quant_fp8(x) * 2)
    assert torch.equal(call(x), ops.fake_quant_fp8(x) * 2)
    assert traced.decisions()[SLOT] == ("opaque: tracing standin raised RuntimeError: cannot be "
                                        "traced")
    assert libreyolo_ops(graphs) == {"libreyolo.fake_quant_fp8.default"}


def test_a_setting_changed_after_compiling_recompiles_and_is_followed(registered, monkeypatch):
    registered(standin, traceable=True)
    x = torch.randn(8, 32)
    call, graphs = compiled(lambda x: ops.fake_quant_fp8(x) * 2)
    call(x)
    assert traced.decisions()[SLOT] == "traced: standin"
    monkeypatch.setenv(settings.KERNELS, f"{SLOT}=reference")
    call(x)
    assert len(graphs) == 2, "the changed setting did not recompile the graph"
    assert traced.decisions()[SLOT].startswith("opaque: the reference runs it")


def test_a_registration_after_compiling_recompiles_and_is_followed(registered):
    x = torch.randn(8, 32)
    call, graphs = compiled(lambda x: ops.fake_quant_fp8(x) * 2)
    call(x)
    registered(standin, traceable=True)
    call(x)
    assert len(graphs) == 2, "the registration did not recompile the graph"
    assert traced.decisions()[SLOT] == "traced: standin"


@pytest.mark.parametrize("name", ["fake_quant_fp8", "fake_quant_int8_affine",
                                  "fake_quant_int8_per_channel"])
def test_a_traced_plan_reads_no_values_even_where_torch_says_it_is_not_compiling(name,
                                                                                 monkeypatch):
    """On the H100 (torch 2.11) ``torch.compiler.is_compiling()`` was false while AOTAutograd
    traced, the Triton plans read the caller's scale on fake tensors, and the registry passed
    the kernels over for the reference. Planned here on fake CUDA tensors, as a trace would."""
    monkeypatch.setattr(torch.compiler, "_is_compiling_flag", False)
    args, kwargs = slot_inputs(name, "cpu")

    def fake(value):
        if not isinstance(value, torch.Tensor):
            return value
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="cuda")

    with FakeTensorMode(), tracing_kernels(), torch.no_grad():
        plan = prepare(name, *map(fake, args), **{k: fake(v) for k, v in kwargs.items()})
    assert isinstance(plan, Prepared), plan

"""Every slot is a PyTorch operator (``torch.ops.libreyolo.<slot>``), made from its declaration:
``opcheck`` passes for each (schema, fake tensor, autograd registration, AOT dispatch with dynamic
shapes); under ``torch.compile`` a slot call is its operator and gives the eager call's bits,
forward and gradients; bad input raises the eager error; exports hold the portable math and no
``libreyolo`` operator. On CPU here, and on CUDA where one is present (the Triton kernels run
inside the operators there)."""

from __future__ import annotations

import contextlib

import pytest
import torch

from conformance.catalogue import CATALOGUE
from conformance.inputs import generators, shapesets
from conformance.running.cells import CellPlan, make_inputs
from libreyolo.kernels import SLOTS, operators, ops

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def slot_inputs(name: str, device: str, *, seed: int = 1):
    """A small catalogue case of slot ``name`` with ordinary values (no NaN: ``opcheck`` compares
    outputs with ``assert_close``), E4M3 NaN codes replaced by zero, differentiable inputs
    requiring grad: ``(args, kwargs)`` bound to the slot's signature."""
    spec = CATALOGUE[name]
    case = next(c for c in shapesets.load(spec.shapes) if c.size == "small")
    plan = CellPlan(name, "reference", "cpu", spec.dtypes[0], case, "contiguous", seed)
    with generators.plain_values():
        inputs = make_inputs(spec, plan).to(device)
    bound = spec.slot.bind(inputs.args, inputs.kwargs)
    for argument, value in bound.items():
        if isinstance(value, torch.Tensor) and value.dtype == torch.float8_e4m3fn:
            bound[argument] = torch.where(torch.isnan(value.float()), 0.0,
                                          value.float()).to(value.dtype)
        elif argument in spec.slot.differentiable:
            bound[argument] = value.detach().clone().requires_grad_()
    return spec.slot.split(bound)


def _operator_arguments(name, args, kwargs):
    """What ``operators.call`` hands the operator: level sizes as a tensor, E4M3 as bytes."""
    slot = CATALOGUE[name].slot
    bound = slot.bind(args, kwargs)
    if "spatial_shapes" in bound and not isinstance(bound["spatial_shapes"], torch.Tensor):
        bound["spatial_shapes"] = torch.tensor(bound["spatial_shapes"])
    for argument in slot.float8_inputs:
        bound[argument] = bound[argument].view(torch.uint8)
    return slot.split(bound)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", [slot.name for slot in SLOTS])
def test_opcheck_passes_for_every_slot(name, device):
    args, kwargs = _operator_arguments(name, *slot_inputs(name, device))
    result = torch.library.opcheck(operators.operator(name).default, args, kwargs)
    assert set(result.values()) == {"SUCCESS"}, result


@contextlib.contextmanager
def repeatable(name: str, device: str):
    """Deterministic algorithms for the CUDA deformable-attention backward, whose value gradient
    otherwise sums with float atomics (not the same bits twice: docs/ms_deform_attn.md,
    "Determinism"); anything else as it is."""
    if not (name.startswith("ms_deform_attn") and device == "cuda"):
        yield
        return
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)


def _bits(t: torch.Tensor) -> torch.Tensor:
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.detach().contiguous().view(view).cpu()


def _run(fn, name, device):
    """Outputs and the differentiable inputs' gradients of one call, with a fixed upstream
    gradient, as bit patterns."""
    args, kwargs = slot_inputs(name, device)
    out = fn(*args, **kwargs)
    outs = out if isinstance(out, tuple) else (out,)
    leaves = [a for a in (*args, *kwargs.values())
              if isinstance(a, torch.Tensor) and a.requires_grad]
    grads = []
    if leaves:
        g = torch.linspace(-2, 3, outs[0].numel(), device=device).reshape(outs[0].shape)
        grads = torch.autograd.grad(outs[0], leaves, g.to(outs[0].dtype), allow_unused=True)
    return [_bits(o) for o in outs] + [None if g is None else _bits(g) for g in grads]


def slot_call(name):
    """Slot ``name`` as a caller calls it: the slot's result, else (None) its portable path's."""
    portable = CATALOGUE[name].slot.load_portable()

    def call(*args, **kwargs):
        out = getattr(ops, name)(*args, **kwargs)
        return portable(*args, **kwargs) if out is None else out

    return call


def assert_eager_bits(compiled, eager):
    """Two ``_run``s alike: every output and gradient bit for bit, the absent ones absent."""
    assert len(compiled) == len(eager)
    for got, want in zip(compiled, eager, strict=True):
        assert (got is None) == (want is None)
        if want is not None:
            assert torch.equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", [slot.name for slot in SLOTS])
def test_a_compiled_call_gives_the_eager_bits_forward_and_backward(name, device):
    call = slot_call(name)
    with repeatable(name, device):
        eager = _run(call, name, device)
        torch._dynamo.reset()
        compiled = _run(torch.compile(call, fullgraph=True), name, device)
    assert_eager_bits(compiled, eager)


def test_a_compiled_graph_holds_the_operator_not_the_reference():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    torch.compile(lambda x: ops.fake_quant_fp8(x), backend=backend, fullgraph=True)(
        torch.randn(4, 32))
    targets = {str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"}
    assert targets == {"libreyolo.fake_quant_fp8"}, targets


@pytest.mark.parametrize("bad, error, match", [
    ({"x": torch.ones(4, 8, dtype=torch.int32)}, TypeError, "x must be"),
    ({"x": torch.randn(4, 8), "fmt": "e9m9"}, ValueError, "fmt must be"),
    ({"x": torch.randn(4, 8), "scale": torch.ones(3)}, ValueError, "scale"),
    ({"x": [1.0, 2.0]}, TypeError, "x must be a torch.Tensor, got list"),
    ({"x": torch.randn(4, 8), "scale": 0.5}, TypeError, "scale must be a torch.Tensor, got float"),
    ({"x": torch.randn(4, 8), "fmt": 3}, TypeError, "fmt must be a string"),
    ({"x": torch.randn(4, 8), "fmtt": "e4m3"}, TypeError, "unexpected keyword argument 'fmtt'"),
    ({"fmt": "e4m3"}, TypeError, "missing a required argument: 'x'"),
], ids=["int32-x", "unknown-fmt", "wrong-shape-scale", "list-x", "float-scale", "int-fmt",
        "unknown-keyword", "missing-x"])
def test_bad_input_under_compile_raises_the_eager_error(bad, error, match):
    with pytest.raises(error, match=match):
        ops.fake_quant_fp8(**bad)
    torch._dynamo.reset()
    with pytest.raises(error, match=match):
        torch.compile(lambda **kw: ops.fake_quant_fp8(**kw))(**bad)


def test_a_compiled_call_is_guarded_on_no_part_of_the_slot_declaration():
    """Dynamo guards a compiled graph on every global its trace read, and checks each guard on
    every call: the call's binding and type checks are decided from constants
    (``operators._call_form``), so no guard reads the declaration (``libreyolo.kernels.slots``)
    or the operator module's helpers."""
    guards = []

    def keep_all(entries):
        guards.extend(entry.name for entry in entries)
        return [True] * len(entries)

    torch._dynamo.reset()
    compiled = torch.compile(lambda x, s: ops.fake_quant_fp8(x, s, fmt="e5m2"), fullgraph=True,
                             backend="eager", options={"guard_filter_fn": keep_all})
    compiled(torch.randn(4, 8), torch.ones(()))
    assert guards, "the guard filter saw no guard"
    read = [name for name in guards if "slots" in name or "_BY_NAME" in name or "_JUDGES" in name]
    assert not read, read


def test_under_fullgraph_bad_input_is_reported_at_trace_time_with_the_eager_message():
    """The fake kernel refuses the input while the graph is traced (no graph is made), and
    fullgraph cannot fall back to eager: Dynamo's error carries the slot's as its cause."""
    graphs = []
    torch._dynamo.reset()
    with pytest.raises(Exception) as raised:
        torch.compile(lambda x: ops.fake_quant_fp8(x), fullgraph=True,
                      backend=lambda gm, inputs: graphs.append(gm) or gm)(
            torch.ones(4, 8, dtype=torch.int32))
    assert not graphs, "the bad input was refused when the graph ran, not when it was traced"
    chain, exc = [], raised.value
    while exc is not None:
        chain.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    assert any("x must be float32, float16 or bfloat16, got int32" in c for c in chain), chain


def test_dynamic_shapes_compile_at_most_twice_over_five_sizes():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(lambda x: ops.fake_quant_mxfp8_dynamic(x) * 2, dynamic=True)
    for rows in (3, 17, 64, 100, 257):
        x = torch.randn(rows, 64)
        assert torch.equal(compiled(x), ops.fake_quant_mxfp8_dynamic(x) * 2)
    assert counters["stats"]["unique_graphs"] <= 2

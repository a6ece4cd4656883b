"""``(H, W)`` pairs never break a ``torch.compile`` graph (issue 48, item 2).

Hugging Face's RT-DETR passes its level sizes as a list of ``(height, width)`` tuples read from
the feature maps' ``.shape``: SymInts under ``dynamic=True``. Every entry point a caller uses
compiles whole (``fullgraph=True``) with its sizes given that way or as a list of tuples passed in,
forward and backward, with ``dynamic=False`` and ``dynamic=True``, and gives eager's bits
(``backend="eager"``) or stays within the slot's bound (``backend="inductor"``). Under
``dynamic=True`` a second input of other level sizes reuses the graph: the sizes stay symbolic.
"""

from __future__ import annotations

import shutil

import pytest
import torch
from torch._dynamo.utils import counters

from conformance.schema.bounds import bounded_limit
from libreyolo.kernels import ops
from libreyolo.kernels.attention.ms_deform_attn import (
    maybe_ms_deform_attn,
    maybe_ms_deform_attn_ragged,
    ms_deform_attn_portable,
    ms_deform_attn_ragged_portable,
)
from libreyolo.kernels.slots import MSDA_BOUND
from libreyolo.nn.ms_deform_attn import MSDeformAttn

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

BATCH, HEADS, CHANNELS, LEVELS, POINTS, QUERIES = 2, 2, 4, 2, 2, 5
D_MODEL = HEADS * CHANNELS  # == HEADS * LEVELS * POINTS: the module's query is the weights
# Level sizes unlike every other input dimension: Dynamo gives equal sizes one symbol, and a
# resize that keeps another dimension would then recompile for that reason alone.
SIZES = ((7, 9), (3, 11))
RESIZED = ((10, 12), (6, 13))


def _inputs(sizes, dtype=torch.float32):
    """Feature maps ``(B, D_MODEL, H, W)``, locations, weights and the upstream gradient."""
    generator = torch.Generator().manual_seed(sum(h * w for h, w in sizes))
    feats = [torch.randn(BATCH, D_MODEL, h, w, generator=generator) for h, w in sizes]
    # some points beyond the border, where bilinear sampling reads zeros
    locations = torch.rand(BATCH, QUERIES, HEADS, LEVELS, POINTS, 2, generator=generator)
    locations = locations * 1.2 - 0.1
    weights = torch.rand(BATCH, QUERIES, HEADS, LEVELS, POINTS, generator=generator)
    grad = torch.randn(BATCH, QUERIES, D_MODEL, generator=generator)
    return [t.to(dtype) for t in feats], locations.to(dtype), weights.to(dtype), grad.to(dtype)


def _flat(feats):
    """The levels flattened and concatenated, ``(B, sum(H*W), D_MODEL)``, as transformers does."""
    return torch.cat([f.flatten(2).transpose(1, 2) for f in feats], 1)


def _value(feats):
    return _flat(feats).view(BATCH, -1, HEADS, CHANNELS)


def _or_portable(out, portable, *args):
    """A helper answers None where no implementation takes the input: the caller's portable path
    runs then (eagerly on CPU; compiled, the slot's operator answers itself)."""
    return portable(*args) if out is None else out


def _maybe(feats, locations, weights, pairs):
    args = (_value(feats), pairs, locations, weights)
    return _or_portable(maybe_ms_deform_attn(*args), ms_deform_attn_portable, *args)


def _ops(feats, locations, weights, pairs):
    args = (_value(feats), pairs, locations, weights)
    return _or_portable(ops.ms_deform_attn(*args), ms_deform_attn_portable, *args)


def _portable(feats, locations, weights, pairs):
    return ms_deform_attn_portable(_value(feats), pairs, locations, weights)


def _ragged_args(feats, locations, weights, pairs):
    return (_value(feats), pairs, locations.flatten(3, 4), weights.flatten(3, 4),
            [POINTS] * LEVELS, "bilinear")


def _maybe_ragged(feats, locations, weights, pairs):
    args = _ragged_args(feats, locations, weights, pairs)
    return _or_portable(maybe_ms_deform_attn_ragged(*args), ms_deform_attn_ragged_portable, *args)


def _ragged_portable(feats, locations, weights, pairs):
    return ms_deform_attn_ragged_portable(*_ragged_args(feats, locations, weights, pairs))


def _module(dtype):
    torch.manual_seed(0)
    module = MSDeformAttn(D_MODEL, LEVELS, HEADS, POINTS)
    with torch.no_grad():  # offsets and weights that depend on the query
        module.sampling_offsets.weight.normal_(0, 0.5)
        module.attention_weights.weight.normal_(0, 0.5)
    module.to(dtype)  # after drawing: the float64 oracle holds the same parameters

    def run(feats, locations, weights, pairs):
        """The module with the weights as its query and level 0's first points as references."""
        return module(weights.flatten(2), locations[:, :, 0, :, 0], _flat(feats), pairs)

    return run


ENTRY_POINTS = {"maybe_ms_deform_attn": lambda dtype: _maybe,
                "maybe_ms_deform_attn_ragged": lambda dtype: _maybe_ragged,
                "ms_deform_attn_portable": lambda dtype: _portable,
                "ms_deform_attn_ragged_portable": lambda dtype: _ragged_portable,
                "ops.ms_deform_attn": lambda dtype: _ops,
                "MSDeformAttn": _module}


def _from_shapes(fn):
    """``fn`` with its pairs read from the feature maps inside: what transformers passes."""
    def run(feats, locations, weights, pairs):
        del pairs  # read from the maps instead
        return fn(feats, locations, weights, [(f.shape[2], f.shape[3]) for f in feats])
    return run


#: How the level sizes reach the entry point: read from ``.shape`` inside the compiled function,
#: or passed to it as a list of ``(H, W)`` tuples.
PAIRS = {"from_shapes": _from_shapes, "given": lambda fn: fn}


def _step(fn, sizes, dtype=torch.float32):
    """The output and the gradients of the feature maps, locations and weights."""
    feats, locations, weights, grad = _inputs(sizes, dtype)
    leaves = [t.requires_grad_() for t in (*feats, locations, weights)]
    out = fn(feats, locations, weights, [tuple(pair) for pair in sizes])
    out.backward(grad)
    return [out.detach(), *(leaf.grad for leaf in leaves)]


def _bitwise(got, want, sizes):
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert torch.equal(g, w), f"{sizes}: quantity {i} differs from eager"


def _bounded(got, want, sizes, oracle, name):
    """The slot's bound (``MSDA_BOUND``) against the float64 eager run: k times eager float32's
    error plus a floor of float32 epsilons of the oracle's largest magnitude."""
    eps = torch.finfo(torch.float32).eps
    for i, (g, w, o) in enumerate(zip(got, want, oracle, strict=True)):
        limit = bounded_limit((w.double() - o).abs().max().item(), o.abs().max().item(), eps,
                              MSDA_BOUND.k, MSDA_BOUND.floor)
        error = (g.double() - o).abs().max().item()
        assert error <= limit, f"{name} {sizes}: quantity {i} errs {error:.3g} > {limit:.3g}"


def _needs_inductor(backend):
    if backend == "inductor" and shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("inductor on CPU needs a C compiler")


#: (backend, dynamic, pairs): every way with Dynamo alone (the graph breaks are Dynamo's), and
#: inductor once per entry point on transformers' way (sizes from .shape, dynamic): inductor's
#: CPU codegen costs seconds a test, and which graph it gets is what the eager backend checks
COMPILES = [("eager", dynamic, pairs) for dynamic in (False, True) for pairs in PAIRS] + \
    [("inductor", True, "from_shapes")]


@pytest.mark.parametrize(("backend", "dynamic", "pairs"), COMPILES,
                         ids=lambda value: str(value).lower())
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_pairs_compile_whole_forward_and_backward(entry, backend, dynamic, pairs):
    _needs_inductor(backend)
    fn = PAIRS[pairs](ENTRY_POINTS[entry](torch.float32))
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(fn, fullgraph=True, dynamic=dynamic, backend=backend)
    # dynamic: the sizes stay symbolic, so the second layout reuses the first one's graph
    with torch._dynamo.config.patch(error_on_recompile=dynamic):
        for sizes in (SIZES, RESIZED):
            got, want = _step(compiled, sizes), _step(fn, sizes)
            if backend == "eager":
                _bitwise(got, want, sizes)
            else:
                oracle = _step(PAIRS[pairs](ENTRY_POINTS[entry](torch.float64)), sizes,
                               torch.float64)
                _bounded(got, want, sizes, oracle, entry)
    assert not counters["graph_break"], dict(counters["graph_break"])


@pytest.mark.parametrize("entry", ["maybe_ms_deform_attn_ragged", "ms_deform_attn_ragged_portable"])
def test_points_per_level_passed_in_compile_whole(entry):
    """The ragged slot's ``points_per_level`` passed to the compiled function (SymInts or ints,
    as Dynamo decides) breaks no graph either; each layout of counts gives eager's bits."""
    call = {"maybe_ms_deform_attn_ragged": maybe_ms_deform_attn_ragged,
            "ms_deform_attn_ragged_portable": ms_deform_attn_ragged_portable}[entry]

    def fn(feats, locations, weights, points):
        args = (_value(feats), [(f.shape[2], f.shape[3]) for f in feats], locations.flatten(3, 4),
                weights.flatten(3, 4), points, "bilinear")
        return _or_portable(call(*args), ms_deform_attn_ragged_portable, *args)

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(fn, fullgraph=True, dynamic=True, backend="eager")
    feats, locations, weights, _ = _inputs(SIZES)
    for points in ([2, 2], [1, 3], [3, 1]):
        assert torch.equal(compiled(feats, locations, weights, points),
                           fn(feats, locations, weights, points)), points
    assert not counters["graph_break"], dict(counters["graph_break"])


@pytest.mark.parametrize("fullgraph", [False, True])
@pytest.mark.parametrize(("pairs", "error", "message"), [
    ([(2.0, 3)], TypeError, "pairs of ints"),
    ([(True, 6)], TypeError, "pairs of ints"),
    ([(0, 6)], ValueError, "must be positive"),
])
def test_bad_pairs_under_compile_get_the_slot_error(pairs, error, message, fullgraph):
    """Pairs are checked as given while the graph is traced (a float or bool would pass as a size
    once made a tensor): the eager error, or under ``fullgraph=True`` Dynamo's, which quotes it."""
    value = torch.randn(1, 6, 1, 2)
    locations, weights = torch.rand(1, 3, 1, 1, 1, 2), torch.rand(1, 3, 1, 1, 1)

    def fn(value, locations, weights):
        return maybe_ms_deform_attn(value, pairs, locations, weights)

    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=fullgraph, backend="eager")
    with pytest.raises(torch._dynamo.exc.Unsupported if fullgraph else error, match=message):
        compiled(value, locations, weights)

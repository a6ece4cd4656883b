"""Finalized layers on a CUDA device: the dequantize-once path computes the oracle's bits, is
refreshed when the weights change, replays in a CUDA graph and never synchronizes in steady state.

Collected with every test, skipped without CUDA; on the GPU machine (``benchmarks/gpu_run.sh
finalized``):
    python -m pytest tests/nn/test_finalized_cuda.py -v -p no:cacheprovider
The oracle runs the fake-quant references on the device, which give the CPU's bits
(tests/quant), and the eager layer runs the accelerated slots (Triton fake-quant and unpack,
exact against the references), so equal bits show the cache holds the portable weight.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from libreyolo.kernels.quant.execute import fp8_linear
from libreyolo.kernels.quant.execute.fp8_linear import fused_fp8_mlp
from libreyolo.nn import FinalizedLinear, FinalizedMLP
from libreyolo.nn.finalized import mlp

from .finalized_cases import FORMATS, LAYERS, finalize, oracle
from .test_finalized_forward import assert_same_bits

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                       reason="compiled kernels cannot share a process with the interpreter"),
]

CASES = [pytest.param(f, layer, id=f"{f}-{layer}") for f in FORMATS for layer in LAYERS]


@pytest.fixture(autouse=True)
def _deterministic_convolutions():
    """The same convolution algorithm for the layer and its oracle."""
    saved = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
    yield
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = saved


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("fmt, layer", CASES)
def test_the_eager_cuda_forward_is_the_oracle_on_the_device(fmt, layer, dtype):
    float_layer, finalized = finalize(FORMATS[fmt], LAYERS[layer], device="cuda")
    x = LAYERS[layer].x(dtype=dtype, device="cuda")
    with torch.no_grad():
        first, second = finalized(x), finalized(x)  # the second reads the kept weight
        expected = oracle(FORMATS[fmt], LAYERS[layer], float_layer, x)
    assert_same_bits(first.cpu(), expected.cpu())
    assert_same_bits(second.cpu(), expected.cpu())


def test_the_weight_is_dequantized_once_and_again_only_after_a_change(monkeypatch):
    spec, layer = FORMATS["int4-g16"], LAYERS["conv3x3-stride2-nobias"]
    _, finalized = finalize(spec, layer, device="cuda")
    other_float, other = finalize(spec, layer, seed=5, device="cuda")
    calls = []
    dequantize = finalized._dequantize
    monkeypatch.setattr(finalized, "_dequantize", lambda dtype: calls.append(dtype) or
                        dequantize(dtype))
    x = layer.x(device="cuda")
    with torch.no_grad():
        finalized(x)
        finalized(x)
        assert calls == [torch.float32]
        finalized(x.bfloat16())
        assert calls == [torch.float32, torch.bfloat16]  # another dtype: dequantized for it
        finalized.load_state_dict(other.state_dict())  # in-place copies into the buffers
        assert_same_bits(finalized(x).cpu(), oracle(spec, layer, other_float, x).cpu())
        assert len(calls) == 3
        finalized.scale.mul_(2)  # any in-place write counts
        finalized(x)
        assert len(calls) == 4
        finalized.cpu().cuda()  # new buffers
        finalized(x)
        assert len(calls) == 5


def in_steady_state(step):
    """``step()`` where any host synchronization raises (after the caller's warm-up)."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        return step()
    finally:
        torch.cuda.set_sync_debug_mode("default")


def assert_a_graph_replays_the_eager_forward(module, static_x, fresh):
    """Warm up on a side stream (compiles kernels, reads a static scale once, keeps the weight),
    check that a steady-state call never synchronizes, capture one call, replay it on ``fresh``
    copied into the static input: the eager forward's bits."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(stream):
        for _ in range(2):
            module(static_x)
    torch.cuda.current_stream().wait_stream(stream)
    with torch.no_grad():
        in_steady_state(lambda: module(static_x))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = module(static_x)
        static_x.copy_(fresh)
        graph.replay()
        assert_same_bits(static_y.cpu(), module(fresh).cpu())


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_cuda_graph_replays_the_eager_forward_and_nothing_synchronizes(fmt):
    layer = LAYERS["conv1x1"] if fmt.startswith("fp8") else LAYERS["linear"]
    _, finalized = finalize(FORMATS[fmt], layer, device="cuda")
    assert_a_graph_replays_the_eager_forward(finalized, layer.x(device="cuda"),
                                             layer.x(seed=3, device="cuda"))


# -- FinalizedMLP: the folded FP8 path where the policy engages both layers ----------------------

#: ViT-L's MLP at 1024 px, where the policies of both measured cards engage both layers, and the
#: same layers at 300 rows, where they engage neither.
VITL_MLP, FEW_ROWS = 16384, 300


def vitl_mlp():
    torch.manual_seed(0)
    fc1, fc2 = (FinalizedLinear.from_float(nn.Linear(i, o), "fp8", "fp8_dynamic").cuda()
                for i, o in ((1024, 4096), (4096, 1024)))
    return FinalizedMLP(fc1, fc2), fc1, fc2


def operands(layer):
    return layer.codes, layer.scale, layer.bias


def rms(t):
    return float(t.double().square().mean().sqrt())


def float64_mlp(x, fc1, fc2):
    """The MLP the finalized layers hold, in float64: dequantized weights, exact GELU, and no
    activation quantization."""
    def linear(h, layer):
        weight = layer.codes.double() * layer.scale.double().reshape(-1, 1)
        return F.linear(h, weight, layer.bias.double())

    return linear(F.gelu(linear(x.double(), fc1)), fc2)


def test_the_mlp_folds_where_the_policy_engages_both_layers_and_nowhere_else():
    """At ViT-L's rows the module's output is ``fused_fp8_mlp``'s bit for bit. It is not its
    layers' output: the fold quantizes GELU's float32 result, where the layers round it to
    bfloat16 first, so fc2's row scales and some of its codes differ (about 1.5% of the output's
    RMS on the H200). The fold skips a rounding, so it must be at least as close to the float64
    MLP as the layers are. At 300 rows, and at ViT-L's rows on a GPU whose policy does not engage
    both layers (a card fp8_policy.toml does not list), it is its layers' path bit for bit."""
    both = fp8_linear._answer(torch.cuda.current_device(), VITL_MLP, ((4096, 1024), (1024, 4096)))
    model, fc1, fc2 = vitl_mlp()
    with torch.no_grad():
        for rows in (VITL_MLP, FEW_ROWS):
            x = torch.randn((rows, 1024), device="cuda").to(torch.bfloat16)
            got, layers = model(x), fc2(F.gelu(fc1(x)))
            if rows == VITL_MLP and both:
                assert_same_bits(got.cpu(), fused_fp8_mlp(x, operands(fc1), operands(fc2)).cpu())
                exact = float64_mlp(x, fc1, fc2)
                folded_error, layers_error = rms(got - exact), rms(layers - exact)
                assert folded_error <= layers_error, (folded_error, layers_error)
            else:
                assert_same_bits(got.cpu(), layers.cpu())


def test_the_folded_mlp_replays_in_a_cuda_graph_and_nothing_synchronizes():
    model, _, _ = vitl_mlp()
    static_x, fresh = (torch.randn((VITL_MLP, 1024), device="cuda").to(torch.bfloat16)
                       for _ in range(2))
    assert_a_graph_replays_the_eager_forward(model, static_x, fresh)


def test_a_traced_mlp_never_asks_for_the_folded_path(monkeypatch):
    def folded():
        raise AssertionError("a capture must hold the layers' portable math")

    monkeypatch.setattr(mlp, "_fp8_mlp", folded)
    model, _, _ = vitl_mlp()
    x = torch.randn((VITL_MLP, 1024), device="cuda").to(torch.bfloat16)
    with torch.no_grad():
        torch.jit.trace(model, x, check_trace=False)

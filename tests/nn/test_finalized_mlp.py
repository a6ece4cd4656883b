"""``FinalizedMLP``: its layers' path everywhere but the folded FP8 case, which a spy stands in for
here (its numbers: ``tests/kernels/quant/fp8_linear_checks.py``; on the device:
``test_finalized_cuda.py``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from libreyolo.nn import FinalizedLinear, FinalizedMLP
from libreyolo.nn.finalized import mlp


def layers(weight="fp8", activation="fp8_dynamic", sizes=(32, 64, 16), seed=0):
    torch.manual_seed(seed)
    return tuple(FinalizedLinear.from_float(nn.Linear(i, o), weight, activation)
                 for i, o in zip(sizes[:-1], sizes[1:], strict=True))


@pytest.fixture
def spy(monkeypatch):
    calls = []

    def fp8_mlp(x, fc1, fc2):
        calls.append((x, fc1, fc2))
        return torch.full((*x.shape[:-1], fc2[0].shape[0]), 7.0)

    monkeypatch.setattr(mlp, "_fp8_mlp", lambda: fp8_mlp)
    return calls


@pytest.mark.parametrize("activation", ["gelu", "relu", "silu"])
def test_off_cuda_it_is_its_layers_with_the_activation_between(activation, spy):
    fc1, fc2 = layers()
    x = torch.randn(3, 5, 32)
    got = FinalizedMLP(fc1, fc2, activation)(x)
    want = fc2({"gelu": F.gelu, "relu": F.relu, "silu": F.silu}[activation](fc1(x)))
    assert torch.equal(got, want) and spy == []


def test_its_state_dict_is_its_layers_and_loads_into_an_empty_mlp():
    fc1, fc2 = layers()
    model = FinalizedMLP(fc1, fc2)
    state = model.state_dict()
    assert set(state) == {f"fc1.{k}" for k in fc1.state_dict()} | {f"fc2.{k}" for k in
                                                                    fc2.state_dict()}
    empty = FinalizedMLP(FinalizedLinear(32, 64, weight="fp8", activation="fp8_dynamic"),
                         FinalizedLinear(64, 16, weight="fp8", activation="fp8_dynamic"))
    empty.load_state_dict(state)
    x = torch.randn(4, 32)
    assert torch.equal(empty(x), model(x))


def test_gelu_between_two_dynamic_fp8_layers_asks_for_the_folded_path(spy):
    fc1, fc2 = layers()
    x = torch.randn(2, 32)
    out = FinalizedMLP(fc1, fc2)._fused(x)
    (got_x, got_fc1, got_fc2), = spy
    assert got_x is x and out.shape == (2, 16) and bool((out == 7).all())
    for got, layer in ((got_fc1, fc1), (got_fc2, fc2)):
        assert got[0] is layer.codes and got[1] is layer.scale and got[2] is layer.bias


@pytest.mark.parametrize(("weight", "activation", "between"), [
    ("fp8", "fp8_dynamic", "relu"), ("fp8", "fp8_static", "gelu"), ("mxfp8", None, "gelu"),
    ("int8", "int8_affine", "gelu")], ids=["relu", "static-scales", "mxfp8", "int8"])
def test_other_activations_and_formats_take_their_layers_path(weight, activation, between,
                                                              spy):
    scale = {"input_scale": torch.tensor(0.05)} if activation == "fp8_static" else {}
    if activation == "int8_affine":
        scale = {"input_scale": torch.tensor(0.05), "input_zero_point": 0}
    torch.manual_seed(0)
    fc1 = FinalizedLinear.from_float(nn.Linear(32, 64), weight, activation, **scale)
    fc2 = FinalizedLinear.from_float(nn.Linear(64, 16), weight, activation, **scale)
    assert FinalizedMLP(fc1, fc2, between)._fused(torch.randn(2, 32)) is None and spy == []


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_a_traced_graph_holds_its_layers_path():
    fc1, fc2 = layers()
    model = FinalizedMLP(fc1, fc2).eval()
    x = torch.randn(6, 32)
    with torch.no_grad():
        traced = torch.jit.trace(model, x, check_trace=False)
        assert torch.equal(traced(x), fc2(F.gelu(fc1(x))))


def test_bad_layers_and_activations_are_refused_by_name():
    fc1, fc2 = layers()
    with pytest.raises(TypeError, match="fc1 must be a FinalizedLinear, got Linear"):
        FinalizedMLP(nn.Linear(32, 64), fc2)
    with pytest.raises(TypeError, match="fc2 must be a FinalizedLinear, got Linear"):
        FinalizedMLP(fc1, nn.Linear(64, 16))
    with pytest.raises(ValueError, match=r"fc1.out_features \(64\) must equal fc2.in_features "
                                         r"\(16\)"):
        FinalizedMLP(fc1, layers(sizes=(16, 16))[0])
    with pytest.raises(ValueError, match="activation must be one of .*'tanh'"):
        FinalizedMLP(fc1, fc2, "tanh")
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., in_features=32\)"):
        FinalizedMLP(fc1, fc2)(torch.randn(2, 31))

"""Both deformable-attention Triton providers remember a plan under the input's metadata
(``memo.py``), so a decoder's steady-state call skips validation and planning. What is remembered
must never change an answer: a bad input still raises, a changed shape, dtype, device, point
count, method or interpreter setting is planned again, and a decline is worked out every time."""

from __future__ import annotations

import pytest
import torch

from libreyolo.kernels.attention.ms_deform_attn import memo
from libreyolo.kernels.attention.ms_deform_attn import ragged_triton_provider as ragged
from libreyolo.kernels.attention.ms_deform_attn import triton_provider as classic

LEVELS = [(6, 5), (3, 3)]
LEN_IN = 6 * 5 + 3 * 3


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    """CPU tensors are the kernels' under the interpreter; each test starts with no plans."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(memo, "_plans", memo.PlanCache(memo.MAX_PLANS))


@pytest.fixture
def planned(monkeypatch):
    """How many times each provider worked a plan out."""
    counts = {"classic": 0, "ragged": 0}
    for name, module in (("classic", classic), ("ragged", ragged)):
        original = module._plan

        def counting(*args, _original=original, _name=name):
            counts[_name] += 1
            return _original(*args)

        monkeypatch.setattr(module, "_plan", counting)
    return counts


def classic_inputs(dtype=torch.float32, queries=7):
    return (torch.randn(2, LEN_IN, 4, 8, dtype=dtype), LEVELS,
            torch.rand(2, queries, 4, 2, 3, 2, dtype=dtype),
            torch.rand(2, queries, 4, 2, 3, dtype=dtype))


def ragged_inputs(points=(3, 2), dtype=torch.float32):
    total = sum(points)
    return (torch.randn(2, LEN_IN, 4, 8, dtype=dtype), LEVELS,
            torch.rand(2, 7, 4, total, 2, dtype=dtype), torch.rand(2, 7, 4, total, dtype=dtype),
            list(points))


def test_the_same_metadata_is_planned_once(planned):
    first = classic.accepts(*classic_inputs())
    again = classic.accepts(*classic_inputs())  # new tensors, same metadata
    assert again is first and planned["classic"] == 1
    first = ragged.accepts(*ragged_inputs(), "discrete")
    assert ragged.accepts(*ragged_inputs(), "discrete") is first and planned["ragged"] == 1


def test_changed_metadata_is_planned_again(planned, monkeypatch):
    plans = {id(classic.accepts(*inputs)) for inputs in (
        classic_inputs(), classic_inputs(torch.float16), classic_inputs(queries=9))}
    assert len(plans) == 3 and planned["classic"] == 3
    plans = {id(ragged.accepts(*inputs, method)) for inputs, method in (
        (ragged_inputs(), "bilinear"), (ragged_inputs(), "discrete"),
        (ragged_inputs((2, 3)), "bilinear"))}
    assert len(plans) == 3 and planned["ragged"] == 3
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # another setting: another plan
    classic.accepts(*classic_inputs())
    assert planned["classic"] == 4


def test_bad_input_still_raises_after_a_good_one_was_remembered():
    classic.accepts(*classic_inputs())
    value, _, locations, weights = classic_inputs()
    with pytest.raises(TypeError, match="spatial_shapes"):
        classic.accepts(value, [(6.0, 5), (3, 3)], locations, weights)  # 6.0 == 6 as a key
    with pytest.raises(ValueError, match="len_in"):
        classic.accepts(value, [(6, 5), (3, 4)], locations, weights)
    ragged.accepts(*ragged_inputs(), "bilinear")
    with pytest.raises(ValueError, match="method"):
        ragged.accepts(*ragged_inputs(), "nearest")


def test_a_decline_is_not_remembered(planned):
    empty = classic_inputs()[2][..., :0, :]  # no points: declined
    value, levels, _, _ = classic_inputs()
    for _ in range(2):
        assert classic.accepts(value, levels, empty, empty[..., 0]) == "no points"
    assert planned["classic"] == 2 and len(memo._plans) == 0

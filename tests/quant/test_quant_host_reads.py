"""User-given scales and zero points are read on the host once per tensor version (rule 13).

The first call with a tensor reads its values (a host sync on a GPU); later calls with the same,
unmodified tensor read nothing; any in-place write, through any view, or a swap of its storage
makes the next call read again, so a value made invalid after a good read is still rejected.
"""

from __future__ import annotations

import gc

import pytest
import torch

from libreyolo.quant import validation
from libreyolo.quant.fake_quant import (
    fake_quant_fp8,
    fake_quant_int8_affine,
    fake_quant_int8_per_channel,
)

X = torch.linspace(-2, 2, 64)


@pytest.fixture
def reads(monkeypatch):
    """The list of scale tensors whose values the host read, in order."""
    seen = []
    original = validation._check_scale_values

    def spy(name, scale):
        seen.append(scale)
        return original(name, scale)

    monkeypatch.setattr(validation, "_check_scale_values", spy)
    return seen


def test_a_scale_is_read_once_while_it_is_unchanged(reads):
    scale = torch.tensor(0.05)
    for _ in range(3):
        fake_quant_fp8(X, scale)
    assert len(reads) == 1


def test_an_in_place_write_makes_the_next_call_read_again_and_reject_a_bad_value(reads):
    scale = torch.tensor(0.05)
    fake_quant_fp8(X, scale)
    scale.fill_(-1.0)
    with pytest.raises(ValueError, match="scale must be finite and non-negative, got -1.0"):
        fake_quant_fp8(X, scale)
    assert len(reads) == 2


def test_a_write_through_a_view_counts_as_a_write(reads):
    scales = torch.full((4,), 0.05)
    w = torch.ones(4, 8)
    fake_quant_int8_per_channel(w, scales, 0)
    scales[2:].fill_(float("nan"))
    with pytest.raises(ValueError, match="nan at index \\(2,\\)"):
        fake_quant_int8_per_channel(w, scales, 0)


def test_swapping_the_storage_counts_as_a_write(reads):
    scale = torch.nn.Parameter(torch.tensor(0.05), requires_grad=False)
    fake_quant_fp8(X, scale)
    scale.data = torch.tensor(float("inf"))
    with pytest.raises(ValueError, match="got inf"):
        fake_quant_fp8(X, scale)


def test_another_tensor_with_the_same_values_is_read_again(reads):
    fake_quant_fp8(X, torch.tensor(0.05))
    fake_quant_fp8(X, torch.tensor(0.05))
    assert len(reads) == 2


def test_inference_tensors_have_no_version_and_are_read_every_time(reads):
    with torch.inference_mode():
        scale = torch.tensor(0.05)
        fake_quant_fp8(X, scale)
        fake_quant_fp8(X, scale)
    assert len(reads) == 2


def test_the_table_forgets_tensors_that_died():
    gc.collect()
    before = len(validation.HOST_READS)
    scales = [torch.tensor(0.05) for _ in range(50)]
    for scale in scales:
        fake_quant_fp8(X, scale)
    assert len(validation.HOST_READS) == before + 50
    del scales, scale
    gc.collect()
    assert len(validation.HOST_READS) == before


def test_a_zero_point_tensor_is_read_once_per_version(monkeypatch):
    calls = []
    original = torch.Tensor.item

    def item(self):
        calls.append(self)
        return original(self)

    zero_point = torch.tensor(3)
    scale = torch.tensor(0.01)  # codes up to 200: the zero point moves where they clip
    monkeypatch.setattr(torch.Tensor, "item", item)
    first = fake_quant_int8_affine(X, scale, zero_point)
    again = fake_quant_int8_affine(X, scale, zero_point)
    assert sum(c is zero_point for c in calls) == 1
    assert torch.equal(first, again)
    zero_point.fill_(-3)
    moved = fake_quant_int8_affine(X, scale, zero_point)
    monkeypatch.undo()
    assert torch.equal(moved, fake_quant_int8_affine(X, scale, -3))
    assert not torch.equal(moved, first)

"""``ms_deform_attn_ragged`` (what families call) consults the ``ms_deform_attn_ragged`` slot:
an implementation that takes the input runs, receiving ``accepts``' plan; a decline, or a graph
being captured, leaves the portable path."""

from __future__ import annotations

import pytest
import torch

from conformance.catalogue import CATALOGUE
from conformance.catalogue.ms_deform_attn_ragged import draw_inputs
from conformance.inputs import shapesets
from libreyolo.kernels import register, settings, unregister
from libreyolo.kernels.attention.ms_deform_attn import (
    ms_deform_attn_ragged,
    ms_deform_attn_ragged_portable,
)
from libreyolo.kernels.prepared import Prepared

SLOT = "ms_deform_attn_ragged"
MARK = 54321.0
CASE = next(c for c in shapesets.load(CATALOGUE[SLOT].shapes) if c.name == "d_fine_mini")


class Plan(Prepared):
    __slots__ = ()


class RecordingImpl:
    """The newest implementation of the slot; records the plan each call received and returns a
    constant no computation produces, so the output shows whether it ran."""

    def __init__(self):
        self.plans = []
        self.answer = Plan()

    def accepts(self, *args):
        return self.answer

    def __call__(self, value, spatial_shapes, locations, weights, points, method, *,
                 prepared=None):
        self.plans.append(prepared)
        return value.new_full((value.shape[0], locations.shape[1],
                               value.shape[2] * value.shape[3]), MARK)


@pytest.fixture
def impl(monkeypatch):
    for variable in (settings.KERNELS, settings.LEGACY_KERNELS):
        monkeypatch.delenv(variable, raising=False)
    recording = RecordingImpl()
    register(SLOT, recording, name="recording_for_tests", accepts=recording.accepts)
    yield recording
    unregister(SLOT, "recording_for_tests")


def test_an_implementation_that_takes_the_input_runs_with_the_plan_accepts_made(impl):
    out = ms_deform_attn_ragged(*draw_inputs(CASE.params))
    assert torch.all(out == MARK)
    assert impl.plans == [impl.answer]


def test_a_declined_input_runs_the_portable_path(impl):
    impl.answer = "declined for this test"
    args = draw_inputs(CASE.params)
    torch.testing.assert_close(ms_deform_attn_ragged(*args), ms_deform_attn_ragged_portable(*args),
                               rtol=0, atol=0)
    assert impl.plans == []


def test_a_traced_graph_holds_the_portable_path(impl):
    value, shapes, locations, weights, points, method = draw_inputs(CASE.params)
    traced = torch.jit.trace(
        lambda v, loc, w: ms_deform_attn_ragged(v, shapes, loc, w, points, method),
        (value, locations, weights), check_trace=False)  # the check re-runs it eagerly
    assert impl.plans == []
    torch.testing.assert_close(traced(value, locations, weights),
                               ms_deform_attn_ragged_portable(value, shapes, locations, weights,
                                                              points, method))

"""Fixtures: a recording stand-in implementation of the ms_deform_attn slot."""

from __future__ import annotations

import pytest
import torch

from libreyolo.kernels import register, settings, unregister

FAKE = "fake_for_tests"


class RecordingImpl:
    """Registered as the newest ms_deform_attn implementation; records what reaches it.

    It returns a constant that no real computation produces, so a test can tell from the output
    alone whether the slot ran.
    """

    MARK = 12345.0

    def __init__(self):
        self.calls = []
        self.eligible = True
        self.decline = None

    def __call__(self, value, spatial_shapes, sampling_locations, attention_weights):
        self.calls.append((value, spatial_shapes, sampling_locations, attention_weights))
        batch, _, heads, channels = value.shape
        return value.new_full((batch, sampling_locations.shape[1], heads * channels), self.MARK)


@pytest.fixture
def fake_impl(monkeypatch):
    for variable in (settings.KERNELS, settings.LEGACY_KERNELS):
        monkeypatch.delenv(variable, raising=False)
    impl = RecordingImpl()
    register("ms_deform_attn", impl, name=FAKE, predicate=lambda: impl.eligible,
             accepts=lambda *args: impl.decline)
    yield impl
    unregister("ms_deform_attn", FAKE)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)

"""``profile_compile.selection_stages`` times the registry's selection by stage and leaves the
registry as it found it (on CPU: the reference answers, so its run is the time spent)."""

from __future__ import annotations

import torch

from benchmarks.profiles import profile_compile
from libreyolo.kernels import capabilities, ops, registry


def test_the_stages_add_up_within_the_call_and_the_registry_is_restored():
    before = (registry.run_selected, registry._eligible, capabilities.Capabilities.decline,
              registry._DECLARED["fake_quant_fp8"])
    stages = profile_compile.selection_stages(lambda t: ops.fake_quant_fp8(t), torch.randn(8, 8),
                                              "fake_quant_fp8", calls=50)
    assert set(stages) == {"call", "inputs", *profile_compile.STAGES}
    assert stages["inputs"] == 1  # the one input tensor, every call
    assert stages["fn"] > 0 and stages["eligible"] > 0  # the reference ran, through _eligible
    assert stages["accepts"] == 0 and stages["fits"] == 0  # a reference has neither
    assert stages["call"] >= stages["selected"] >= stages["fn"]
    assert (registry.run_selected, registry._eligible, capabilities.Capabilities.decline,
            registry._DECLARED["fake_quant_fp8"]) == before


class _Synchronizing(torch.nn.Module):
    def forward(self, x):
        raise RuntimeError("called a synchronizing CUDA operation")


def test_a_synchronizing_call_is_named_by_our_innermost_frames():
    """``synchronizes`` says where a call synchronized: the frames of this repository's code on
    the way to the raising call, innermost first, torch's own (``Module.__call__``) left out."""
    try:
        _Synchronizing()(torch.ones(1))
    except RuntimeError as exc:
        where = profile_compile.frames_in_repository(exc)
    innermost, caller = where.split(" <- ")
    assert innermost.startswith("tests/benchmarks/test_profile_compile.py:")
    assert innermost.endswith(" forward")
    assert caller.endswith(" test_a_synchronizing_call_is_named_by_our_innermost_frames")
    assert profile_compile.frames_in_repository(RuntimeError("no traceback")) == "no frame of ours"

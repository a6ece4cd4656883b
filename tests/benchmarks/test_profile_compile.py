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

"""timestamps_ms_deform_attn.py on the CPU (launches stubbed by this folder's ``conftest.py``,
as for ``test_host_path.py``): every segment is measured for every step, and every wrapper the
tool puts around torch's allocations, the Launcher and the autograd Functions is gone afterwards
(one left behind would slow, or stamp, every later call in the process)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")
pytest.importorskip("pytest_benchmark")

from benchmarks.bench.bench_ms_deform_attn import _NoAutogradWork  # noqa: E402
from benchmarks.profiles import timestamps_ms_deform_attn as tool  # noqa: E402
from conformance.inputs.ms_deform_attn_cases import load_cases  # noqa: E402
from libreyolo.kernels import triton_launch  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn.triton_provider import (  # noqa: E402
    _MSDeformAttnFunction,
)


def _wrapped_places() -> tuple:
    return (torch.Tensor.__dict__.get("new_zeros"), torch.Tensor.__dict__.get("new_empty"),
            torch.empty_like, triton_launch.Launcher.__dict__["__call__"],
            _MSDeformAttnFunction.__dict__["backward"], _NoAutogradWork.__dict__["backward"])


def test_every_segment_is_measured_and_every_wrapper_removed(launches_stubbed):
    before = _wrapped_places()
    case = {c.name: c for c in load_cases()}["levels_1x1"]
    measured = tool.measure(case, None, steps=3, device="cpu", warmup=1)
    assert _wrapped_places() == before
    assert set(measured) == {"ours", "no work"}
    shared = ["forward (grad mode)", "backward() to the Function's backward",
              "the Function's backward", "its end to backward() returning"]
    parts = {side: [f"  {side}: {label}" for label in (*tool.COUNTED, tool.REST[side])]
             for side in ("forward", "backward")}
    assert set(measured["ours"]) == set(shared + parts["forward"] + parts["backward"])
    assert list(measured["no work"]) == shared
    for rows in measured.values():
        assert all(len(values) == 3 and min(values) >= 0 for values in rows.values())
    for side, whole in (("forward", "forward (grad mode)"),
                        ("backward", "the Function's backward")):
        steps = zip(*(measured["ours"][part] for part in parts[side]), strict=True)
        assert [sum(step) for step in steps] == pytest.approx(measured["ours"][whole])
    # this small case's forward allocates the backward's buffers (GRADIENTS_IN_FORWARD_BELOW)
    assert min(measured["ours"]["  forward: empty_like"]) > 0
    assert max(measured["ours"]["  backward: empty_like"]) == 0
    assert max(measured["ours"]["  backward: new_zeros"]) == 0

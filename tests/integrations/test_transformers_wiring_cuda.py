"""The wiring on a CUDA GPU with the Triton kernels: every family's default configuration at its
input size, batch 1 and 8, float32 and bfloat16 autocast. Each real call a wired site makes is
within the slot's bounded contract against transformers' own core in float64 (output and input
gradients), and the wired model's outputs match the stock model's
(``detectors.assert_same_detections``: query by query, with the stock's selection where the queries
are selected after the sites), within ``detectors.model_tolerance``, measured on the stock model
before it is wired: a multiple of how far the stock model's outputs move with every site's output
perturbed within the slot's contract (a few more forwards, same dtype, batch and inputs; under the
stock's selection for the Grounding DINOs), except for the Grounding DINOs in bf16, held to a
multiple of the stock model's own bf16 error against its float32 forward."""

import contextlib
import os

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                       reason="compiled kernels cannot share a process with the interpreter"),
]
pytest.importorskip("transformers", reason="the transformers extra is not installed")
pytest.importorskip("triton", reason="the triton extra is not installed")

import libreyolo.integrations.transformers as wiring  # noqa: E402
from libreyolo.kernels import active  # noqa: E402

from .detectors import (  # noqa: E402
    Recorder,
    Run,
    assert_same_detections,
    build,
    call_errors,
    load_families,
    model_tolerance,
    under_stock_selection,
)

FULL = load_families("full")


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("family", FULL.values(), ids=lambda f: f.name)
def test_a_wired_default_detector_runs_our_kernels_within_the_bound(family, batch, dtype,
                                                                    monkeypatch):
    assert active()[family.slot] in ("triton", "hub"), active()
    stock, arguments = build(family, batch=batch, device="cuda")
    autocast = (torch.autocast("cuda", torch.bfloat16) if dtype == "bf16"
                else contextlib.nullcontext())
    with torch.no_grad(), autocast:
        expected = stock(**arguments)
    tolerance = model_tolerance(family, dtype, stock, arguments, expected)  # the stock's, unwired
    report = wiring.wire_deformable_attention(stock)
    assert len(report.wired) == family.sites and not report.left, report
    recorder = Recorder(monkeypatch)
    with torch.no_grad(), autocast:
        got = stock(**arguments)
    calls = list(recorder.calls)  # checking calls the sites again
    assert len(calls) == family.sites and recorder.declined == 0
    for index in (0, len(calls) - 1):  # the first and last sites of the model
        for name, error, limit in call_errors(family, calls[index]):
            assert error <= limit, f"call {index}: {name} error {error:.3g} over {limit:.3g}"
    with torch.no_grad(), autocast:
        got = Run(got, under_stock_selection(family, stock, arguments, expected))
    assert_same_detections(family, got, expected, tolerance)

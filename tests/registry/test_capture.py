"""``libreyolo.capture`` answers what torch answers: every accelerated implementation asks it on
every call, so it reads torch's ONNX-export flags directly (``_in_onnx_export``); these tests hold
it to the public ``torch.onnx.is_in_onnx_export`` inside real exports."""

from __future__ import annotations

import pytest
import torch

from libreyolo import capture


class _Probe(torch.nn.Module):
    """Records, at each forward: is_capturing(), our ONNX flag, torch's ONNX flag."""

    def __init__(self):
        super().__init__()
        self.seen: list[tuple[bool, bool, bool]] = []

    def forward(self, x):
        self.seen.append((capture.is_capturing(), capture._in_onnx_export(),
                          torch.onnx.is_in_onnx_export()))
        return x * 2


def test_eager_is_not_capturing():
    probe = _Probe()
    probe(torch.ones(2))
    assert probe.seen == [(False, False, False)]


def test_every_forward_inside_a_torchscript_onnx_export_is_capturing(tmp_path):
    pytest.importorskip("onnx")
    probe = _Probe()
    torch.onnx.export(probe, (torch.ones(2),), str(tmp_path / "probe.onnx"), dynamo=False)
    assert probe.seen and all(seen == (True, True, True) for seen in probe.seen), probe.seen
    probe.seen.clear()
    probe(torch.ones(2))
    assert probe.seen == [(False, False, False)]


def test_the_dynamo_exporters_flag_is_read_as_torch_reads_it(monkeypatch):
    """The dynamo exporter's forward runs inside torch.export (side effects are not replayed, so
    a probe cannot watch it): set the flag that exporter sets and compare."""
    flags = pytest.importorskip("torch.onnx._internal.exporter._flags")
    monkeypatch.setattr(flags, "_is_onnx_exporting", True)
    assert torch.onnx.is_in_onnx_export() and capture._in_onnx_export()
    assert capture.is_capturing()
    monkeypatch.setattr(flags, "_is_onnx_exporting", False)
    assert not torch.onnx.is_in_onnx_export() and not capture._in_onnx_export()

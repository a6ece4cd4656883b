"""The direct relaunch of compiled Triton kernels (``libreyolo.kernels.triton_launch``), on CUDA.

A kept compiled kernel must only ever run arguments Triton would have compiled it for: a pointer
that loses its 16-byte alignment, or a size that loses its divisibility by 16, needs another
specialization, and relaunching the old one could read misaligned vectors or skip a mask. Each
test alternates such inputs through the fake-quant slot and compares every output with the
reference, bit for bit; one counts Triton's own launch path to show the shortcut is taken, one
registers a launch hook (as a profiler does) and expects Triton's full path to see every launch.

Collected with every test, skipped without CUDA; on the GPU machine:
    python -m pytest tests/registry/test_triton_launch_cuda.py -v -p no:cacheprovider
"""

from __future__ import annotations

import os

import pytest
import torch

from libreyolo.kernels import dispatch, registered
from libreyolo.quant.fake_quant import fake_quant_int8_affine

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1",
                       reason="compiled kernels cannot share a process with the interpreter"),
]

SLOT = "fake_quant_int8_affine"


@pytest.fixture
def kernel():
    """The fake-quant kernel (its module loads on the first call), with Triton's own launch path
    counted."""
    assert [i.name for i in registered(SLOT)][0] == "triton"
    dispatch(SLOT, torch.ones(4, device="cuda"), torch.tensor(0.1, device="cuda"), 0)
    from libreyolo.kernels.quant.simulate import kernels

    return kernels.fake_quant_kernel


def _case(base: torch.Tensor, offset: int, n: int) -> torch.Tensor:
    return base[offset:offset + n]


def _check(x: torch.Tensor) -> None:
    scale = torch.tensor(0.05, device="cuda")
    got = dispatch(SLOT, x, scale, 3)
    want = fake_quant_int8_affine(x.cpu(), scale.cpu(), 3)
    assert torch.equal(got.cpu().view(torch.int32), want.view(torch.int32)), \
        f"offset {x.storage_offset()}, {x.numel()} elements"


@pytest.mark.parametrize("order", ["aligned first", "misaligned first"])
def test_alignment_and_divisibility_change_the_kernel(kernel, order):
    base = torch.randn(5000, device="cuda") * 4
    shapes = [(0, 4096), (1, 4096), (0, 4093), (3, 4093), (4, 4096), (0, 4096)]
    if order == "misaligned first":
        shapes = shapes[1:] + shapes[:1]
    for _ in range(3):  # later rounds relaunch kept kernels
        for offset, n in shapes:
            _check(_case(base, offset, n))


def test_repeated_calls_skip_tritons_launch_path(kernel, monkeypatch):
    x = torch.randn(256, 256, device="cuda")
    _check(x)  # compiled and kept
    calls = []
    full_path = kernel.run

    def counted(*args, **kwargs):
        calls.append(1)
        return full_path(*args, **kwargs)

    monkeypatch.setattr(kernel, "run", counted)
    for _ in range(5):
        _check(x)
    assert calls == [], "a kept specialization went through JITFunction.run again"


def test_a_launch_hook_sees_every_launch(kernel):
    from triton import knobs

    x = torch.randn(256, 256, device="cuda")
    _check(x)
    seen = []

    def hook(metadata):
        seen.append(metadata)

    knobs.runtime.launch_enter_hook.add(hook)
    try:
        for _ in range(3):
            _check(x)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert len(seen) == 3

"""``libreyolo.kernels.device_zeros``: a float32 buffer of zeros, from the driver's memset on CUDA
(on the current stream, and again on every replay of a captured graph), from ``zero_`` elsewhere.

Each test first leaves NaN in memory the allocator hands out again, so a buffer that was not
written fails it."""

from __future__ import annotations

import pytest
import torch

from libreyolo.kernels import device_zeros


def _reused_after_nan(like: torch.Tensor) -> torch.Tensor:
    """``zeros_float32(like)`` right after freeing a NaN-filled buffer of the same size."""
    garbage = torch.full(like.shape, float("nan"), dtype=torch.float32, device=like.device)
    del garbage
    return device_zeros.zeros_float32(like)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_off_cuda_the_buffer_is_zeroed_float32_shaped_like_the_input(dtype):
    like = torch.randn(3, 50, 7).to(dtype)
    out = _reused_after_nan(like)
    assert out.dtype == torch.float32 and out.shape == like.shape and out.is_contiguous()
    assert torch.equal(out, torch.zeros(like.shape))


def test_without_the_driver_library_cuda_buffers_are_zeroed_by_torch(monkeypatch):
    monkeypatch.setattr(device_zeros, "_memset_d32", lambda: None)
    assert torch.equal(_reused_after_nan(torch.ones(10)), torch.zeros(10))


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
@pytest.mark.gpu
def test_on_cuda_the_driver_memset_zeroes_the_buffer(monkeypatch):
    assert device_zeros._memset_d32() is not None, "libcuda's cuMemsetD32Async not found"
    monkeypatch.setattr(torch.Tensor, "zero_", lambda self: pytest.fail("zero_ was called"))
    like = torch.empty(3, 1000, 8, 32, device="cuda", dtype=torch.float16)
    out = _reused_after_nan(like)
    assert torch.equal(out, torch.zeros(like.shape, device="cuda"))


@cuda
@pytest.mark.gpu
def test_the_memset_runs_on_the_current_stream_and_again_on_each_graph_replay():
    like = torch.empty(4096, device="cuda")
    source = torch.zeros(4096, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = _reused_after_nan(like).add_(source)  # warm-up on a side stream
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            out = device_zeros.zeros_float32(like).add_(source)
    torch.cuda.current_stream().wait_stream(stream)
    for value in (1.0, 2.5):
        source.fill_(value)
        out.fill_(float("nan"))  # what the replay must overwrite
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, source)

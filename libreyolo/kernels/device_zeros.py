"""A fresh float32 buffer of zeros on CUDA from one driver memset, where ``zeros`` would launch a
fill kernel.

Backward kernels that accumulate with atomic adds (deformable attention's value gradient) need a
zeroed buffer every call, and autograd runs that backward on its device thread. There, on the
H200's host, ``new_zeros`` cost 24-30 µs a call (``new_empty`` 8-9 µs, then ``zero_``'s fill
kernel, set up through a TensorIterator), against 48-65 µs for Deformable DETR's whole backward
(``benchmarks/NOTES.md``, "MSDA v8"). ``cuMemsetD32Async`` on the current stream fills the same
bytes with the driver's memset: asynchronous, ordered on the stream as the fill kernel was, and
recorded as a memset node under CUDA-graph capture.

Without the driver library (not Linux, no NVIDIA driver), for a tensor off CUDA, or if the
driver refuses the call, the buffer is zeroed by ``zero_()`` as before: same bytes, slower.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch


@functools.cache
def _memset_d32():
    """The driver's ``cuMemsetD32Async`` (CUDA driver API), or None where it cannot be loaded."""
    try:
        driver = ctypes.CDLL("libcuda.so.1")
        memset = driver.cuMemsetD32Async
    except (OSError, AttributeError):
        return None
    # CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t n, CUstream stream)
    memset.argtypes = (ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p)
    memset.restype = ctypes.c_int
    raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return None if raw_stream is None else (memset, raw_stream)


def zeros_float32(like: torch.Tensor) -> torch.Tensor:
    """A contiguous float32 tensor of zeros shaped like ``like``, on its device."""
    out = like.new_empty(like.shape, dtype=torch.float32)
    elements = out.numel()
    if out.is_cuda and elements:
        found = _memset_d32()
        if found is not None:
            memset, raw_stream = found
            if memset(out.data_ptr(), 0, elements, raw_stream(out.get_device())) == 0:
                return out
    return out.zero_()


#: Providers whose gradients use this module list it among their sources (it decides what their
#: accumulating buffers start from, so a change here stales their parity records).
SOURCE = str(Path(__file__).resolve())

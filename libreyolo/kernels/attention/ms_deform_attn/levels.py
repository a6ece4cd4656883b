"""The levels' ``(H, W)`` sizes, read and checked once, on the host and on the device.

``spatial_shapes`` arrives as ``(H, W)`` pairs of Python ints or as a ``(levels, 2)`` int64 tensor,
often on the GPU. Reading a GPU tensor on the host is a sync, so what a tensor held is remembered
under everything that could have changed it without a new read: the same tensor object, alive,
at the same version (an in-place write bumps ``_version``, through any view), with the same
storage address, offset, shape and strides (a ``.data =`` swap keeps the version but not the
storage). An inference tensor (made under ``torch.inference_mode``) has no version counter, so
it is read on every call (a sync on a GPU: pass pairs, or a tensor made outside inference mode,
to avoid it). Writes that bypass torch's version counter (through a NumPy or DLPack alias of the
storage) are not seen. Pairs are known on the host and are copied to a device once per device, so
the kernels, which read the sizes on the device, take either layout without a sync after the
first call. Nothing is remembered while a graph is captured (trace, compile, export): a captured
graph must not depend on this process's memory.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence

import torch

from libreyolo.capture import checking_fake, is_capturing, kernels_traced

SpatialShapes = torch.Tensor | Sequence[Sequence[int]]
Levels = tuple[tuple[int, int], ...]

# Bounds on what is remembered: a model holds a handful of level layouts, and a dead or evicted
# entry only costs one more read.
MAX_REMEMBERED = 64

_lock = threading.Lock()
# id(tensor) -> (weak reference to it, its stamp when read, its levels)
_read: dict[int, tuple[weakref.ref, tuple, Levels]] = {}
# (levels, device) -> int64 tensor of the levels on that device
_copies: dict[tuple[Levels, torch.device], torch.Tensor] = {}
# (levels, device, dtype) -> the levels' (W, H) in dtype on device, shaped for offsets
_normalizers: dict[tuple[Levels, torch.device, torch.dtype], torch.Tensor] = {}


def _remember(store: dict, key, entry) -> None:
    with _lock:
        store.pop(key, None)
        store[key] = entry
        while len(store) > MAX_REMEMBERED:
            store.pop(next(iter(store)))


def _checked(pairs) -> Levels:
    if not pairs:
        raise ValueError("spatial_shapes must describe at least one level, got none")
    if any(h < 1 or w < 1 for h, w in pairs):
        raise ValueError(f"spatial_shapes must be positive (H, W) pairs, got {list(pairs)}")
    return tuple((int(h), int(w)) for h, w in pairs)


def _read_tensor(spatial_shapes: torch.Tensor, values: bool = True) -> Levels | None:
    if spatial_shapes.dtype != torch.int64:
        raise TypeError(f"spatial_shapes must be an int64 tensor, got dtype {spatial_shapes.dtype}")
    if spatial_shapes.layout != torch.strided:
        raise TypeError(f"spatial_shapes must be a dense (strided) tensor, got layout "
                        f"{spatial_shapes.layout}")
    if spatial_shapes.dim() != 2 or spatial_shapes.shape[1] != 2:
        raise ValueError(
            f"spatial_shapes must have shape (levels, 2), got {tuple(spatial_shapes.shape)}")
    if not values:
        return None
    if spatial_shapes.is_meta:
        raise ValueError("spatial_shapes must hold the level sizes, got a meta tensor (no data): "
                         "pass (H, W) pairs to describe levels without data")
    return _checked(spatial_shapes.tolist())


def _stamp(tensor: torch.Tensor) -> tuple | None:
    """What identifies the values a tensor holds without reading them: its version, storage
    address, offset, shape and strides; None for an inference tensor, which has no version
    counter (an in-place change to one could not be seen: it is read every call)."""
    if tensor.is_inference():
        return None
    return (tensor._version, tensor.data_ptr(), tensor.storage_offset(), tensor.shape,
            tensor.stride(), tensor.dtype, tensor.device)


def remembered(spatial_shapes: torch.Tensor) -> Levels | None:
    """The levels read from this tensor, if it cannot have changed since (``_stamp``), else
    None (not read yet, changed, or an inference tensor)."""
    entry = _read.get(id(spatial_shapes))
    if entry is not None and entry[0]() is spatial_shapes and \
            entry[1] == _stamp(spatial_shapes):
        return entry[2]
    return None


def level_shapes(spatial_shapes: SpatialShapes) -> Levels | None:
    """The levels' ``(H, W)`` as Python ints from a ``(levels, 2)`` int64 tensor or pairs.

    Raises ``TypeError`` for a tensor that is not int64 and dense, or anything but pairs of
    ints (a bool is not a size), and ``ValueError`` for a tensor not shaped ``(levels, 2)`` or
    without data (meta), no levels, or a size below 1. A tensor is read (a
    host sync on a GPU) once while it stays unchanged (module docstring); an inference tensor
    every call. While an operator's fake kernel
    checks arguments (``checking_fake``) a tensor is not read at all, and the answer is None.
    """
    if isinstance(spatial_shapes, torch.Tensor):
        if checking_fake():  # a fake tensor has no sizes to read: the real call reads them
            _read_tensor(spatial_shapes, values=False)
            return None
        if is_capturing():
            return _read_tensor(spatial_shapes)
        levels = remembered(spatial_shapes)
        if levels is None:
            levels = _read_tensor(spatial_shapes)
            stamp = _stamp(spatial_shapes)
            if stamp is not None:
                _remember(_read, id(spatial_shapes),
                          (weakref.ref(spatial_shapes), stamp, levels))
        return levels
    return _checked(_pairs(spatial_shapes))


def _pairs(spatial_shapes) -> list[tuple[int, int]]:
    """``spatial_shapes`` as a list of ``(H, W)`` tuples of ints; a TypeError naming it for
    anything else (an int, a string, pairs of floats or bools, pairs of three)."""
    wanted = "spatial_shapes must be a (levels, 2) int64 tensor or (H, W) pairs of ints"
    if isinstance(spatial_shapes, (str, bytes)) or not isinstance(spatial_shapes, Sequence):
        raise TypeError(f"{wanted}, got {type(spatial_shapes).__name__}")
    pairs = []
    for pair in spatial_shapes:
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Sequence) or len(pair) != 2 \
                or not all(type(n) is int or (isinstance(n, int) and not isinstance(n, bool))
                           for n in pair):
            raise TypeError(f"{wanted}, got {spatial_shapes!r}")
        pairs.append(tuple(pair))
    return pairs


def device_shapes(levels: Levels, device: torch.device) -> torch.Tensor | None:
    """The ``(levels, 2)`` int64 tensor of ``levels`` on ``device``, copied there once.

    The copy goes through pinned memory without blocking, so it is no host sync. Returns None
    when it would have to be made during a CUDA graph capture (warm up outside the capture).
    The tensor is shared: callers must not change it in place.
    """
    key = (levels, device)
    shapes = _copies.get(key)
    if shapes is not None:
        return shapes
    if device.type == "cuda":
        if torch.cuda.is_current_stream_capturing():
            return None
        shapes = torch.tensor(levels, dtype=torch.int64).pin_memory().to(device, non_blocking=True)
    else:
        shapes = torch.tensor(levels, dtype=torch.int64, device=device)
    if not is_capturing():
        _remember(_copies, key, shapes)
    return shapes


def known_levels(spatial_shapes: SpatialShapes) -> Levels | None:
    """The levels without reading a device: pairs checked (``level_shapes``), a tensor's as
    read before at its current version (``remembered``), else None."""
    if isinstance(spatial_shapes, torch.Tensor):
        return remembered(spatial_shapes)
    return level_shapes(spatial_shapes)


def offset_normalizer(levels: Levels, device: torch.device,
                      dtype: torch.dtype) -> torch.Tensor | None:
    """Each level's ``(W, H)`` in ``dtype`` on ``device``, shaped ``(1, 1, 1, levels, 1, 2)`` to
    divide ``(B, len_q, heads, levels, points, 2)`` pixel offsets into fractions of the level:
    made once (``device_shapes(levels).to(dtype).flip(-1)``, the arithmetic the module's
    uncached path does), where making it every call cost a decoder layer two launches.

    None while a graph is captured by trace, compile or export (the graph must compute it from
    its own ``spatial_shapes``) and when it would first be made during a CUDA graph capture.
    The tensor is shared: callers must not change it in place.
    """
    if is_capturing():
        return None
    key = (levels, device, dtype)
    normalizer = _normalizers.get(key)
    if normalizer is None:
        shapes = device_shapes(levels, device)
        if shapes is None:
            return None
        normalizer = shapes.to(dtype).flip(-1)[None, None, None, :, None, :]
        _remember(_normalizers, key, normalizer)
    return normalizer


def traced_on(spatial_shapes: SpatialShapes, device: torch.device) -> torch.Tensor | None:
    """While a compiled graph traces the kernels (``libreyolo.capture.tracing_kernels``), a
    ``spatial_shapes`` tensor on ``device``, from which the kernels read the sizes on the device:
    a traced tensor has no values to read on the host (one made from pairs elsewhere is copied
    by the graph). None otherwise: pairs, or no trace."""
    if not (kernels_traced() and isinstance(spatial_shapes, torch.Tensor)):
        return None
    return spatial_shapes if spatial_shapes.device == device else spatial_shapes.to(device)

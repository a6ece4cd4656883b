"""Memory layouts the suite feeds implementations, and bit-level views of tensors.

A `gapped` view leaves unused elements between rows and fills them with sentinels (NaN, a huge
finite value, -inf in turn; integer tensors get their extremes and 0x5A): an implementation
that reads a gap or ignores strides changes its output, one that writes a gap changes the
input's storage. The finite sentinel matters because
the references take the amax over *finite* elements only, which would hide a NaN read.
"""

from __future__ import annotations

import hashlib

import torch

GAP_SENTINELS = (float("nan"), 1.0e30, float("-inf"))
_BITS_DTYPE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def apply_layout(x: torch.Tensor, layout: str) -> torch.Tensor:
    """The same values as `x` in the requested layout (a view into a larger, sentinel-filled base
    for `gapped`; reversed strides for `transposed`, a stride-2 view for tensors below 2-D)."""
    if layout == "contiguous":
        return x.contiguous()
    if layout == "gapped" or x.dim() < 2:
        return _gapped(x)
    if layout == "transposed":
        order = tuple(reversed(range(x.dim())))
        return x.permute(order).contiguous().permute(order)
    raise ValueError(f"layout: expected contiguous, gapped or transposed, got {layout!r}")


def _gapped(x: torch.Tensor) -> torch.Tensor:
    shape = tuple(x.shape) if x.dim() else (1,)
    padded = (*shape[:-1], 2 * shape[-1] + 1)
    base = torch.empty(padded, dtype=x.dtype, device=x.device)
    flat = base.view(-1)
    sentinels = GAP_SENTINELS if x.dtype.is_floating_point else _int_sentinels(x.dtype)
    for i, value in enumerate(sentinels):
        flat[i::len(sentinels)] = value
    view = base[..., 1::2][..., : shape[-1]]
    view.copy_(x.reshape(shape))
    return view if x.dim() else view.view(())


def _int_sentinels(dtype: torch.dtype) -> tuple[int, ...]:
    info = torch.iinfo(dtype)
    return (info.max, info.min, 0x5A)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns as integers (contiguous, on CPU): NaN payloads and -0 count."""
    t = t.detach().cpu().contiguous()
    if t.dtype.is_floating_point:
        return t.view(_BITS_DTYPE[t.element_size()])
    return t


def storage_snapshot(t: torch.Tensor) -> torch.Tensor:
    """The bits of the whole storage behind `t`, gaps included."""
    base = t._base if t._base is not None else t
    return bits(base.detach().clone())


def digest(t: torch.Tensor | tuple) -> str:
    """A stable digest of a tensor's dtype, shape and bits (for records CPU CI recomputes); of a
    tuple of tensors (a slot with several outputs), of each part in order."""
    parts = t if isinstance(t, tuple) else (t,)
    h = hashlib.sha256()
    for part in parts:
        h.update(f"{part.dtype}|{tuple(part.shape)}|".encode())
        h.update(bits(part).numpy().tobytes())
    return h.hexdigest()

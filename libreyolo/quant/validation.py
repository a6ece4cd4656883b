"""Argument checks shared by the reference ops and every accelerated implementation.

Each check raises TypeError (wrong kind of thing) or ValueError (right kind, wrong value) with a
message that names the argument and says what was expected, so every implementation of a slot
rejects the same inputs with the same words. Only the checks of user-given scales and zero points
read tensor values (a host sync), once per tensor version (``HostReads``): a later call with the
same, unmodified tensor reads nothing, so steady-state calls never synchronize. The scale check
skips the read while a graph is captured; nothing here runs on the hot path of computed scales.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable

import torch

from libreyolo.capture import host_reads_forbidden
from libreyolo.quant.formats import FP8_FORMATS, GROUPED_INT_BITS, INT8_AFFINE_MAX, INT8_AFFINE_MIN

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_float_tensor(name: str, x: object) -> torch.Tensor:
    """A dense float32, float16 or bfloat16 tensor (the dtypes the references compute from)."""
    check_dense(name, x)
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float32, float16 or bfloat16, got {_dtype_name(x)}")
    return x


def check_dense(name: str, x: object) -> torch.Tensor:
    """A tensor with the strided layout: sparse and other layouts have no elementwise kernels
    here, and would fail deep inside torch."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.layout != torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout "
                        f"{str(x.layout).removeprefix('torch.')}")
    return x


def check_has_data(name: str, x: torch.Tensor) -> None:
    """A tensor whose values are read (checked on the host) must have some: a meta tensor
    describes a shape only."""
    if x.is_meta:
        raise ValueError(f"{name} must hold values (they are checked), got a meta tensor")


def check_rank(name: str, x: torch.Tensor, ndim: int) -> None:
    if x.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(x.shape)}")


def check_min_rank(name: str, x: torch.Tensor, ndim: int) -> None:
    if x.dim() < ndim:
        raise ValueError(
            f"{name} must have at least {ndim} dimension(s), got shape {tuple(x.shape)}"
        )


def check_axis(name: str, axis: object, ndim: int) -> int:
    """An int in [-ndim, ndim); returns it normalized to [0, ndim)."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"{name} must be an int, got {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise ValueError(
            f"{name} must be in [{-ndim}, {ndim - 1}] for a {ndim}-D tensor, got {axis}"
        )
    return axis % ndim


def check_bits(name: str, bits: object) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int):
        raise TypeError(f"{name} must be an int, got {type(bits).__name__}")
    if bits not in GROUPED_INT_BITS:
        raise ValueError(f"{name} must be one of {GROUPED_INT_BITS}, got {bits}")
    return bits


def check_positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value}")
    return value


def check_fp8_format(name: str, fmt: object) -> str:
    if not isinstance(fmt, str):
        raise TypeError(f"{name} must be a string, one of {tuple(FP8_FORMATS)}, got "
                        f"{type(fmt).__name__} {fmt!r}")
    if fmt not in FP8_FORMATS:
        raise ValueError(f"{name} must be one of {tuple(FP8_FORMATS)}, got {fmt!r}")
    return fmt


def check_fp8_arguments(x, scale, fmt, axis, x_name: str = "x") -> tuple[str, str, int | None]:
    """fake_quant_fp8's arguments: (fmt, scale mode, normalized axis).

    Scale modes: "row" (scale None, dynamic per row along the last dim; axis must be None),
    "tensor" (a 0-dim scale, axis None), "channel" (a 1-D scale of length x.shape[axis]).
    """
    check_float_tensor(x_name, x)
    fmt = check_fp8_format("fmt", fmt)
    if scale is None:
        if axis is not None:
            raise ValueError(
                f"axis must be None when scale is None (dynamic scaling is per row along the "
                f"last dim), got {axis}"
            )
        check_min_rank(x_name, x, 1)
        return fmt, "row", None
    if axis is None:
        check_scale("scale", scale, (), x.device)
        return fmt, "tensor", None
    check_min_rank(x_name, x, 1)
    axis = check_axis("axis", axis, x.dim())
    check_scale("scale", scale, (x.shape[axis],), x.device)
    return fmt, "channel", axis


def check_scale(
    name: str, scale: object, shape: tuple[int, ...], device: torch.device
) -> torch.Tensor:
    """A user-given float32 scale of exactly `shape` on `device`, finite and non-negative.

    Exact shape, not broadcastable: a scale of the wrong length is a bug, never a broadcast.
    Zero is allowed (it quantizes everything to +0.0); negative, NaN and inf are not.
    """
    check_dense(name, scale)
    if scale.dtype != torch.float32:
        raise TypeError(f"{name} must be float32, got {_dtype_name(scale)}")
    if tuple(scale.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(scale.shape)}")
    if scale.device != device:
        raise ValueError(f"{name} must be on {device} (the input's device), got {scale.device}")
    if scale.numel() == 0 or HOST_READS.known(scale):
        return scale
    if host_reads_forbidden():  # a graph has no host to branch on: checked when run eagerly
        return scale
    check_has_data(name, scale)
    HOST_READS.read(scale, lambda t: _check_scale_values(name, t))
    return scale


def _check_scale_values(name: str, scale: torch.Tensor) -> None:
    # One reduction kernel and one transfer (not one per elementwise test): NaN propagates
    # through aminmax, so `low >= 0` fails for NaN, -inf and negatives, and `high < inf` for
    # +inf; -0.0 passes, as it compares equal to 0.
    low, high = torch.stack(torch.aminmax(scale)).tolist()
    if not (low >= 0 and high < math.inf):
        bad = ~torch.isfinite(scale) | (scale < 0)
        raise ValueError(f"{name} must be finite and non-negative, got {_first(scale, bad)}")


class HostReads:
    """What the host read from a tensor, remembered for that tensor's current version.

    A tensor is known by identity, its version counter (bumped by every in-place write, through
    any view) and its storage address (``.data =`` swaps storage), so a value read once is read
    again only after the tensor changed. Entries leave with their tensor (a weak reference), so
    the table holds at most the live tensors read. Inference tensors have no version counter:
    they are read every time.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[weakref.ref, int, int, object]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _stamp(t: torch.Tensor) -> tuple[int, int] | None:
        if t.is_inference():
            return None
        return t._version, t.data_ptr()

    def known(self, t: torch.Tensor) -> bool:
        entry = self._entries.get(id(t))
        return entry is not None and entry[0]() is t and entry[1:3] == self._stamp(t)

    def read(self, t: torch.Tensor, read: Callable[[torch.Tensor], object]) -> object:
        """``read(t)``, or what it returned for this version of ``t``; an exception from
        ``read`` propagates and nothing is remembered."""
        entry = self._entries.get(id(t))
        stamp = self._stamp(t)
        if entry is not None and entry[0]() is t and entry[1:3] == stamp:
            return entry[3]
        value = read(t)
        if stamp is not None:
            key = id(t)

            def forget(ref: weakref.ref, key: int = key) -> None:
                with self._lock:
                    if key in self._entries and self._entries[key][0] is ref:
                        del self._entries[key]

            with self._lock:
                self._entries[key] = (weakref.ref(t, forget), *stamp, value)
        return value

    def __len__(self) -> int:
        return len(self._entries)


#: The one table of host reads (user-given scales and zero points).
HOST_READS = HostReads()


def check_zero_point(name: str, zero_point: object) -> int:
    """An int in [-128, 127]: a Python int or a 0-dim integer tensor (read once, on the host)."""
    if isinstance(zero_point, torch.Tensor):
        integer = not (zero_point.is_floating_point() or zero_point.is_complex()
                       or zero_point.dtype == torch.bool)
        if zero_point.dim() != 0 or not integer or zero_point.layout != torch.strided:
            raise TypeError(
                f"{name} must be a Python int or a 0-dim integer tensor, got a "
                f"{_dtype_name(zero_point)} tensor of shape {tuple(zero_point.shape)}"
            )
        check_has_data(name, zero_point)
        if not HOST_READS.known(zero_point) and host_reads_forbidden():
            raise ValueError(f"{name}: a tensor cannot be read while a graph is captured; "
                             "pass the zero point as a Python int")
        zero_point = HOST_READS.read(zero_point, lambda t: int(t.item()))
    elif isinstance(zero_point, bool) or not isinstance(zero_point, int):
        raise TypeError(
            f"{name} must be a Python int or a 0-dim integer tensor, "
            f"got {type(zero_point).__name__}"
        )
    if not INT8_AFFINE_MIN <= zero_point <= INT8_AFFINE_MAX:
        raise ValueError(
            f"{name} must be in [{INT8_AFFINE_MIN}, {INT8_AFFINE_MAX}], got {zero_point}"
        )
    return zero_point


def check_all_finite(name: str, x: torch.Tensor) -> None:
    """Packing stores codes, and no code means NaN or inf: reject them instead of inventing one."""
    check_has_data(name, x)
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        raise ValueError(f"{name} must be finite to be packed, got {_first(x, bad)}")


def _first(t: torch.Tensor, bad: torch.Tensor) -> str:
    """The first offending value and where it is, so a message points at the culprit."""
    index = tuple(int(i) for i in torch.nonzero(bad)[0])
    return f"{t[index].item()} at index {index}"


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")

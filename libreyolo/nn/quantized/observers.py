"""Observers: what calibration watches of a layer's input, and the static scale it gives.

An observer sees every calibration batch's input of one layer (``observe``, tensor ops on the
input's device: nothing is read on the host per batch) and gives the range ``(lo, hi)`` it
settled on (float32 0-dim tensors). ``input_qparams`` turns a range into the activation format's
calibrated values. Non-finite elements are ignored, as the fake-quant ops' own amax ignores them
(docs/quantization.md, rule 6).

- ``minmax``: the smallest and largest value seen;
- ``moving_average``: each batch's min and max, averaged exponentially (``averaging_constant``,
  the first batch taken as it is), as ``torch.ao``'s ``MovingAverageMinMaxObserver``;
- ``percentile``: each batch's ``100 - p`` and ``p`` percentiles (``percentile`` p, default
  99.99: the k-th smallest value, exact, no histogram), averaged over the batches; clips the
  outliers min/max keeps.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from libreyolo.quant.formats import E4M3, INT8_AFFINE_MAX, INT8_AFFINE_MIN
from libreyolo.quant.numerics import scale_from_amax


def _finite(x: torch.Tensor) -> torch.Tensor:
    flat = x.detach().reshape(-1).float()
    return flat[torch.isfinite(flat)]


class Observer:
    """Base class: ``observe(x)`` per batch, ``range()`` -> ``(lo, hi)`` or None if it saw no
    finite value. Subclasses implement ``_batch_range`` and may override ``_combine``."""

    name = "observer"

    def __init__(self) -> None:
        self._lo: torch.Tensor | None = None
        self._hi: torch.Tensor | None = None
        self.batches = 0

    def observe(self, x: torch.Tensor) -> None:
        values = _finite(x)
        if values.numel() == 0:
            return
        lo, hi = self._batch_range(values)
        if self._lo is None:
            self._lo, self._hi = lo, hi
        else:
            self._lo, self._hi = self._combine(self._lo, lo, self.batches, min), \
                self._combine(self._hi, hi, self.batches, max)
        self.batches += 1

    def _batch_range(self, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def _combine(self, old, new, seen: int, extreme) -> torch.Tensor:
        raise NotImplementedError

    def range(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        return None if self._lo is None else (self._lo, self._hi)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class MinMaxObserver(Observer):
    name = "minmax"

    def _batch_range(self, values):
        return torch.aminmax(values)

    def _combine(self, old, new, seen, extreme):
        return torch.minimum(old, new) if extreme is min else torch.maximum(old, new)


class MovingAverageObserver(Observer):
    name = "moving_average"

    def __init__(self, averaging_constant: float = 0.1) -> None:
        super().__init__()
        if not 0 < averaging_constant <= 1:
            raise ValueError(f"averaging_constant must be in (0, 1], got {averaging_constant!r}")
        self.averaging_constant = averaging_constant

    def _batch_range(self, values):
        return torch.aminmax(values)

    def _combine(self, old, new, seen, extreme):
        return old + self.averaging_constant * (new - old)

    def __repr__(self) -> str:
        return f"MovingAverageObserver(averaging_constant={self.averaging_constant})"


class PercentileObserver(Observer):
    name = "percentile"

    def __init__(self, percentile: float = 99.99) -> None:
        super().__init__()
        if not 50 < percentile <= 100:
            raise ValueError(f"percentile must be in (50, 100], got {percentile!r}")
        self.percentile = percentile

    def _batch_range(self, values):
        n = values.numel()
        k_hi = max(1, min(n, math.ceil(n * self.percentile / 100)))
        k_lo = n + 1 - k_hi
        return torch.kthvalue(values, k_lo).values, torch.kthvalue(values, k_hi).values

    def _combine(self, old, new, seen, extreme):
        return old + (new - old) / (seen + 1)  # the running mean of the batches' percentiles

    def __repr__(self) -> str:
        return f"PercentileObserver(percentile={self.percentile})"


OBSERVERS: dict[str, Callable[[], Observer]] = {
    "minmax": MinMaxObserver,
    "moving_average": MovingAverageObserver,
    "percentile": PercentileObserver,
}


def observer_factory(observer: str | Callable[[], Observer]) -> Callable[[], Observer]:
    """A name of ``OBSERVERS`` or a callable making an ``Observer`` -> a callable making one."""
    if isinstance(observer, str):
        if observer not in OBSERVERS:
            raise ValueError(f"unknown observer {observer!r}; the observers are "
                             f"{', '.join(OBSERVERS)}")
        return OBSERVERS[observer]
    if isinstance(observer, type) and issubclass(observer, Observer):
        return observer
    if callable(observer):
        return observer
    raise TypeError(f"observer must be an observer name or a callable returning an Observer, "
                    f"got {type(observer).__name__}")


_INT8_LEVELS = float(INT8_AFFINE_MAX - INT8_AFFINE_MIN)  # 255 steps between -128 and 127


def input_qparams(activation: str, lo: torch.Tensor, hi: torch.Tensor
                  ) -> tuple[torch.Tensor, int | None]:
    """The calibrated ``(input_scale, input_zero_point)`` of a static activation format for the
    range ``[lo, hi]``; the scale a float32 0-dim tensor on the range's device, the zero point
    a Python int (None for ``fp8_static``). Read on the host once, at the end of calibration.

    - ``int8_affine``: the range widened to hold 0 (so 0 is exact), ``scale = (hi - lo) / 255``
      (1 for an empty range), ``zero_point = clamp(-128 - round(lo / scale), -128, 127)``, as
      ``torch.ao``'s affine observers compute it;
    - ``fp8_static``: ``scale = max(|lo|, |hi|) / 448`` (1 for an amax of 0).
    """
    lo, hi = lo.float().reshape(()), hi.float().reshape(())
    if activation == "fp8_static":
        amax = torch.maximum(lo.abs(), hi.abs())
        return scale_from_amax(amax, E4M3.max_value), None
    if activation == "int8_affine":
        zero = torch.zeros((), dtype=torch.float32, device=lo.device)
        lo, hi = torch.minimum(lo, zero), torch.maximum(hi, zero)
        scale = scale_from_amax(hi - lo, _INT8_LEVELS)
        zero_point = INT8_AFFINE_MIN - torch.round(lo / scale)
        zero_point = int(torch.clamp(zero_point, INT8_AFFINE_MIN, INT8_AFFINE_MAX).item())
        return scale, zero_point
    raise ValueError(f"activation {activation!r} has no calibrated values")

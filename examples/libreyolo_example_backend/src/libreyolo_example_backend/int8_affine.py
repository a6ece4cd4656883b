"""Affine int8 fake quantization, written from the rules in LibreYOLO's docs/quantization.md.

q = clamp(round_half_even(x / scale) + zp, -128, 127); out = (q - zp) * scale, computed in float32
and rounded once to x's dtype. NaN gives the canonical quiet NaN; a zero scale gives +0.0. The
gradient passes where -128 <= round(x / scale) + zp <= 127 for finite x and a non-zero scale.
"""

from __future__ import annotations

import torch

from libreyolo.kernels import Capabilities, register
from libreyolo_example_backend.checks import check_scale, check_x
from libreyolo_example_backend.ste import fake_quantized

SLOT = "fake_quant_int8_affine"
QMIN, QMAX = -128, 127


def round_half_even(y: torch.Tensor) -> torch.Tensor:
    return torch.round(y)


def round_half_away(y: torch.Tensor) -> torch.Tensor:
    """The classic bug: C's round(), halves away from zero."""
    return torch.sign(y) * torch.floor(y.abs() + 0.5)


def _implementation(rounding):
    def fake_quant_int8_affine(x, scale, zero_point):
        check_x(x)
        check_scale(scale, (), x.device)
        if isinstance(zero_point, bool) or not isinstance(zero_point, int):
            raise TypeError(f"zero_point must be an int, got {type(zero_point).__name__}")
        if not QMIN <= zero_point <= QMAX:
            raise ValueError(f"zero_point must be in [{QMIN}, {QMAX}], got {zero_point}")
        x32 = x.float()
        rounded = rounding(x32 / torch.where(scale == 0, 1.0, scale)) + zero_point
        return fake_quantized(x, rounded, scale, QMIN, QMAX, zero_point)

    return fake_quant_int8_affine


#: This backend runs on CPU: declared, the registry declines other devices with that reason,
#: and the conformance suite shows their cells as "declared unsupported" instead of failing them.
CAPABILITIES = Capabilities(devices={"cpu"})


#: Each name with its rounding. `example-broken` is registered only by the module `broken`,
#: which a user names (`-p libreyolo_example_backend.broken`): never by the entry point.
ROUNDINGS = {"example-correct": round_half_even, "example-broken": round_half_away}


def register_named(name: str) -> None:
    register(SLOT, _implementation(ROUNDINGS[name]), name=name, capabilities=CAPABILITIES)

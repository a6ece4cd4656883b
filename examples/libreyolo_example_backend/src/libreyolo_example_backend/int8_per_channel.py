"""Symmetric int8 per-channel fake quantization, written from LibreYOLO's docs/quantization.md.

q = clamp(round_half_even(x / scale[c]), -127, 127) for the channel c of each element along
`axis`; out = q * scale[c] in float32, rounded once to x's dtype (+0.0 for a zero code).
"""

from __future__ import annotations

import torch

from libreyolo.kernels import Capabilities, register
from libreyolo_example_backend.checks import check_scale, check_x
from libreyolo_example_backend.ste import fake_quantized

SLOT = "fake_quant_int8_per_channel"
QMAX = 127


def fake_quant_int8_per_channel(x, scale, axis=0):
    check_x(x)
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension")
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"axis must be an int, got {type(axis).__name__}")
    if not -x.dim() <= axis < x.dim():
        raise ValueError(f"axis must be in [{-x.dim()}, {x.dim() - 1}], got {axis}")
    check_scale(scale, (x.shape[axis],), x.device)
    shape = [1] * x.dim()
    shape[axis] = -1
    s = scale.reshape(shape)
    rounded = torch.round(x.float() / torch.where(s == 0, 1.0, s))
    return fake_quantized(x, rounded, s, -QMAX, QMAX)


#: `check_scale` reads the scale's values on the host, which a CUDA graph capture forbids: no
#: `cuda-graph` mode. Declared, the registry declines the input while a graph is captured (the
#: next implementation takes it), and the suite holds it to the other modes only.
CAPABILITIES = Capabilities(modes={"cpu", "cuda"})


def register_all() -> None:
    register(SLOT, fake_quant_int8_per_channel, name="example-correct",
             capabilities=CAPABILITIES)

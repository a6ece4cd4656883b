"""Implementations that each break one thing a cell reads after the call: the output's autograd
connection, the gradient reaching the input, the output's type, its bits, its gradient's bits.
Each is the reference (or portable path) but for that one break, so a cell's verdict names it
alone. ``breakers_backend`` registers them as a third party would (``-p breakers_backend``);
``register_all``/``unregister_all`` do it inside a test.

``BREAKERS``: name -> (slot, implementation, the check that fails, a part of its message).
"""

from __future__ import annotations

import torch

from libreyolo.kernels import get_slot, register, unregister

EXACT = "fake_quant_int8_affine"
BOUNDED = "ms_deform_attn"


def _reference(*args):
    return get_slot(EXACT).load_reference()(*args)


class _Passing(torch.autograd.Function):
    """Forward: `values`; backward: `gradient(grad)` for x (None: the input is not reached)."""

    @staticmethod
    def forward(ctx, x, values, gradient):
        ctx.gradient = gradient
        return values

    @staticmethod
    def backward(ctx, grad):
        return ctx.gradient(grad), None, None


def forward_only(x, scale, zero_point):
    """The commonest first mistake: the body under no_grad, no straight-through backward."""
    with torch.no_grad():
        return _reference(x, scale, zero_point)


def gradient_unused(x, scale, zero_point):
    return _Passing.apply(x, _reference(x.detach(), scale, zero_point), lambda grad: None)


def gradient_doubled(x, scale, zero_point):
    return _Passing.apply(x, _reference(x.detach(), scale, zero_point), lambda grad: 2 * grad)


def bits_doubled(x, scale, zero_point):
    return _reference(x, scale, zero_point) * 2


def not_a_tensor(x, scale, zero_point):
    return _reference(x, scale, zero_point).tolist()


def bounded_forward_only(*args):
    with torch.no_grad():
        return get_slot(BOUNDED).load_portable()(*args)


BREAKERS = {
    "forward-only": (EXACT, forward_only, "ste",
                     "ste: output is not connected to the input in autograd"),
    "gradient-unused": (EXACT, gradient_unused, "ste",
                        "ste: the output's gradient does not reach the input x"),
    "gradient-doubled": (EXACT, gradient_doubled, "ste",
                         "gradient elements differ from where(mask, g, 0)"),
    "bits-doubled": (EXACT, bits_doubled, "exact", "differ from the CPU reference's bits"),
    "not-a-tensor": (EXACT, not_a_tensor, "returns-tensor", ", expected a tensor"),
    "bounded-forward-only": (BOUNDED, bounded_forward_only, "bounded",
                             "bounded: gradients: the output is not connected to the inputs"),
}


def register_all() -> None:
    for name, (slot, fn, _, _) in BREAKERS.items():
        register(slot, fn, name=name)


def unregister_all() -> None:
    for name, (slot, _, _, _) in BREAKERS.items():
        unregister(slot, name)

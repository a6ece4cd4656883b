"""Negative controls for what validating one implementation (`--impl`) must catch by default:
an implementation right on every valid input but silent on invalid ones (the error cells), bugs
specific to one size x dtype or size x layout combination (the `validate` profile, which runs
large cases in every dtype and layout; the `ci` profile runs them in none), and a declaration
that narrows what the suite holds a backend to but cannot hide a wrong answer inside it.
"""

from __future__ import annotations

import torch

from conformance.negative import breaks
from libreyolo.kernels import Capabilities
from libreyolo.quant import fake_quant as ref
from libreyolo.quant import quantizers
from libreyolo.quant.numerics import round_to_integer

#: Above every small and medium case of the slot (the largest has 384 x 1536 = 589,824
#: elements), below its large one (512 x 512 x 3 x 3 = 2,359,296).
LARGE = 1 << 20


def _unchecked_int8_per_channel(x, scale, axis):
    """The quantizer's arithmetic without libreyolo.quant.validation's checks."""
    shape = [1] * x.dim()
    shape[axis] = -1
    codes, values, mask = quantizers.quantize(x.float(), scale.reshape(shape), round_to_integer,
                                              -127, 127)
    return quantizers.Quantized(codes, values, mask)


@breaks("fake_quant_int8_per_channel")
def skips_validation(x, scale, axis=0):
    """Bit-exact on valid input, but never checks its arguments: a negative, NaN or infinite
    scale, a scale of the wrong dtype or an integer x give numbers instead of an error."""
    return ref._fake_quant(_unchecked_int8_per_channel, x, scale, axis)


def _last_negated(out: torch.Tensor) -> torch.Tensor:
    """`out` with its last element's sign flipped (bits differ even for 0 and NaN)."""
    last = torch.zeros(out.numel(), dtype=torch.bool, device=out.device)
    last[-1:] = True
    return torch.where(last.reshape(out.shape), -out, out)


@breaks("fake_quant_int8_per_channel")
def wrong_on_large_half(x, scale, axis=0):
    """Wrong in one element of float16 and bfloat16 inputs above LARGE elements (a half-precision
    tile path that only large tensors take)."""
    out = ref.fake_quant_int8_per_channel(x, scale, axis)
    big_half = x.dtype in (torch.float16, torch.bfloat16) and x.numel() > LARGE
    return _last_negated(out) if big_half else out


@breaks("fake_quant_int8_per_channel")
def wrong_on_large_views(x, scale, axis=0):
    """Wrong in one element of non-contiguous inputs above LARGE elements (a strided path that
    only large tensors take)."""
    out = ref.fake_quant_int8_per_channel(x, scale, axis)
    return _last_negated(out) if not x.is_contiguous() and x.numel() > LARGE else out


@breaks("fake_quant_int8_per_channel", capabilities=Capabilities(dtypes={torch.float32}))
def declared_fp32_rounds_half_away(x, scale, axis=0):
    """Declares float32 only, and rounds halves away from zero (C's round) in every dtype: its
    float16 and bfloat16 cells are declared unsupported (the registry declines those inputs, so
    a caller never sees its wrong half-precision numbers), but the float32 ties, where it claims
    support, are wrong."""
    shape = [1] * x.dim()
    shape[axis] = -1
    s = scale.reshape(shape)
    y = x.float() / torch.where(s == 0, 1.0, s)
    q = torch.clamp(torch.sign(y) * torch.floor(y.abs() + 0.5), -127, 127)
    out = torch.where(s == 0, 0.0, q * s) + 0.0
    return torch.where(torch.isnan(x), float("nan"), out).to(x.dtype)


CONTROLS = [
    ("declared_fp32_rounds_half_away", declared_fp32_rounds_half_away,
     "exact: a declaration (float32 only) narrows the cases, not the check inside them"),
]
ERROR_CONTROLS = [
    ("skips_validation", skips_validation,
     "error-input: negative, NaN and infinite scales, wrong scale dtypes, integer x"),
]
VALIDATE_CONTROLS = [
    ("wrong_on_large_half", wrong_on_large_half,
     "exact: the validate profile runs the large case in float16 and bfloat16"),
    ("wrong_on_large_views", wrong_on_large_views,
     "exact: the validate profile runs the large case gapped and transposed"),
]

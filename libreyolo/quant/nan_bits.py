"""The NaN bits of the unpack references, stated instead of inherited from a device.

The unpackers multiply float32 code values by float32 scales and convert the product to the
output dtype. Finite and infinite results are IEEE's on every device; a NaN's bits are not: the
CPU (x86) keeps a NaN operand's sign and payload, quieted, while a GPU writes its own NaN
(``0x7FFFFFFF``). The references define the CPU's bits (docs/checkpoint_format.md, "Unpacked
bits"), so these rules write them explicitly, on every device:

- a float32 product ``a * b``: ``b``'s NaN, quieted, when ``b`` is NaN; else ``a``'s; else (only
  ``0 * inf`` is left) x86's default NaN ``0xFFC00000``;
- float16 output: the float32 NaN's sign, the quiet bit and its top 9 payload bits;
- bfloat16 output: ``0xFFFF`` for every NaN (torch's vectorized CPU conversion).

While a graph is captured for export the rules are skipped: exporters translate no bit cast,
and an exported graph's NaN bits are its runtime's.
"""

from __future__ import annotations

import torch

from libreyolo.capture import is_capturing

QUIET = 0x00400000
X86_DEFAULT_NAN = -0x00400000  # 0xFFC00000 as int32
BF16_NAN = -1  # 0xFFFF as int16


def product(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a * b`` (float32, broadcasting) with x86's NaN bits."""
    out = a * b
    if is_capturing():
        return out
    nan = torch.where(torch.isnan(b), b.view(torch.int32) | QUIET,
                      torch.where(torch.isnan(a), a.view(torch.int32) | QUIET, X86_DEFAULT_NAN))
    return torch.where(torch.isnan(out), nan.view(torch.float32), out)


def convert(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float32 ``values`` in ``dtype`` (round to nearest even), NaN as the CPU converts it."""
    out = values.to(dtype)
    if dtype == torch.float32 or is_capturing():
        return out
    if dtype == torch.bfloat16:
        nan = torch.full((), BF16_NAN, dtype=torch.int16, device=values.device)
    else:  # float16: sign, quiet bit, top 9 payload bits
        bits = values.view(torch.int32)
        nan = (((bits >> 16) & 0x8000) | 0x7E00 | ((bits >> 13) & 0x1FF)).to(torch.int16)
    return torch.where(torch.isnan(values), nan.view(dtype), out)

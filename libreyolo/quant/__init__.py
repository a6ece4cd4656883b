"""Reference quantization numerics: formats, fake-quant ops with straight-through backward, packing.

This package defines what the numbers mean, in plain torch, and holds no kernel: the
accelerated code of the same slots is the other ``quant`` folder, ``libreyolo.kernels.quant``
(docs/architecture.md, "Names that look alike"). `libreyolo.kernels` registers these references
and judges accelerated implementations against them (never the other way round).

The fake-quant ops exported here are `libreyolo.quant.fake_quant`'s, one per slot declared in
`libreyolo/kernels/slots.py` with it as the reference (`FAKE_QUANT_OPS` names them), so a new
slot's op is exported without a line here.
"""

from collections.abc import Callable

import torch

from libreyolo.quant import fake_quant
from libreyolo.quant.fake_quant import FAKE_QUANT_OPS, ste_mask

globals().update({name: getattr(fake_quant, name) for name in FAKE_QUANT_OPS})


def __getattr__(name: str) -> Callable[..., torch.Tensor]:
    """A name this package lacks (PEP 562). Static type checkers cannot see the ops added to the
    package's namespace at import; this function's return type is what they take them for."""
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["FAKE_QUANT_OPS", *FAKE_QUANT_OPS, "ste_mask"]

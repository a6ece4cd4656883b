"""Stand-in implementations for the registry's tests: well-formed results, marked by a tag.

The registry judges what an implementation returns against the slot's declared output (type,
shape, dtype, device), so a stand-in returns exactly that, and a test reads which one answered
from the tag.
"""

from __future__ import annotations

import torch

from libreyolo.kernels.slots import get_slot

NO_REF = "ms_deform_attn"  # a slot without a reference: callers keep their portable path
WITH_REF = "fake_quant_fp8"  # a slot whose reference sits last


def msda_input(len_in: int = 4, batch: int = 1) -> tuple:
    """A valid input of the ms_deform_attn slot (one 2x2 level) when ``len_in`` is 4."""
    return (torch.zeros(batch, len_in, 1, 2), torch.tensor([[2, 2]]),
            torch.zeros(batch, 1, 1, 1, 1, 2), torch.ones(batch, 1, 1, 1, 1))


def tagged(tag: str, op: str = NO_REF):
    """An implementation of ``op`` returning the slot's declared output for the call, marked
    ``tag`` (read it with ``tag_of``)."""

    def impl(*args, **kwargs):
        out = get_slot(op).expected_output(args, kwargs).empty()
        out.tag = tag
        return out

    return impl


def tag_of(out) -> str | None:
    """The tag of a ``tagged`` implementation's result (None: another implementation's)."""
    return getattr(out, "tag", None)

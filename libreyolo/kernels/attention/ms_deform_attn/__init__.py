"""Multi-scale deformable attention: portable core and dispatch helpers.

The Triton provider (``triton_provider``) is not imported here: the registry imports it lazily,
so importing this package never imports triton.
"""

from .dispatch import can_use_slot, maybe_ms_deform_attn, maybe_ms_deform_attn_ragged
from .portable import ms_deform_attn_portable, ms_deform_attn_ragged, ms_deform_attn_ragged_portable

__all__ = ["can_use_slot", "maybe_ms_deform_attn", "maybe_ms_deform_attn_ragged",
           "ms_deform_attn_portable", "ms_deform_attn_ragged", "ms_deform_attn_ragged_portable"]

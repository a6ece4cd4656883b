"""Routing other libraries' models to the slots, one call each (``transformers``: the DETR lineage).

Nothing here imports those libraries at import time: a wiring function reads the model it is
given, so ``import libreyolo.integrations`` works without ``transformers`` installed.
"""

from .transformers import Site, Wiring, unwire_deformable_attention, wire_deformable_attention

__all__ = ["Site", "Wiring", "unwire_deformable_attention", "wire_deformable_attention"]

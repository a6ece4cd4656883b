"""The slot calls the quantized and finalized layers make, seen where they make them: their call
sites' bound slots (``libreyolo.nn.slot_sites``), whose real call still answers."""

from __future__ import annotations

import contextlib

from libreyolo.kernels.bound import BoundSlot


@contextlib.contextmanager
def slot_calls():
    """Inside, every bound slot call appends ``(slot, args)`` to the list this yields."""
    calls, real = [], BoundSlot.__call__

    def seen(self, *args, **kwargs):
        calls.append((self.op, args))
        return real(self, *args, **kwargs)

    BoundSlot.__call__ = seen
    try:
        yield calls
    finally:
        BoundSlot.__call__ = real

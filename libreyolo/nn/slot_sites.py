"""A layer's own slot call sites, so a layer that calls its slots alike every step selects once.

A QAT or finalized layer calls the same slot with the same input description every step (its
weight's fake-quant or unpack, its input's fake-quant). Through ``libreyolo.kernels.ops`` each
call would run the whole selection; through a :class:`SlotSite`, each slot is a
``libreyolo.kernels.bound.BoundSlot`` of that site, which selects once per description and
otherwise behaves as ``ops`` (results, errors, warnings, graph captures: docs/kernels.md, "A slot
bound by its call site").

A site belongs to one call site of one layer, not to a slot: a model has more weight shapes than
a bound slot keeps descriptions (``bound.MAX_BINDINGS``), and one shared by every layer would
start over again and again. A copied (``copy.deepcopy``) or pickled (``torch.save(model)``) site
is a new, empty one: the bindings name this process's implementations and plans, so the copy
selects afresh; nothing of a site is in a state dict.
"""

from __future__ import annotations

from libreyolo.kernels import ops
from libreyolo.kernels.bound import BoundSlot


class SlotSite:
    """``ops`` for one call site: ``site.fake_quant_fp8(x)`` is ``ops.fake_quant_fp8(x)``
    through this site's ``BoundSlot('fake_quant_fp8')``, made on its first call (an attribute
    from then on, so a later call costs an attribute lookup)."""

    def __getattr__(self, op: str) -> BoundSlot:
        try:
            bound = BoundSlot(op)
        except ValueError as unknown:  # no such slot (or a protocol's probe, ``__deepcopy__``)
            raise AttributeError(str(unknown)) from None
        self.__dict__[op] = bound
        return bound

    def __reduce__(self):
        """Copied or pickled: a new, empty site (module docstring)."""
        return type(self), ()

    def __repr__(self) -> str:
        return f"SlotSite({', '.join(map(repr, self.__dict__.values()))})"


def calling_ops_per_call(model):
    """``model`` with each layer's call sites replaced by ``ops``, as the layers called their
    slots before they were bound: the whole selection on every call. For measuring what binding
    saves (``benchmarks/bench/bench_qat.py --unbound``) and checking it changes no bits."""
    for layer in model.modules():
        for name, value in list(vars(layer).items()):
            if isinstance(value, SlotSite):
                setattr(layer, name, ops)
    return model

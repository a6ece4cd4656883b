"""The registry's state, in one module: the other rooms read and rebind it here as
``state.<name>`` (never imported by name, so a rebinding, theirs or a test's through the package,
``monkeypatch.setattr(registry, "_failures", {})``, is seen by all). One lock guards it."""

from __future__ import annotations

import threading

from ..slots import SLOTS
from .records import Implementation

#: Benchmark-only knob (``benchmarks/bench/bench_host.py --judge off``): False skips binding each
#: call to the slot's signature up front and judging what an accelerated implementation returns
#: against the slot's declared output. Never turn it off elsewhere: a wrong-shaped, wrong-dtype
#: or wrong-device result would then reach the caller.
JUDGE_OUTPUTS = True

_lock = threading.RLock()
_load_lock = threading.RLock()
_loading = threading.local()  # .origin, .provider: of registrations made by a provider import
_impls: dict[str, list[Implementation]] = {slot.name: [] for slot in SLOTS}
_generation = 0
_resolved: dict[tuple, tuple[int, tuple[Implementation, ...]]] = {}
_predicate_results: dict[Implementation, str | None] = {}
_failures: dict[Implementation, str] = {}
_warned: set[tuple[str, object]] = set()
_references_loaded = False
_providers_started = False
_providers_loaded = False

#: The names above: what the package ``libreyolo.kernels.registry`` serves from here.
NAMES = ("JUDGE_OUTPUTS", "_lock", "_load_lock", "_loading", "_impls", "_generation",
         "_resolved", "_predicate_results", "_failures", "_warned", "_references_loaded",
         "_providers_started", "_providers_loaded")


def invalidate() -> None:
    """A new generation: every resolution made before it is stale (call it under the lock)."""
    global _generation
    _generation += 1
    _resolved.clear()


def forget(entries) -> None:
    """Drop what the registry remembers about replaced or removed entries (bounded state)."""
    for entry in entries:
        _failures.pop(entry, None)
        _predicate_results.pop(entry, None)
        _warned.discard(("predicate", entry))

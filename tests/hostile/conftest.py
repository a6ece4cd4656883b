"""Fixtures of the hostile-input suite: a registry whose state each test leaves as it found it."""

from __future__ import annotations

import pytest

from libreyolo.kernels import registry, settings


@pytest.fixture
def isolated_registry(monkeypatch):
    """The real registry (references and in-tree providers loaded, as a user's process has
    them), its failures, warnings and registrations restored after the test."""
    for variable in (settings.KERNELS, settings.LEGACY_KERNELS):
        monkeypatch.delenv(variable, raising=False)
    registry.candidates("fake_quant_fp8")  # loads references and providers
    saved = {op: list(entries) for op, entries in registry._impls.items()}
    monkeypatch.setattr(registry, "_failures", {})
    monkeypatch.setattr(registry, "_warned", set())
    registry.clear_cache()
    yield registry
    with registry._lock:
        registry._impls.update(saved)
    registry.clear_cache()

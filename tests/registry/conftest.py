"""Fixtures that give each registry test a clean, restorable registry."""

from __future__ import annotations

import pytest

from libreyolo.kernels import registry, settings


@pytest.fixture
def clean_registry(monkeypatch):
    """The registry with references loaded, providers skipped, and state restored afterwards."""
    for variable in (settings.KERNELS, settings.LEGACY_KERNELS, settings.HUB_KERNELS):
        monkeypatch.delenv(variable, raising=False)
    registry._ensure_loaded(settings.parse_selection("off", settings.KERNELS))
    saved = {op: list(entries) for op, entries in registry._impls.items()}
    monkeypatch.setattr(registry, "_providers_started", True)
    monkeypatch.setattr(registry, "_providers_loaded", True)
    monkeypatch.setattr(registry, "_failures", {})
    monkeypatch.setattr(registry, "_warned", set())
    for op in registry._impls:
        registry._impls[op] = [e for e in registry._impls[op] if e.is_reference]
    registry.clear_cache()
    yield registry
    registry._impls.update(saved)
    registry.clear_cache()


@pytest.fixture
def stub_reference(clean_registry):
    """``stub_reference(op, fn)``: make ``fn`` slot ``op``'s reference for this test (callers
    cannot register that name; the registry declares it from the slot catalogue)."""

    def install(op, fn):
        entries = [e for e in registry._impls[op] if not e.is_reference]
        registry._impls[op] = entries + [registry.Implementation(op, registry.REFERENCE, fn)]
        registry.clear_cache()

    return install

"""Fixtures of the Hub kernel tests: no socket may be used, and a stand-in artifact in a
temporary Hugging Face cache, pinned by a temporary lock, served offline through the real
``kernels`` package."""

from __future__ import annotations

import socket

import hub_stand_in as stand_in
import pytest

from conformance.evidence.hub_cache import lock_text
from libreyolo.kernels import registry, settings
from libreyolo.kernels.attention.ms_deform_attn import hub_provider
from libreyolo.kernels.hub import loader, lock, variant_digest

kernels = pytest.importorskip("kernels", reason="the hub-kernels extra is not installed")
constants = pytest.importorskip("huggingface_hub.constants")


@pytest.fixture(autouse=True)
def no_sockets(monkeypatch):
    """Every use of a socket fails the test (and raises, so nothing goes out)."""
    attempts = []

    class Refused(socket.socket):
        def __init__(self, *args, **kwargs):
            attempts.append(("socket.socket", args))
            raise OSError("a Hub kernel test opened a socket")

    def refuse_connection(address, *args, **kwargs):
        attempts.append(("socket.create_connection", address))
        raise OSError("a Hub kernel test opened a connection")

    monkeypatch.setattr(socket, "socket", Refused)
    monkeypatch.setattr(socket, "create_connection", refuse_connection)
    yield
    assert not attempts, f"socket use: {attempts}"


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A temporary cache (HF_HUB_OFFLINE) holding the stand-in, pinned by a temporary lock with
    its audited digest. ``hub.pin(variants=...)`` rewrites the lock; ``hub.cache`` is the cache."""
    for variable in (settings.HUB_KERNELS, settings.HUB_UNAUDITED, "LOCAL_KERNELS"):
        monkeypatch.delenv(variable, raising=False)
    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    revision, folder = stand_in.build(cache)
    lock_file = tmp_path / "lock.toml"
    monkeypatch.setattr(lock, "LOCK_FILE", lock_file)
    monkeypatch.setattr(loader, "_LOADED", {})
    hub_provider.kernel.cache_clear()

    class Hub:
        def __init__(self):
            self.cache, self.revision, self.folder = cache, revision, folder

        def pin(self, revision=None, variants=None):
            audited = {stand_in.VARIANT: variant_digest(stand_in.files())}
            lock_file.write_text(lock_text(stand_in.NAME, stand_in.REPO,
                                           revision or self.revision,
                                           audited if variants is None else variants))

    made = Hub()
    made.pin()
    yield made
    hub_provider.kernel.cache_clear()


@pytest.fixture
def on_cpu(hub, monkeypatch):
    """The hub implementation eligible on CPU tensors (the stand-in's device), selected by
    name, with the registry's failures and warnings reset."""
    monkeypatch.setattr(hub_provider, "DEVICE", "cpu")
    monkeypatch.setenv(settings.KERNELS, "ms_deform_attn=hub")
    monkeypatch.setattr(registry, "_failures", {})
    monkeypatch.setattr(registry, "_warned", set())
    registry.clear_cache()
    yield hub
    registry.clear_cache()

"""The registry under concurrent registration, unregistration and resolution."""

from __future__ import annotations

import sys
import threading

import pytest

from libreyolo.kernels import candidates, register, registered, unregister

SLOT = "ms_deform_attn"
THREADS = 16
ROUNDS = 400


@pytest.fixture
def tiny_switch_interval():
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


@pytest.mark.usefixtures("clean_registry", "tiny_switch_interval")
def test_no_lost_registration_and_no_stale_resolution():
    barrier = threading.Barrier(THREADS)
    errors: list[str] = []

    def worker(index: int) -> None:
        barrier.wait()
        for round_ in range(ROUNDS):
            name = f"t{index}-r{round_}"
            entry = register(SLOT, lambda: None, name=name)
            if entry not in candidates(SLOT):
                errors.append(f"{name} missing right after register returned")
            if round_ < ROUNDS - 1:  # keep each thread's last registration
                unregister(SLOT, name)
                if any(e is entry for e in candidates(SLOT)):
                    errors.append(f"{name} resolved after unregister returned")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    survivors = {e.name for e in registered(SLOT)}
    assert survivors == {f"t{i}-r{ROUNDS - 1}" for i in range(THREADS)}

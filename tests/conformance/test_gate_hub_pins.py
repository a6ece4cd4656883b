"""THE GATE on the Hub lock: a lock that differs from its awaiting entry, or from a green record,
fails CI (conformance/evidence/hub_pins.py; the record side is the gate's staleness check, since
the lock is among the Hub implementation's sources)."""

from dataclasses import replace

from conformance.evidence import hub_pins
from conformance.evidence.scan import Target, in_tree_targets
from libreyolo.kernels.hub import lock
from libreyolo.kernels.registry import awaiting_record


def real_problems(pins=None, pins_awaited=None):
    return hub_pins.problems(in_tree_targets(), awaiting_record(),
                             hub_pins.awaiting_pins() if pins_awaited is None else pins_awaited,
                             lock.load_lock() if pins is None else pins, lock.LOCK_FILE)


def test_the_lock_agrees_with_the_awaiting_entries(whole_suite):
    assert not real_problems()


def test_the_hub_implementation_digests_the_lock(whole_suite):
    hub = {t.key: t for t in in_tree_targets()}["ms_deform_attn/hub"]
    assert str(lock.LOCK_FILE) in hub.sources


def test_a_moved_revision_fails(whole_suite):
    pins = {name: replace(pin, revision="0" * 40) for name, pin in lock.load_lock().items()}
    assert any("bump both together" in p for p in real_problems(pins=pins))


def test_an_added_digest_fails(whole_suite):
    pins = {name: replace(pin, variants={"torch211-cxx11-cu130-x86_64-linux": "sha256:" + "0" * 64})
            for name, pin in lock.load_lock().items()}
    assert any("bump both together" in p for p in real_problems(pins=pins))


def test_a_pin_nobody_awaits_or_records_fails(whole_suite):
    assert any("no awaiting entry names" in p for p in real_problems(pins_awaited={}))


def test_an_awaiting_pin_of_an_implementation_without_the_lock_in_its_sources_fails(
        whole_suite):
    targets = [Target("ms_deform_attn", "hub", ("elsewhere.py",))]
    pins = lock.load_lock()
    awaited = {"ms_deform_attn/hub": next(iter(pins.values())).as_dict()}
    found = hub_pins.problems(targets, frozenset(awaited), awaited, pins, lock.LOCK_FILE)
    assert found == ["ms_deform_attn/hub does not list hub_kernels.lock.toml among its sources"]


def test_a_lock_that_differs_from_a_green_records_stales_it(whole_suite):
    """A record covered the lock as it was; today's lock differs: the gate's staleness check
    names the lock file (a record made for another pin cannot stay green)."""
    from conformance.evidence import gate

    hub = {t.key: t for t in in_tree_targets()}["ms_deform_attn/hub"]
    current = gate.current_digest(hub)
    shown = next(f for f in current["files"] if f.endswith("hub_kernels.lock.toml"))
    recorded = {**current["files"], shown: "0" * 64}
    record = {"source_digest": "recorded-for-another-pin", "source_files": recorded,
              "catalogue_entry": current["entry"]}
    assert shown in gate._stale(hub, record, current)

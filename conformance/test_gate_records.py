"""THE GATE: each in-tree accelerated implementation needs a green CUDA parity record under
conformance/records/ for the digest of its current sources, or it must be listed as awaiting one
(libreyolo/kernels/awaiting_record.toml), which keeps it from being selected by default.
Also: the static list matches the registry, and recorded outputs match the CPU reference."""

import pytest

from conformance import records
from conformance.catalogue import CATALOGUE
from conformance.gate import current_digest, gate_problems, in_tree_targets
from libreyolo.kernels import registered, registry, settings
from libreyolo.kernels.registry import awaiting_record


def _key(target) -> str:
    return f"{target.slot}/{target.impl}"


def test_every_in_tree_accelerated_implementation_has_a_green_cuda_record(whole_suite):
    gated = [t for t in in_tree_targets() if _key(t) not in awaiting_record()]
    problems = gate_problems(gated, records.load, current_digest)
    assert not problems, "\n".join(problems)


def test_the_awaiting_list_names_in_tree_implementations_still_without_a_green_record(
    whole_suite,
):
    targets = {_key(t): t for t in in_tree_targets()}
    unknown = sorted(awaiting_record() - set(targets))
    assert not unknown, f"awaiting_record.toml names no in-tree implementation: {unknown}"
    green = [key for key in sorted(awaiting_record())
             if not gate_problems([targets[key]], records.load, current_digest)]
    assert not green, f"green records exist now: remove from awaiting_record.toml: {green}"


def test_implementations_awaiting_a_record_are_not_selected_by_default(whole_suite, monkeypatch):
    """The policy applied to the real registrations (tests/registry covers its behaviour)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    registered_keys = {f"{i.op}/{i.name}": i for slot in CATALOGUE for i in registered(slot)}
    for key in sorted(awaiting_record()):
        assert key in registered_keys, f"{key} is not registered"
        assert registry._awaits_record(registered_keys[key], settings.Selection(), False)


def test_the_static_list_names_every_in_tree_registration(whole_suite):
    from libreyolo.kernels import registered
    from libreyolo.kernels.providers import IN_TREE_PROVIDERS

    listed = {(t.slot, t.impl) for t in in_tree_targets()}
    in_tree = {(impl.op, impl.name) for slot in CATALOGUE for impl in registered(slot)
               if impl.fn.__module__.split(".")[0] == "libreyolo" and impl.name != "reference"
               and any(impl.fn.__module__.startswith(p.rpartition(".")[0])
                       for p in IN_TREE_PROVIDERS)}
    assert in_tree <= listed, f"add to conformance/gate.py IN_TREE: {sorted(in_tree - listed)}"


def _recorded_exact_outputs():
    for target in in_tree_targets():
        record = records.load(target.slot, target.impl)
        if record is None:
            continue
        for key, want in record["output_digests"].items():
            yield pytest.param(target.slot, record["seed"], key, want,
                               id=f"{target.slot}:{target.impl}:{key}")


@pytest.mark.parametrize("slot, seed, key, want", list(_recorded_exact_outputs()))
def test_recorded_outputs_are_the_cpu_references(slot, seed, key, want):
    """The GPU run's output digests, recomputed here from the CPU reference on the same seeded
    inputs: a record cannot claim bits the reference does not produce."""
    recomputed = records.reference_digest(slot, seed, key)
    if recomputed is None:
        pytest.skip("large cases are recomputed on GPU runs only (CPU CI time)")
    assert recomputed == want


def test_each_record_digests_the_files_its_implementation_registered_with(whole_suite):
    registered_sources = {(i.op, i.name): i.sources for slot in CATALOGUE for i in registered(slot)}
    for target in in_tree_targets():
        assert registered_sources[(target.slot, target.impl)] == target.sources

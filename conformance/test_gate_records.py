"""THE GATE (fails until the GPU run has recorded every in-tree implementation): each needs a
green CUDA parity record under conformance/records/ for the digest of its current sources.
Also: the static list matches the registry, and recorded outputs match the CPU reference."""

import pytest

from conformance import records
from conformance.catalogue import CATALOGUE
from conformance.gate import current_digest, gate_problems, in_tree_targets


def test_every_in_tree_accelerated_implementation_has_a_green_cuda_record(whole_suite):
    problems = gate_problems(in_tree_targets(), records.load, current_digest)
    assert not problems, "\n".join(problems)


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

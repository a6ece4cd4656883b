"""The gate's own logic, on a fake provider: what makes a parity record green, and what not."""

import pytest

from conformance.gate import RECORD_COMMAND, Target, gate_problems, record_problem

FAKE = Target("fake_quant_fp8", "fake", ("fake_provider.py",))
DIGEST = "d" * 64


def green_record(**changes) -> dict:
    record = {"slot": FAKE.slot, "impl": FAKE.impl, "source_digest": DIGEST,
              "git": {"commit": "c" * 40, "dirty": False}, "complete": True,
              "profile": "thorough", "modes": ["cuda", "cuda-graph"],
              "counts": {"state": {"pass": 120, "not-applicable": 3}},
              "output_digests": {"cuda|float32|case@contiguous": "0" * 64}}
    record.update(changes)
    return record


def test_a_matching_complete_green_record_passes():
    assert record_problem(FAKE, green_record(), DIGEST) is None


@pytest.mark.parametrize("record, words", [
    (None, "no CUDA parity record"),
    (green_record(source_digest="e" * 64), "other sources"),
    (green_record(git={"commit": "c" * 40, "dirty": True}), "DIRTY"),
    (green_record(git={"commit": None}), "DIRTY"),
    (green_record(complete=False), "partial run"),
    (green_record(profile="ci"), "partial run"),
    (green_record(modes=["interpreter"]), "no cuda or cuda-graph cells"),
    (green_record(modes=["cuda"]), "no cuda-graph cells"),
    (green_record(slot="fake_quant_int8_affine"), "the record is of"),
    (green_record(output_digests={}), "without output digests"),
    (green_record(counts={"state": {"pass": 119, "fail": 1}}), "not green"),
    (green_record(counts={"state": {"pass": 119, "crash": 1}}), "not green"),
    (green_record(counts={"state": {"not-applicable": 120}}), "not green"),
], ids=["no-record", "digest-mismatch", "dirty-tree", "unknown-git", "partial-run",
        "ci-profile", "interpreter-only", "no-graph-mode", "another-slots-record",
        "no-output-digests", "a-failure", "a-crash", "nothing-passed"])
def test_a_record_that_does_not_prove_the_current_code_fails(record, words):
    problem = record_problem(FAKE, record, DIGEST)
    assert problem is not None and words in problem
    assert "fake_quant_fp8/fake" in problem


def test_a_missing_record_names_the_command_that_produces_it():
    problem = record_problem(FAKE, None, DIGEST)
    assert RECORD_COMMAND.format(impl="fake") in problem


def test_the_gate_reports_every_target_that_is_not_green():
    other = Target("fake_quant_mxfp8_weight", "fake", ())
    records = {FAKE.slot: green_record(), other.slot: None}
    problems = gate_problems([FAKE, other], lambda slot, impl: records[slot], lambda t: DIGEST)
    assert len(problems) == 1 and "fake_quant_mxfp8_weight/fake" in problems[0]

"""The re-record command: only what the gate reports, packed into groups that fit one device
command, each group one record run of the whole suite (`--slot`), so its records are complete."""

from conformance.evidence import rerecord, scan
from conformance.evidence.records import RECORD_PROFILE
from conformance.evidence.scan import Target
from conformance.inputs import strategies


def _targets(seconds: dict, impl="triton"):
    return [Target(slot, impl, ()) for slot in seconds]


def test_groups_hold_at_most_the_budget_and_every_stale_slot_once(monkeypatch):
    seconds = {"a": 300.0, "b": 200.0, "c": 150.0, "d": 100.0, "e": 30.0}
    monkeypatch.setattr(rerecord, "estimate", lambda target, workers: seconds[target.slot])
    groups = rerecord.plan(_targets(seconds), budget=540, workers=15)
    assert sorted(s for g in groups for s in g.slots) == sorted(seconds)
    assert all(g.seconds <= 540 for g in groups)
    assert len(groups) == 2


def test_a_group_holds_one_implementation_name(monkeypatch):
    monkeypatch.setattr(rerecord, "estimate", lambda target, workers: 10.0)
    groups = rerecord.plan(_targets({"a": 0}) + _targets({"b": 0}, impl="hub"), 540, 15)
    assert sorted(g.impl for g in groups) == ["hub", "triton"]


def test_a_group_runs_the_whole_suite_with_the_record_options():
    command = rerecord.Group("triton", ["fake_quant_fp8", "ms_deform_attn"]).command(15)
    args = command[command.index("pytest") + 1:]
    assert args[0] == "conformance/" and {"--gpu", "--record"} <= set(args)
    assert args[args.index("--profile") + 1] == RECORD_PROFILE
    assert args[args.index("--slot") + 1] == "fake_quant_fp8,ms_deform_attn"
    assert not {"-k", "-m", "--deselect", "--ignore"} & set(args)


def test_a_slot_without_an_earlier_record_is_estimated_conservatively(monkeypatch):
    monkeypatch.setattr(rerecord.records, "load", lambda slot, impl: None)
    assert rerecord.estimate(Target("x", "triton", ()), 15) == rerecord.UNKNOWN_SLOT_SECONDS


def test_the_record_profile_explores_as_committed():
    """Re-recording got cheaper by wasting less time, not by exploring less: the record
    profile's sizes, full grid and hypothesis examples per target stay as they were."""
    thorough = strategies.profile(RECORD_PROFILE)
    assert thorough.sizes == {"small", "medium", "large"}
    assert thorough.full_grid_sizes == {"small", "medium"}
    assert thorough.max_examples == 12 and not thorough.derandomize


def test_what_this_machine_cannot_run_is_not_recorded_here(monkeypatch):
    """A Hub kernel without its artifact (no network on the GPU machine): its environment check
    declines, so a record run would hold only declined cells; it is listed, not recorded."""
    from libreyolo.kernels import registry

    targets = [t for t in scan.in_tree_targets() if t.slot == "ms_deform_attn"]
    reasons = {"hub": "the kernels package is not installed", "triton": None}
    monkeypatch.setattr(registry, "decline_reason", lambda slot, impl: reasons[impl])
    skipped = rerecord.unrunnable_here(targets)
    assert {t.impl: r for t, r in skipped.items()} == {"hub": reasons["hub"]}

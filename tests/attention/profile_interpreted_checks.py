"""The host-time profile on real calls under TRITON_INTERPRET=1 (run by test_msda_profile.py):
the numbers mean nothing here, the grouping is what is checked.

Not collected on its own (no ``test_`` prefix); run directly with
``TRITON_INTERPRET=1 python -m pytest tests/attention/profile_interpreted_checks.py``.
"""

import dataclasses
import os

import pytest
import torch

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 before triton kernels are imported",
                allow_module_level=True)

from benchmarks.bench.bench_ms_deform_attn import profiled_steps  # noqa: E402
from benchmarks.profiles.msda_host_profile import (  # noqa: E402
    GROUPS,
    Profile,
    Roots,
    profile_cases,
    profile_step,
)
from conformance.inputs.ms_deform_attn_cases import Case  # noqa: E402

TINY = Case("tiny", "test", "small", batch=1, levels=((2, 2), (1, 1)), heads=1, channels=4,
            points=1, queries=2)


def grouping_problems(profile: Profile) -> list[str]:
    """What is wrong with one interpreted step's grouping (empty when nothing is)."""
    problems = []
    groups = profile.groups
    for group in ("ours", "triton", "torch"):
        if groups[group] <= 0:
            problems.append(f"no time in {group}")
    if groups["launch"] or groups["sync"]:
        problems.append("launch or sync time without a GPU")
    if abs(sum(groups.values()) - sum(f[0] for f in profile.functions)) > 1e-9:
        problems.append("the groups do not add up to the functions' own time")
    owner = {name: group for _, group, _, name in profile.functions}
    accepts = [g for name, g in owner.items() if "triton_provider.py" in name
               and name.endswith("(accepts)")]
    if accepts != ["ours"]:
        problems.append(f"the Triton provider's accepts grouped as {accepts}")
    if owner.get("<built-in method builtins.isinstance>") in (None, "other"):
        problems.append("isinstance not counted for its callers")
    if profile.backward_seen not in (None, profile.calls):
        problems.append(f"our backward seen {profile.backward_seen} of {profile.calls} times")
    return problems


def profiles(roots: Roots) -> list[Profile]:
    return [profile_step(label, step, 1, lambda: None, roots, backward, warmup=1)
            for label, (step, backward) in profiled_steps(TINY, torch.float32, "cpu").items()]


def test_every_step_is_grouped_by_owner():
    found = profiles(Roots.here())
    assert [p.backward_seen for p in found] == [None, 1, None, 1]
    assert {p.label: grouping_problems(p) for p in found} == {p.label: [] for p in found}
    assert any("run_backward" in name for _, group, _, name in found[1].functions
               if group == "torch")


def test_the_grouping_check_catches_our_code_counted_elsewhere():
    """Negative control: with the wrong folder for this repository, our code is not ours."""
    wrong = dataclasses.replace(Roots.here(), ours="/nowhere/libreyolo")
    assert all("no time in ours" in grouping_problems(p) for p in profiles(wrong))


def test_the_markdown_names_every_group():
    text = profile_cases([TINY], profiled_steps, torch.float32, "cpu", calls=1, warmup=1)
    for label in GROUPS.values():
        assert text.count(f"| {label} |") == 4
    assert text.count("Our autograd backward seen by the profiler: 1 of 1 calls.") == 2

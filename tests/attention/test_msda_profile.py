"""The host-time profile of eager MSDA calls (``benchmarks/profiles/msda_host_profile.py``): its
grouping by owner on synthetic profiler entries here, and on a real interpreted call in
``profile_interpreted_checks.py`` (a child process with TRITON_INTERPRET=1)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks.profiles.msda_host_profile import Roots, classify, group_stats

ROOTS = Roots(ours="/repo/libreyolo", triton="/site/triton", torch="/site/torch",
              loop="/repo/benchmarks", peer="/repo/.peers/Deformable-DETR")


@pytest.mark.parametrize(("func", "group"), [
    (("/repo/libreyolo/kernels/registry.py", 509, "dispatch"), "ours"),
    (("/site/triton/backends/nvidia/driver.py", 700, "__call__"), "triton"),
    (("~", 0, "<built-in method __triton_launcher.launch>"), "launch"),
    (("~", 0, "<method 'run_backward' of 'torch._C._EngineBase' objects>"), "torch"),
    (("~", 0, "<built-in method torch.zeros>"), "torch"),
    (("/site/torch/autograd/__init__.py", 255, "backward"), "torch"),
    (("/site/torch/cuda/__init__.py", 1080, "synchronize"), "sync"),
    (("/repo/benchmarks/bench/bench_ms_deform_attn.py", 180, "forward"), "other"),
    (("~", 0, "<built-in method builtins.isinstance>"), None),
    (("/usr/lib/python3.12/contextlib.py", 132, "__enter__"), None),
    (("/repo/libreyolo_extra/x.py", 1, "f"), None),  # a sibling folder is not ours
    (("/repo/.peers/Deformable-DETR/models/ops/functions/ms_deform_attn_func.py", 28,
      "forward"), "peer"),
    (("~", 0, "<built-in method ms_deform_attn_backward of PyCapsule object at 0x7f00>"),
     "peer"),
])
def test_each_entry_is_grouped_by_its_owner(func, group):
    assert classify(func, ROOTS) == group


def test_without_a_peer_its_python_has_no_owner():
    alone = Roots(ours="/repo/libreyolo", triton="/site/triton", torch="/site/torch",
                  loop="/repo/benchmarks")
    assert classify(("/repo/.peers/Deformable-DETR/models/ops/functions/"
                     "ms_deform_attn_func.py", 28, "forward"), alone) is None


def entry(own: float, callers: dict) -> tuple:
    """A pstats entry: (primitive calls, calls, own s, cumulative s, callers)."""
    return (1, 1, own, own, callers)


def test_code_without_an_owner_counts_for_its_callers_by_the_time_each_gave_it():
    ours = ("/repo/libreyolo/a.py", 1, "accepts")
    torch_fn = ("/site/torch/autograd/function.py", 609, "apply")
    stdlib = ("/usr/lib/python3.12/contextlib.py", 132, "__enter__")
    isinstance_ = ("~", 0, "<built-in method builtins.isinstance>")
    stats = SimpleNamespace(stats={
        ours: entry(2.0, {}),
        torch_fn: entry(1.0, {}),
        stdlib: entry(4.0, {torch_fn: (1, 1, 4.0, 4.0)}),
        # 3 s from ours, 1 s from the standard library, which torch called
        isinstance_: entry(4.0, {ours: (1, 1, 3.0, 3.0), stdlib: (1, 1, 1.0, 1.0)}),
    })
    groups, functions = group_stats(stats, ROOTS)
    assert groups["ours"] == pytest.approx(2.0 + 3.0)
    assert groups["torch"] == pytest.approx(1.0 + 4.0 + 1.0)
    assert sum(groups.values()) == pytest.approx(sum(f[0] for f in functions))
    assert {name: group for _, group, _, name in functions}[
        "<built-in method builtins.isinstance>"] == "ours"


@pytest.mark.interpreter
def test_a_real_interpreted_call_is_grouped(run_under_interpreter):
    run_under_interpreter("tests/attention/profile_interpreted_checks.py")

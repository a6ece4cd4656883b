"""docs/performance.md's compile table reads each compiled slot call beside its floor once a
bench_compile run has them (``slot_floors``): the host ratio against the target, a miss named."""

from __future__ import annotations

from benchmarks.bench.compile_targets import SLOT_OVER_FLOOR_HOST
from benchmarks.rendering.host_tables import slot_floor_lines

#: Test data: one row within the target, one over it, one that was not measured.
FLOORS = [
    {"slot": "fake_quant_fp8", "backward": False, "slot_host_us": 30.0, "floor_host_us": 27.0,
     "host_ratio": 1.11},
    {"slot": "ms_deform_attn", "backward": True, "slot_host_us": 90.0, "floor_host_us": 60.0,
     "host_ratio": 1.5},
    {"slot": "ms_deform_attn_ragged", "backward": False, "skipped": "no in-tree implementation"},
]


def test_a_run_without_slot_floors_renders_nothing():
    missed = []
    assert slot_floor_lines(None, missed) == [] and missed == []


def test_each_slot_reads_beside_its_floor_and_a_miss_is_named():
    missed = []
    line = slot_floor_lines(FLOORS, missed)[-1]
    assert f"target <= {SLOT_OVER_FLOOR_HOST}x" in line
    assert "`fake_quant_fp8` fwd 30 / 27 µs (1.11x)" in line
    assert "`ms_deform_attn` fwd+bwd 90 / 60 µs (1.50x)" in line
    assert "`ms_deform_attn_ragged` fwd not measured (no in-tree implementation)" in line
    assert missed == ["`ms_deform_attn` fwd+bwd: compiled host time 1.50x its floor's",
                      "`ms_deform_attn_ragged` fwd: no floor measured"]

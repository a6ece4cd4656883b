"""`--impl NAME` runs what concerns that implementation: its matrix, hypothesis and error cells
and the suite's quick self-checks, under the `validate` profile by default; the tests about the
whole suite and the in-tree code are deselected (so the counts are the implementation's), and a
run without `--impl` keeps the `ci` profile (the in-tree CPU suite's time is unchanged)."""

import re
import subprocess
from pathlib import Path

from conformance.inputs import strategies
from conformance.running.child import run_pytest
from conformance.running.outcomes import plugin_args

DOCS = Path(__file__).resolve().parents[2] / "docs" / "conformance.md"
#: Tests that use `whole_suite`, one per module that has them.
WHOLE_SUITE = ("test_suite_rejects_control", "test_the_suite_judges_an_out_of_tree_backend",
               "test_an_unknown_impl_lists_the_registered_names",
               "test_the_static_list_names_every_in_tree_registration",
               "test_impl_runs_show_declared_cells_in_the_count_and_the_matrix_json",
               "test_the_check_passes_a_repeatable_implementation_on_cpu")
PARAMETRIZED = re.compile(r"::test_(?:cell|layouts|error_input)\[([^\]]+)\]")


def collect(config, *options) -> subprocess.CompletedProcess:
    result = run_pytest(config.rootpath, "conformance/", "--collect-only", "-q", *options,
                        *plugin_args(config))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result


def test_impl_collects_that_implementation_and_deselects_the_whole_suite(request, whole_suite):
    result = collect(request.config, "--impl", "reference", "--slot", "unpack_mxfp4")
    ids = [line for line in result.stdout.splitlines() if "::" in line]
    cells = [m.group(1) for m in map(PARAMETRIZED.search, ids) if m]
    assert cells and all(c.split(":")[:2] == ["unpack_mxfp4", "reference"] for c in cells)
    assert {"cpu:error:float32-scale", "cpu"} <= {":".join(c.split(":")[2:]) for c in cells}
    assert not [i for i in ids if any(name in i for name in WHOLE_SUITE)]
    assert re.search(r"\d+ deselected", result.stdout)


def test_impl_defaults_to_the_validate_profile_and_a_plain_run_to_ci(request, whole_suite):
    def matrix_ids(*options):
        out = collect(request.config, "--slot", "fake_quant_int8_per_channel", *options).stdout
        return {m.group(1) for m in map(PARAMETRIZED.search, out.splitlines()) if m
                and "test_cell[" in m.group(0)}

    by_impl = matrix_ids("--impl", "reference")
    assert by_impl == matrix_ids("--impl", "reference", "--profile", "validate")
    large = {i for i in by_impl if "yolov8l_conv_3x3" in i}
    assert {i.split(":")[3] for i in large} == {"float32", "float16", "bfloat16"}
    assert {i.split("@")[1] for i in large} == {"contiguous", "gapped", "transposed"}
    plain = matrix_ids()
    assert plain == matrix_ids("--profile", "ci") and not any("yolov8l" in i for i in plain)


def test_the_docs_profiles_table_states_each_profile():
    """docs/conformance.md's profiles table says what strategies.PROFILES holds."""
    rows = {}
    for line in DOCS.read_text().splitlines():
        cells = [c.strip(" `") for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0] in strategies.PROFILES:
            rows[cells[0]] = cells
    assert rows.keys() == strategies.PROFILES.keys()
    for name, (_, sizes, every, examples, _, _) in rows.items():
        profile = strategies.PROFILES[name]
        assert set(sizes.split(", ")) == profile.sizes, name
        assert set(every.split(", ")) == profile.full_grid_sizes, name
        assert examples.startswith(str(profile.max_examples)), name

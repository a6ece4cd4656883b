"""A third party validates its backend without editing our tree: the example package in
`examples/` registers a correct and a broken implementation; the suite, restricted to each with
`--impl`, passes the first and rejects the second (docs/conformance.md)."""

import os
import subprocess

import pytest

from conformance.child import run_pytest
from conformance.outcomes import plugin_args

EXAMPLE = "examples/libreyolo_example_backend/src"
SUITE = ("conformance/test_matrix.py", "conformance/test_layouts.py")


def run_suite(config, impl: str) -> subprocess.CompletedProcess:
    root = config.rootpath
    path = os.pathsep.join([str(root / EXAMPLE), os.environ.get("PYTHONPATH", "")])
    return run_pytest(root, *SUITE, "-q", "-p", "libreyolo_example_backend", "--impl", impl,
                      *plugin_args(config), env={"PYTHONPATH": path})


@pytest.mark.parametrize("impl, passes", [("example-correct", True), ("example-broken", False)])
def test_the_suite_judges_an_out_of_tree_backend(impl, passes, request, whole_suite):
    result = run_suite(request.config, impl)
    assert (result.returncode == 0) is passes, result.stdout[-3000:] + result.stderr[-2000:]
    assert f"fake_quant_int8_affine  {impl}" in result.stdout  # the matrix names it
    if not passes:
        assert "exact:" in result.stdout  # rejected by the check that catches its bug

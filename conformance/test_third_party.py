"""A third party validates its backend without editing our tree: the example package in
`examples/` registers a correct and a broken implementation; the suite, restricted to each with
`--impl`, passes the first and rejects the second (docs/conformance.md)."""

import os
import subprocess
import sys

import pytest

from conformance.outcomes import plugin_args

EXAMPLE = "examples/libreyolo_example_backend/src"
SUITE = ("conformance/test_matrix.py", "conformance/test_layouts.py")


def run_suite(config, impl: str) -> subprocess.CompletedProcess:
    root = config.rootpath
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env["PYTHONPATH"] = os.pathsep.join([str(root / EXAMPLE), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "pytest", *SUITE, "-q", "-p", "no:cacheprovider",
               "-p", "libreyolo_example_backend", "--impl", impl, *plugin_args(config)]
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("impl, passes", [("example-correct", True), ("example-broken", False)])
def test_the_suite_judges_an_out_of_tree_backend(impl, passes, request, whole_suite):
    result = run_suite(request.config, impl)
    assert (result.returncode == 0) is passes, result.stdout[-3000:] + result.stderr[-2000:]
    assert f"fake_quant_int8_affine  {impl}" in result.stdout  # the matrix names it
    if not passes:
        assert "exact:" in result.stdout  # rejected by the check that catches its bug

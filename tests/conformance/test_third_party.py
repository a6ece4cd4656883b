"""A third party validates its backend without editing our tree: the example package in
`examples/` registers a correct implementation, and a broken one when its `broken` module is
named; the suite, restricted to each with `--impl`, passes the first and rejects the second,
and the walkthrough of docs/conformance.md runs as written in a fresh virtual environment with
the example installed."""

import json
import os
import re
import site
import subprocess
import sys

import pytest

from conformance.child import run_pytest
from conformance.outcomes import plugin_args

EXAMPLE = "examples/libreyolo_example_backend"
SUITE = ("conformance/test_matrix.py", "conformance/test_layouts.py", "conformance/test_errors.py")


#: The plugin that registers each: the broken one only when its own module is named.
PLUGINS = {"example-correct": "libreyolo_example_backend",
           "example-broken": "libreyolo_example_backend.broken"}


def run_suite(config, impl: str) -> subprocess.CompletedProcess:
    root = config.rootpath
    path = os.pathsep.join([str(root / EXAMPLE / "src"), os.environ.get("PYTHONPATH", "")])
    return run_pytest(root, *SUITE, "-q", "-p", PLUGINS[impl], "--impl", impl,
                      "--profile", "ci", *plugin_args(config), env={"PYTHONPATH": path})


@pytest.mark.parametrize("impl, passes", [("example-correct", True), ("example-broken", False)])
def test_the_suite_judges_an_out_of_tree_backend(impl, passes, request, whole_suite):
    result = run_suite(request.config, impl)
    assert (result.returncode == 0) is passes, result.stdout[-3000:] + result.stderr[-2000:]
    assert re.search(rf"fake_quant_int8_affine +{impl} ", result.stdout)  # the matrix names it
    assert f"--impl {impl}: " in result.stdout  # and counts its cells alone
    if not passes:
        assert "exact:" in result.stdout  # rejected by the check that catches its bug


def _fresh_venv(tmp_path) -> str:
    """A new virtual environment that sees this interpreter's packages (torch, pytest,
    hypothesis) through a .pth file: `--system-site-packages` would reach only the base
    interpreter's, and this one may itself be a virtual environment. No pip of its own: this
    interpreter's pip installs into it (`--python`), with this interpreter's setuptools."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                    str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], check=True, capture_output=True, text=True)
    with open(os.path.join(purelib.stdout.strip(), "parent-site.pth"), "w") as pth:
        pth.write("\n".join(site.getsitepackages()) + "\n")
    return python


def test_the_walkthrough_validates_the_installed_example_in_a_fresh_venv(tmp_path, request,
                                                                        whole_suite):
    root = request.config.rootpath
    python = _fresh_venv(tmp_path)
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith(("PYTEST_XDIST", "TRITON_INTERPRET", "PYTHONPATH"))}
    install = subprocess.run([sys.executable, "-m", "pip", "--python", python, "install", "-q",
                              "--no-deps", "--no-index", "--no-build-isolation", "-e",
                              str(root / EXAMPLE)], cwd=tmp_path, env=environment,
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stdout + install.stderr
    matrix, summary = tmp_path / "matrix.json", tmp_path / "summary.md"
    # the command of docs/conformance.md, "Validating an out-of-tree backend", step 2
    result = subprocess.run([python, "-m", "pytest", "-p", "no:cacheprovider", "conformance/",
                             "-p", "libreyolo_example_backend", "--impl", "example-correct",
                             "-n", "2", "--matrix", str(matrix), "--summary", str(summary)],
                            cwd=root, env=environment, capture_output=True, text=True,
                            timeout=1200)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    cells = json.loads(matrix.read_text())["cells"]
    assert {c["impl"] for c in cells} == {"example-correct"}
    assert {c["slot"] for c in cells} == {"fake_quant_int8_per_channel", "fake_quant_int8_affine"}
    assert {c["state"] for c in cells} == {"pass"} and all(c["reproduce"] for c in cells)
    assert {c["origin"] for c in cells} == {"suite", "hypothesis", "errors"}
    assert f"{len(cells)} cells: {len(cells)} pass" in summary.read_text()
    assert f"--impl example-correct: {len(cells)} cells: {len(cells)} pass" in result.stdout

"""The interpreter mode, run from a CPU run: Triton implementations under TRITON_INTERPRET=1 on
CPU tensors, in a separate process (the variable is read when a kernel is decorated, so
interpreted and compiled kernels cannot share one), merged into this run's matrix as mode
`interpreter` — which never counts as CUDA conformance."""

import importlib.util
import os

import pytest

from conformance.running import matrix
from conformance.running.child import as_subtests, run_pytest
from conformance.running.outcomes import plugin_args
from conformance.running.plan import implementations

SUITE = ("conformance/test_matrix.py", "conformance/test_layouts.py")


def interpreter_command(config, matrix_path) -> list[str]:
    command = [*SUITE, "--interpreter", "-q", "--matrix", str(matrix_path),
               "--profile", config.getoption("profile"), "--seed", str(config.getoption("seed")),
               *_workers()]
    for option in ("impl", "slot"):  # the run's own narrowing, or its matrix holds more
        if config.getoption(option):
            command += [f"--{option}", config.getoption(option)]
    return command + plugin_args(config)


def _workers() -> list[str]:
    """As many xdist workers as this run has: the interpreted cells are the longest test of a
    CPU run (~270 s of 455 on CI's two cores, serially), and the run's other workers finish long
    before it, so it takes their cores when they are done (the cells are independent)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers < 2 or importlib.util.find_spec("xdist") is None:
        return []
    return ["-n", str(workers), "--dist", "worksteal"]  # cells vary 0.1-18 s: steal the tail


@pytest.mark.interpreter
def test_interpreter_matrix(run_options, record_cell, request, tmp_path, subtests):
    if run_options.interpreter or run_options.gpu:
        pytest.skip("the interpreter matrix is merged into CPU runs only")
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed: no interpreter mode")
    from conformance.catalogue import CATALOGUE

    if not any(implementations(run_options, slot, "interpreter") for slot in CATALOGUE):
        pytest.skip("no implementation is expected to run under the interpreter")
    out = tmp_path / "interpreter.json"
    result = run_pytest(request.config.rootpath, *interpreter_command(request.config, out),
                        progress=as_subtests(subtests))  # each cell shows as it concludes
    if not out.exists():
        pytest.fail(f"the interpreter run wrote no matrix (exit {result.returncode}):\n"
                    f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    cells, _ = matrix.read(out)
    for cell in cells:
        record_cell(cell)
    bad = [c for c in cells if c.state in ("fail", "crash")]
    assert not bad and result.returncode == 0, (
        f"{len(bad)} interpreter cells failed, e.g. "
        f"{[(c.slot, c.impl, c.dtype, c.case, c.reason) for c in bad[:5]]}\n"
        f"{result.stdout[-3000:]}")

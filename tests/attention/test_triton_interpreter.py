"""The Triton kernels' logic, forward and all three gradients, under TRITON_INTERPRET=1.

TRITON_INTERPRET is read when a kernel is decorated, so interpreted kernels cannot share this
process with compiled ones: the checks live in ``interpreted_checks.py`` and run in a child
pytest with the variable set.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.interpreter
def test_triton_kernels_pass_their_checks_in_the_interpreter():
    pytest.importorskip("triton", reason="the triton extra is not installed")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", str(HERE / "interpreted_checks.py"), "-q",
         "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=HERE.parents[1], env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]

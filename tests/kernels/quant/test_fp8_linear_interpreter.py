"""The fused FP8 linear's checks (``fp8_linear_checks.py``) under TRITON_INTERPRET=1, in a child
pytest."""

import pytest


@pytest.mark.interpreter
def test_fused_fp8_linear_passes_its_checks_in_the_interpreter(run_under_interpreter):
    run_under_interpreter("tests/kernels/quant/fp8_linear_checks.py")

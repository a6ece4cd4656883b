"""The wired detectors with the Triton kernels under the interpreter (checks in
``interpreted_wiring_checks.py``, in a child process: interpreted and compiled kernels cannot
share one)."""

import pytest

pytest.importorskip("transformers", reason="the transformers extra is not installed")


@pytest.mark.interpreter
def test_wired_detectors_pass_their_checks_with_the_interpreted_kernels(run_under_interpreter):
    run_under_interpreter("tests/integrations/interpreted_wiring_checks.py")

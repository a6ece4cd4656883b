"""Every fake-quant slot's Triton kernel, forward and backward, bit for bit against the reference
under TRITON_INTERPRET=1: the checks in ``interpreted_checks.py``, in a child pytest."""

import pytest


@pytest.mark.interpreter
def test_triton_fake_quant_kernels_pass_their_checks_in_the_interpreter(run_under_interpreter):
    run_under_interpreter("tests/kernels/quant/interpreted_checks.py")

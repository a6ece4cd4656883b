"""Every unpack slot's Triton kernel, bit for bit against the reference under TRITON_INTERPRET=1:
the checks in ``unpack_checks.py``, in a child pytest."""

import pytest


@pytest.mark.interpreter
def test_triton_unpack_kernel_passes_its_checks_in_the_interpreter(run_under_interpreter):
    run_under_interpreter("tests/kernels/quant/unpack_checks.py")

"""The Triton kernels' logic, forward and all three gradients, under TRITON_INTERPRET=1.

The checks live in ``interpreted_checks.py`` and run in a child pytest with the variable set
(the root conftest's ``run_under_interpreter``).
"""

import pytest


@pytest.mark.interpreter
def test_triton_kernels_pass_their_checks_in_the_interpreter(run_under_interpreter):
    run_under_interpreter("tests/attention/interpreted_checks.py")

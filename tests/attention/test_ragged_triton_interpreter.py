"""The ragged Triton kernels' discrete-sampling exactness, Prepared protocol, declines and routing
under TRITON_INTERPRET=1 (checks in ``ragged_interpreted_checks.py``, run in a child pytest by
the root conftest's ``run_under_interpreter``; the bounded contract on every small case is the
conformance suite's interpreter matrix)."""

import pytest


@pytest.mark.interpreter
def test_ragged_triton_kernels_pass_their_checks_in_the_interpreter(run_under_interpreter):
    run_under_interpreter("tests/attention/ragged_interpreted_checks.py")

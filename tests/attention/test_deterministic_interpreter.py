"""The deterministic backward (``deterministic.py``) under TRITON_INTERPRET=1: the checks live
in ``deterministic_checks.py`` and run in a child pytest with the variable set (the root
conftest's ``run_under_interpreter``). Run to run repeatability is checked on the GPU
(``test_deterministic_cuda.py``, ``conformance/test_determinism.py``)."""

import pytest


@pytest.mark.interpreter
def test_the_deterministic_backward_passes_its_checks_in_the_interpreter(run_under_interpreter):
    run_under_interpreter("tests/attention/deterministic_checks.py")

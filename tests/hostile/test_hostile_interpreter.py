"""The hostile-input suite under the Triton interpreter, in a child process (the root
conftest's ``run_under_interpreter``): interpreted and compiled kernels cannot share one."""

import pytest


@pytest.mark.interpreter
def test_every_try_gives_the_same_error_under_the_interpreter(run_under_interpreter):
    run_under_interpreter("tests/hostile/interpreted_hostile.py")

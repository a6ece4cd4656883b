"""The marks of a module of interpreted checks that runs in a child pytest with
``TRITON_INTERPRET=1`` (the ``run_under_interpreter`` fixture, root ``conftest.py``): marked
``interpreter``, and skipped in a process without the variable, where its kernels would compile."""

import os

import pytest

INTERPRETER_ONLY = [
    pytest.mark.interpreter,
    pytest.mark.skipif(
        os.environ.get("TRITON_INTERPRET") != "1",
        reason="needs TRITON_INTERPRET=1 in the environment (see the module docstring)",
    ),
]

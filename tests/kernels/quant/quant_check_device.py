"""Where the quant check modules (``*_checks.py`` here) run their kernels: under
``TRITON_INTERPRET=1`` on CPU tensors (CI, in a child process), else compiled on a CUDA device.
A module imports ``DEVICE`` and sets ``pytestmark = MARKS``; without triton it is skipped."""

import os

import pytest
import torch

pytest.importorskip("triton")
INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"
MARKS = [
    pytest.mark.interpreter if INTERPRETING else pytest.mark.gpu,
    pytest.mark.skipif(not INTERPRETING and not torch.cuda.is_available(),
                       reason="needs TRITON_INTERPRET=1 or a CUDA device (see the docstring)"),
]
DEVICE = "cpu" if INTERPRETING else "cuda"

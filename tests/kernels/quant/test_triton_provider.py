"""The Triton fake-quant provider's registration and eligibility, checked without running a kernel.

These run in any CPU process; the kernels themselves are checked under the interpreter
(``interpreted_checks.py``, run under the interpreter by ``test_triton_fake_quant_interpreter.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from triton_fq_inputs import ERRORS, make_arguments

from libreyolo.kernels import registered
from libreyolo.kernels.quant.simulate import triton_provider
from libreyolo.kernels.quant.simulate.plan import PLANNERS
from libreyolo.kernels.registry import answer
from libreyolo.kernels.settings import interpreting
from libreyolo.quant import fake_quant as reference

PROVIDER = "libreyolo.kernels.quant.simulate.triton_provider"


def _fresh_python(code: str, *, block_triton: bool) -> dict:
    """Run ``code`` in a fresh interpreter (optionally one where triton cannot be imported)
    and return the JSON object its last line prints."""
    prologue = "import sys\nsys.modules['triton'] = None\n" if block_triton else ""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", prologue + code], capture_output=True,
                          text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_provider_imports_no_triton():
    result = _fresh_python(
        f"import json, sys, {PROVIDER}\n"
        "print(json.dumps({'triton': 'triton' in sys.modules}))",
        block_triton=False,
    )
    assert result == {"triton": False}


def test_without_triton_every_slot_is_registered_but_the_reference_runs():
    result = _fresh_python(
        "import json\n"
        "from libreyolo.kernels import active, explain\n"
        "from libreyolo.kernels.quant.simulate.plan import PLANNERS\n"
        "reasons = {s: dict((i.name, r) for i, r in explain(s)).get('triton') for s in PLANNERS}\n"
        "print(json.dumps({'active': active(), 'reasons': reasons}))",
        block_triton=True,
    )
    for slot in PLANNERS:
        assert result["active"][slot] == "reference"
        assert "triton_ready" in result["reasons"][slot]


@pytest.mark.parametrize("error_id", ERRORS)
def test_accepts_raises_the_reference_error_instead_of_declining(error_id):
    case = ERRORS[error_id]
    args, kwargs = make_arguments(case, torch.float32)
    accepts = triton_provider._implementation(case["slot"])[1]
    with pytest.raises((TypeError, ValueError)) as expected:
        getattr(reference, case["slot"])(*args, **kwargs)
    with pytest.raises(expected.type) as got:
        accepts(*args, **kwargs)
    assert str(got.value) == str(expected.value)


def _accepts(slot: str):
    return triton_provider._implementation(slot)[1]


def _registered(slot: str):
    return next(impl for impl in registered(slot) if impl.name == "triton")


@pytest.mark.skipif(interpreting(), reason="CPU tensors are the interpreter's")
def test_a_cpu_tensor_is_declined_for_the_compiled_kernels_by_the_declared_modes():
    for _ in range(2):  # planned, then from the kept layout
        reason = answer(_registered("fake_quant_mxfp4_dynamic"), (torch.randn(4, 64),))
        assert "mode cpu not in declared modes interpreter, cuda, cuda-graph" in reason


def test_graph_capture_is_declined_so_exports_keep_the_portable_math():
    reasons = []
    x = torch.randn(4, 64)
    _accepts("fake_quant_fp8")(x)  # a layout kept for this description: capture still declines

    def quantize(x):
        reasons.append(answer(_registered("fake_quant_fp8"), (x,)))
        return x * 2

    torch.jit.trace(quantize, (x,))
    assert "graph is being captured" in reasons[0]


def test_groups_wider_than_one_program_are_declined():
    w = torch.randn(2, 20000)
    assert "at most 8192" in _accepts("fake_quant_int_grouped")(w, 4, 10000)

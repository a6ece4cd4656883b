"""The hostile-input suite under TRITON_INTERPRET=1 (run in a child process by
``test_hostile_interpreter.py``): the Triton implementations take CPU tensors here, so each try
meets their ``accepts`` and kernels' checks first, and must give the error it gives on CPU."""

from __future__ import annotations

import os

import pytest

from libreyolo.kernels import candidates
from libreyolo.kernels.slots import slot_names

from .attempt import attempt, valid_call
from .cases import TRIES
from .results import RESULTS, check

pytestmark = [
    pytest.mark.usefixtures("isolated_registry"),
    pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                       reason="run by test_hostile_interpreter.py with TRITON_INTERPRET=1"),
]


@pytest.mark.parametrize("slot", ["ms_deform_attn", "ms_deform_attn_ragged", "fake_quant_fp8",
                                  "fake_quant_int_grouped", "unpack_int_grouped",
                                  "fp8_cast_static"])
def test_the_triton_implementations_are_first_here(slot):
    assert candidates(slot)[0].name == "triton", [i.name for i in candidates(slot)]


@pytest.mark.parametrize("t", [t for t in TRIES if "interpreter" in t.devices],
                         ids=lambda t: t.id)
def test_under_the_interpreter(t):
    attempt(t, "interpreter")


@pytest.mark.parametrize("r", RESULTS, ids=lambda r: r.id)
def test_the_same_result_under_the_interpreter(r):
    check(r, "interpreter")


@pytest.mark.parametrize("slot", slot_names())
def test_a_valid_call_disables_nothing_interpreter(slot):
    valid_call(slot, "interpreter")

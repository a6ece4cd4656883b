"""The hostile-input suite (issue 35) on CPU and on CUDA; the interpreter's run is
``test_hostile_interpreter.py``. The tries are data: ``cases.py``."""

from __future__ import annotations

import os

import pytest
import torch

from libreyolo.kernels.slots import slot_names

from .attempt import attempt, valid_call
from .cases import ARGUMENTS, TRIES
from .results import RESULTS, check

pytestmark = pytest.mark.usefixtures("isolated_registry")

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"


@pytest.mark.skipif(INTERPRETING, reason="the interpreter's run is the child's")
@pytest.mark.parametrize("t", [t for t in TRIES if "cpu" in t.devices], ids=lambda t: t.id)
def test_on_cpu(t):
    attempt(t, "cpu")


@CUDA
@pytest.mark.gpu
@pytest.mark.skipif(INTERPRETING, reason="compiled kernels cannot share the interpreter's process")
@pytest.mark.parametrize("t", [t for t in TRIES if "cuda" in t.devices], ids=lambda t: t.id)
def test_on_cuda(t):
    attempt(t, "cuda")


def test_every_argument_of_every_entry_point_is_tried():
    tried: dict[str, set[str]] = {}
    for t in TRIES:
        tried.setdefault(t.entry, set()).update(t.names)
    missing = {entry: sorted(set(names) - tried.get(entry, set()))
               for entry, names in ARGUMENTS.items() if set(names) - tried.get(entry, set())}
    assert not missing, f"arguments no try names: {missing}"


def test_every_try_runs_where_its_input_can_be_built():
    for t in TRIES:
        assert "cpu" in t.devices and "interpreter" in t.devices, t.id
        assert set(t.devices) <= {"cpu", "interpreter", "cuda"}, t.id


def test_every_class_of_the_issue_has_tries():
    classes = {c for t in TRIES for c in t.classes}
    assert {0, 1, 4, 5, 6, 7} <= classes, classes


@pytest.mark.skipif(INTERPRETING, reason="the interpreter's run is the child's")
@pytest.mark.parametrize("r", RESULTS, ids=lambda r: r.id)
def test_the_same_result_on_cpu(r):
    check(r, "cpu")


@CUDA
@pytest.mark.gpu
@pytest.mark.skipif(INTERPRETING, reason="compiled kernels cannot share the interpreter's process")
@pytest.mark.parametrize("r", RESULTS, ids=lambda r: r.id)
def test_the_same_result_on_cuda(r):
    check(r, "cuda")


@CUDA
@pytest.mark.gpu
@pytest.mark.skipif(INTERPRETING, reason="compiled kernels cannot share the interpreter's process")
@pytest.mark.parametrize("slot", slot_names())
def test_a_valid_call_disables_nothing_cuda(slot):
    valid_call(slot, "cuda")

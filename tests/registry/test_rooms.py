"""The registry is a package of rooms behind one face: a name set on ``libreyolo.kernels.registry``
reaches the room that reads it, the state read through it is the current one, and no room
imports the slot operators (they run the registry's selection and install the hook a compiled
call goes through). A direct call's ``plan_or_raise`` reads an answer by the same selection step
as a call."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from libreyolo.kernels import registry
from libreyolo.kernels.prepared import Prepared
from libreyolo.kernels.registry import environment, state

SLOT = "fake_quant_fp8"


def test_state_set_through_the_face_is_the_rooms_and_reads_back_current(clean_registry,
                                                                         monkeypatch):
    monkeypatch.setattr(registry, "JUDGE_OUTPUTS", False)
    assert state.JUDGE_OUTPUTS is False
    before = registry._generation
    registry.register(SLOT, lambda x, scale=None, *, fmt="e4m3", axis=None: x, name="mine")
    assert registry._generation == state._generation > before


def test_a_function_set_through_the_face_is_the_one_its_room_calls(clean_registry, monkeypatch):
    registry.register(SLOT, lambda x, scale=None, *, fmt="e4m3", axis=None: x, name="listed")
    monkeypatch.setattr(registry, "awaiting_record", lambda: frozenset({f"{SLOT}/listed"}))
    registry.clear_cache()
    assert environment.awaiting_record is registry.awaiting_record
    assert "awaiting a green CUDA parity record" in registry.explain(SLOT)[0][1]


def test_the_registry_imports_no_operators_and_a_compiled_call_loads_them():
    code = textwrap.dedent(
        """
        import json, sys, torch
        from libreyolo.kernels import ops
        before = "libreyolo.kernels.operators" in sys.modules
        x = torch.linspace(-3, 3, 64).reshape(8, 8)
        compiled = torch.compile(lambda t: ops.fake_quant_fp8(t), backend="eager", fullgraph=True)
        same = torch.equal(compiled(x), ops.fake_quant_fp8(x))
        print(json.dumps({"before": before, "same": same,
                          "after": "libreyolo.kernels.operators" in sys.modules}))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"before": False, "same": True, "after": True}



class _Plan(Prepared):
    __slots__ = ()


@pytest.mark.parametrize(("answer", "raised"), [
    (None, None),
    (_Plan(), None),
    ("too small", "fake_quant_fp8 mine implementation declines this input: too small"),
    (5, "accepts\\(\\) returned 5 \\(int\\); it must return None"),
])
def test_a_direct_call_gets_the_plan_or_its_decline_raised(clean_registry, answer, raised):
    impl = registry.register(SLOT, lambda x, scale=None, *, fmt="e4m3", axis=None: x,
                             name="mine", accepts=lambda *a, **k: answer)
    x = torch.ones(4)
    if raised is None:
        assert registry.plan_or_raise(impl, (x,)) is answer
    else:
        with pytest.raises(ValueError, match=raised):
            registry.plan_or_raise(impl, (x,))

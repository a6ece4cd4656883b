"""Replays one saved failing example: `pytest conformance/test_replay.py --replay FILE`."""

import pytest
import torch

from conformance.catalogue import slot
from conformance.inputs import shapesets
from conformance.running import outcomes, replay
from conformance.running.cells import CellPlan, make_inputs, run_cell


def test_replay(request):
    path = request.config.getoption("replay")
    if not path:
        pytest.skip("nothing to replay: pass --replay FILE (printed by a failing example)")
    plan, inputs = replay.load(path)
    cell = run_cell(slot(plan.slot), plan, inputs=inputs)
    outcomes.conclude(cell, outcomes.rerun_command(request.config, request.node.nodeid,
                                                   "--replay", path))


def test_a_saved_example_prints_its_plan_and_inputs(tmp_path, capsys):
    """`python -m conformance.running.replay FILE` shows what failed without running it: the
    plan, and each argument with its dtype, shape, strides, storage offset and values."""
    spec = slot("fake_quant_int8_per_channel")
    case = next(c for c in shapesets.load(spec.shapes) if c.name == "one_element")
    plan = CellPlan(spec.name, "example-correct", "cpu", torch.float16, case, "gapped", 7)
    path = replay.save(tmp_path, plan, make_inputs(spec, plan))
    assert replay.main([str(path)]) == 0
    printed = capsys.readouterr().out
    assert "slot fake_quant_int8_per_channel, implementation example-correct, mode cpu, dtype " \
           "float16, layout gapped, seed 7" in printed
    assert "case one_element (awkward: a single weight): {'shape': [1], 'axis': 0}" in printed
    assert "args[0]: float16 (1,), strides (2,), storage offset 1" in printed
    assert "args[2]: 0" in printed

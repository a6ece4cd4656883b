"""Replays one saved failing example: `pytest conformance/test_replay.py --replay FILE`."""

import pytest

from conformance import outcomes, replay
from conformance.catalogue import slot
from conformance.cells import run_cell


def test_replay(request):
    path = request.config.getoption("replay")
    if not path:
        pytest.skip("nothing to replay: pass --replay FILE (printed by a failing example)")
    plan, inputs = replay.load(path)
    cell = run_cell(slot(plan.slot), plan, inputs=inputs)
    outcomes.conclude(cell, outcomes.rerun_command(request.config, request.node.nodeid,
                                                   "--replay", path))

"""Hypothesis layouts: shapes, axes, group sizes, dtypes, strided views and seeds the shape sets
do not enumerate, for every slot x implementation x mode. A failure saves its inputs and prints
the command that replays them (`conformance/test_replay.py --replay FILE`)."""

from hypothesis import given
from hypothesis import strategies as st

from conformance.catalogue import slot
from conformance.inputs import strategies
from conformance.running import outcomes, replay
from conformance.running.cells import CellPlan, make_inputs, run_cell
from conformance.running.matrix import Cell


def test_layouts(layout_target, run_options, record_cell, request):
    slot_name, impl, mode = layout_target
    spec = slot(slot_name)
    counts = {"pass": 0, "not-applicable": 0}
    declined = []
    failures_dir = replay.failures_dir(request.config)

    @strategies.hypothesis_settings(run_options.profile)
    @given(data=st.data())
    def explore(data):
        case = data.draw(spec.strategy(), label="case")
        dtype = data.draw(st.sampled_from(spec.dtypes), label="dtype")
        layout = data.draw(st.sampled_from(spec.layouts), label="layout")
        seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
        plan = CellPlan(slot_name, impl, mode, dtype, case, layout, seed)
        cell = run_cell(spec, plan)
        if cell.state in ("fail", "crash"):
            path = replay.save(failures_dir, plan, make_inputs(spec, plan))
            command = outcomes.rerun_command(request.config, "conformance/test_replay.py",
                                             "--replay", str(path))
            raise AssertionError(f"{cell.state} on {dict(case.params)} {dtype} {layout}: "
                                 f"{outcomes.described(cell)}\ninputs: python -m "
                                 f"conformance.running.replay {path}\nreproduce: {command}")
        counts[cell.state] += 1
        if cell.state == "not-applicable":
            declined.append(cell)

    state, reason = "crash", "the exploration raised before it could conclude"
    reproduce = outcomes.rerun_command(request.config, request.node.nodeid)
    try:
        explore()
        state, reason = ("pass", None) if counts["pass"] or not declined else \
            ("not-applicable", declined[-1].reason)
    except AssertionError as exc:
        state, reason = "fail", str(exc).splitlines()[0]
        reproduce = str(exc).rpartition("reproduce: ")[2] if "reproduce: " in str(exc) \
            else reproduce
        raise
    finally:
        record_cell(Cell(slot_name, impl, mode, "any", "hypothesis", "small", state,
                         reason=reason, measurements=counts, origin="hypothesis",
                         reproduce=reproduce,
                         declined_by=declined[-1].declined_by if state == "not-applicable"
                         else None))

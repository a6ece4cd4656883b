"""The matrix: every catalogue slot x registered implementation x mode x dtype x shape-set case."""


from conformance.catalogue import slot
from conformance.running import outcomes
from conformance.running.cells import run_cell


def test_cell(cell_plan, record_cell, request):
    cell = run_cell(slot(cell_plan.slot), cell_plan)
    cell.reproduce = outcomes.rerun_command(request.config, request.node.nodeid)
    record_cell(cell)
    outcomes.conclude(cell, cell.reproduce)

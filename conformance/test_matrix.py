"""The matrix: every catalogue slot x registered implementation x mode x dtype x shape-set case."""


from conformance import outcomes
from conformance.catalogue import slot
from conformance.cells import run_cell


def test_cell(cell_plan, record_cell, request):
    cell = run_cell(slot(cell_plan.slot), cell_plan)
    cell.reproduce = outcomes.rerun_command(request.config, request.node.nodeid)
    record_cell(cell)
    outcomes.conclude(cell, cell.reproduce)

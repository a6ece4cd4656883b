"""Records: written per implementation once all its tests reported, with what the gate checks."""

from pathlib import Path

import pytest
import torch

from conformance.catalogue import slot
from conformance.evidence import records, rederive
from conformance.evidence.recorder import Recorder, slot_impl
from conformance.inputs.shapesets import load
from conformance.reporting.render import generated_block, records_table
from conformance.running.cells import CellPlan, input_seed, run_cell

NODE = "conformance/test_matrix.py::test_cell[fake_quant_fp8:triton:cuda:{}]"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "conformance.md"
IDS = [NODE.format("float32:a@contiguous"), NODE.format("float16:a@contiguous")]


def reference_cell(seed=0, dtype=torch.float32):
    spec = slot("fake_quant_fp8")
    case = load(spec.shapes)[0]
    plan = CellPlan(spec.name, "reference", "cpu", dtype, case, "contiguous",
                    input_seed(seed, spec.name, case.name, dtype, "contiguous"))
    return run_cell(spec, plan)


def test_node_ids_name_their_slot_and_implementation():
    assert slot_impl(IDS[0]) == ("fake_quant_fp8", "triton")
    assert slot_impl("conformance/test_layouts.py::test_layouts[ms_deform_attn:triton:cuda]") \
        == ("ms_deform_attn", "triton")
    other = "conformance/test_gate_records.py::test_recorded[fake_quant_fp8:triton:cuda|x]"
    assert slot_impl(other) is None


def test_a_record_is_written_only_once_every_test_of_its_implementation_reported(tmp_path):
    recorder = Recorder("thorough", 0, tmp_path)
    recorder.expect(IDS)
    recorder.report(IDS[0], [reference_cell()])
    assert not recorder.written
    recorder.report(IDS[1], [reference_cell(dtype=torch.float16)])
    record = records.load("fake_quant_fp8", "triton", tmp_path)
    assert recorder.written and record["complete"] and record["profile"] == "thorough"
    assert record["counts"]["state"] == {"pass": 2}
    assert {"commit", "dirty"} <= record["git"].keys() and "torch" in record["machine"]
    assert any(name.endswith("fake_quant.py") for name in record["source_files"])


def test_a_test_that_reported_no_cell_leaves_the_record_incomplete(tmp_path):
    recorder = Recorder("thorough", 0, tmp_path)
    recorder.expect(IDS)
    recorder.report(IDS[0], [reference_cell()])
    recorder.report(IDS[1], [])
    assert records.load("fake_quant_fp8", "triton", tmp_path)["complete"] is False


def test_recorded_output_digests_are_recomputable_from_the_cpu_reference():
    cell = reference_cell(seed=7)
    assert rederive.exact_digest("fake_quant_fp8", 7, cell.dtype, cell.case) == \
        cell.measurements["output_digest"]


def test_a_records_counts_are_derived_from_its_cells(tmp_path):
    recorder = Recorder("thorough", 0, tmp_path)
    recorder.expect(IDS)
    recorder.report(IDS[0], [reference_cell()], seconds=1.5)
    recorder.report(IDS[1], [reference_cell(dtype=torch.float16)], seconds=2.0)
    record = records.load("fake_quant_fp8", "triton", tmp_path)
    assert record["counts"] == records.counts(record["cells"]) and record["test_seconds"] == 3.5


def test_a_bounded_cell_records_the_reference_side_cpu_ci_rederives():
    from libreyolo.kernels import register, unregister

    spec = slot("ms_deform_attn")
    case = next(c for c in load(spec.shapes) if c.name == "detr_4level_mini")  # small: CPU time
    plan = CellPlan(spec.name, "portable-under-test", "cpu", torch.float32, case, "contiguous",
                    input_seed(0, spec.name, case.name, torch.float32, "contiguous"))
    register(spec.name, spec.portable, name=plan.impl)
    try:
        cell = run_cell(spec, plan)
    finally:
        unregister(spec.name, plan.impl)
    assert cell.state == "pass", cell.reason
    derived = rederive.bounded_side(spec.name, 0, "float32", f"{case.name}@contiguous")
    recorded = records._reference_side(cell)
    assert rederive.bounded_mismatch(recorded, derived, same_torch=True) is None
    recorded["output"]["portable_err"] *= 1.01
    assert "portable_err" in rederive.bounded_mismatch(recorded, derived, same_torch=True)


def _config(args, **narrowing):
    from types import SimpleNamespace

    from conformance.evidence.provenance import ROOT

    option = {"keyword": "", "markexpr": "", "ignore": None, "ignore_glob": None,
              "deselect": None, **narrowing}
    return SimpleNamespace(args=args, invocation_params=SimpleNamespace(dir=ROOT),
                           option=SimpleNamespace(**option))


@pytest.mark.parametrize("args, narrowing, refused", [
    (["conformance/"], {}, False),
    (["conformance"], {}, False),
    (["conformance/test_layouts.py"], {}, True),
    (["conformance/test_matrix.py", "conformance/test_layouts.py"], {}, True),
    (["conformance"], {"deselect": ["conformance/test_matrix.py::test_cell[x]"]}, True),
    (["conformance"], {"ignore": ["conformance/test_layouts.py"]}, True),
    (["conformance"], {"keyword": "fp8"}, True),
])
def test_only_a_run_of_the_whole_suite_writes_records(monkeypatch, args, narrowing, refused):
    from types import SimpleNamespace

    from conformance import plugin
    from conformance.evidence.records import RECORD_PROFILE

    thorough = SimpleNamespace(profile=SimpleNamespace(name=RECORD_PROFILE))
    monkeypatch.setattr(plugin, "options", lambda config: thorough)
    assert (plugin._record_refusal(_config(args, **narrowing)) is not None) is refused


def test_a_bounded_records_worst_case_is_its_error_as_a_fraction_of_the_bound():
    from conformance.running.matrix import Cell

    cells = [Cell("ms_deform_attn", "triton", "cuda", "float32", f"c{i}@contiguous", "small",
                  "pass", measurements={"output": {"max_abs_err": err, "bound": 4e-6}})
             for i, err in enumerate((1e-6, 3e-6))]
    worst = records._worst(cells)["output_error_over_bound"]
    assert worst == {"value": 0.75, "cell": "cuda float32 c1@contiguous"}


def test_the_docs_records_table_is_generated_from_the_committed_records(whole_suite):
    table = generated_block(DOCS.read_text(), "records-table")
    assert table == records_table(), "regenerate: python -m conformance.reporting.render --records"

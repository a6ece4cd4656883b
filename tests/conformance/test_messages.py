"""Failure messages a backend author can act on: the first mismatch's logical index, both values
with their bits in hex, the input element there (with its storage offset for a view), and the
parameters that applied; the console names the failed check, an input decline included."""

import re

import torch

from conformance.catalogue import slot
from conformance.inputs import shapesets
from conformance.negative import load_controls
from conformance.running import outcomes
from conformance.running.cells import CellPlan, run_cell
from conformance.running.matrix import Cell

CONTROLS = {c.name: c for c in load_controls()}


def failing_cell(control_name: str, case_name: str, layout: str) -> Cell:
    control = CONTROLS[control_name]
    spec = slot(control.slot)
    case = next(c for c in shapesets.load(spec.shapes) if c.name == case_name)
    control.register()
    try:
        return run_cell(spec, CellPlan(spec.name, control.name, "cpu", torch.float32, case,
                                       layout, 5))
    finally:
        control.unregister()


def test_an_exact_mismatch_names_index_bits_input_element_view_offset_and_scale():
    cell = failing_cell("negative-ties_away_from_zero", "yolov8n_head_conv_input_axis", "gapped")
    assert cell.failed_checks == ["exact"]
    hex_value = r"-?[\d.e+-]+ \(0x[0-9a-f]{8}\)"
    assert re.search(rf"first at index \(\d+, \d+\): {hex_value} != expected {hex_value}; "
                     rf"input\[\d+, \d+\] = {hex_value}, at storage offset \d+ \(strides "
                     rf"\(129, 2\), offset 1\), scale {hex_value}", cell.reason), cell.reason


def test_a_nan_payload_difference_shows_the_bits():
    cell = failing_cell("negative-nan_to_zero", "yolov8n_conv_per_tensor_e4m3", "contiguous")
    assert re.search(r"0\.0 \(0x00000000\) != expected nan \(0x7fc00000\); input\[[\d, ]+\] = "
                     r"nan \(0x[0-9a-f]{8}\), scale", cell.reason), cell.reason


def test_the_console_names_an_accepts_failure():
    cell = Cell("fake_quant_fp8", "mine", "cpu", "float16", "c@gapped", "small", "fail",
                failed_checks=["accepts"], reason="float16 not supported")
    assert outcomes.described(cell) == ("accepts: declined a case the catalogue holds mine to "
                                        "(cpu, float16, c@gapped): float16 not supported")

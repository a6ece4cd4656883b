"""The Triton unpack provider's registration and eligibility, checked without running a kernel.

These run in any CPU process; the kernel itself is checked by ``unpack_checks.py`` (under the
interpreter in CI, compiled on a CUDA machine) and by the conformance suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from unpack_inputs import ERRORS, SLOTS, error_arguments, int_grouped_tables, mx_table

from libreyolo.kernels import registered
from libreyolo.kernels.quant.execute import unpack_plan, unpack_provider
from libreyolo.kernels.quant.execute.unpack_plan import PLANNERS, decline_reason
from libreyolo.kernels.registry import answer
from libreyolo.kernels.settings import interpreting
from libreyolo.quant import packing as reference

PROVIDER = "libreyolo.kernels.quant.execute.unpack_provider"


def _fresh_python(code: str, *, block_triton: bool) -> dict:
    """Run ``code`` in a fresh interpreter (optionally one where triton cannot be imported)
    and return the JSON object its last line prints."""
    prologue = "import sys\nsys.modules['triton'] = None\n" if block_triton else ""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", prologue + code], capture_output=True,
                          text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_the_provider_imports_no_triton():
    result = _fresh_python(f"import json, sys, {PROVIDER}\n"
                           "print(json.dumps({'triton': 'triton' in sys.modules}))",
                           block_triton=False)
    assert result == {"triton": False}


def test_without_triton_every_unpack_slot_is_registered_but_the_reference_runs():
    result = _fresh_python(
        "import json\n"
        "from libreyolo.kernels import active, explain\n"
        f"slots = {list(SLOTS)!r}\n"
        "reasons = {s: dict((i.name, r) for i, r in explain(s)).get('triton') for s in slots}\n"
        "print(json.dumps({'active': active(), 'reasons': reasons}))",
        block_triton=True)
    for slot in SLOTS:
        assert result["active"][slot] == "reference"
        assert "triton_ready" in result["reasons"][slot]


def test_every_unpack_slot_has_the_triton_implementation_with_its_sources():
    """Whether each awaits its record is the gate's business
    (tests/conformance/test_gate_records.py)."""
    assert set(PLANNERS) == set(SLOTS)
    for slot in SLOTS:
        (impl,) = [i for i in registered(slot) if i.name == "triton"]
        assert impl.sources == unpack_provider.SOURCES
        assert all(os.path.isfile(path) for path in impl.sources)


@pytest.mark.parametrize("error_id", ERRORS)
def test_accepts_raises_the_reference_error_instead_of_declining(error_id):
    case = ERRORS[error_id]
    args, kwargs = error_arguments(case)
    (impl,) = [i for i in registered(case["slot"]) if i.name == "triton"]
    with pytest.raises((TypeError, ValueError)) as expected:
        getattr(reference, case["slot"])(*args, **kwargs)
    assert type(expected.value).__name__ == case["raises"]
    with pytest.raises(expected.type) as got:
        impl.accepts(*args, **kwargs)
    assert str(got.value) == str(expected.value)


@pytest.mark.skipif(interpreting(), reason="CPU tensors are the interpreter's")
def test_cpu_tensors_are_declined_for_the_compiled_kernel_by_the_declared_modes():
    (impl,) = [i for i in registered("unpack_mxfp8") if i.name == "triton"]
    reason = answer(impl, mx_table("unpack_mxfp8"))
    assert "mode cpu not in declared modes interpreter, cuda, cuda-graph" in reason


def test_codes_and_scales_on_different_devices_are_the_callers_error_as_in_the_reference():
    """Issue 35: the reference never checked its scales' device (it failed deep inside torch);
    the shared check now refuses it, naming the scale, on every path."""
    codes, scale = mx_table("unpack_mxfp8")
    with pytest.raises(ValueError, match=r"^scale must be on cpu \(the codes' device\), got meta"):
        PLANNERS["unpack_mxfp8"](codes, scale.to("meta"))


def test_a_scale_that_requires_grad_is_left_to_the_reference_which_keeps_autograd():
    codes, scale, bits, group_size, in_features = int_grouped_tables()[1]
    scale = scale.abs().requires_grad_(True)
    plan = PLANNERS["unpack_int_grouped"](codes, scale, bits, group_size, in_features)
    assert "no backward" in decline_reason(plan)
    with torch.no_grad():
        assert "no backward" not in (decline_reason(plan) or "")


def test_graph_capture_is_declined_so_exports_keep_the_portable_math():
    reasons = []
    codes, scale, in_features = mx_table("unpack_mxfp4")
    (impl,) = [i for i in registered("unpack_mxfp4") if i.name == "triton"]

    def unpack(scale_as_float):
        reasons.append(answer(impl, (codes, scale, in_features)))
        return scale_as_float * 2

    torch.jit.trace(unpack, (scale.float(),))
    assert "graph is being captured" in reasons[0]


# Arguments equal (and hashing alike) to ones a call has planned, of a type the checks reject.
EQUAL_BUT_WRONG_TYPE = [("bits", 4.0), ("group_size", True), ("in_features", 4.0)]


@pytest.mark.parametrize("name, value", EQUAL_BUT_WRONG_TYPE,
                         ids=[n for n, _ in EQUAL_BUT_WRONG_TYPE])
def test_a_planned_description_does_not_let_an_equal_value_of_another_type_through(name, value):
    """Plans are cached by a description of the arguments; 4.0 == 4 and True == 1 hash alike,
    so the description holds each argument's type, and the reference's error still comes."""
    good = {"codes": torch.zeros(2, 2, dtype=torch.uint8),
            "scale": torch.ones(2, 4, dtype=torch.float32), "bits": 4, "group_size": 1,
            "in_features": 4}
    (impl,) = [i for i in registered("unpack_int_grouped") if i.name == "triton"]
    impl.accepts(**good)  # planned (or declined on this device): the description is cached
    bad = dict(good, **{name: value})
    with pytest.raises(TypeError) as expected:
        reference.unpack_int_grouped(**bad)
    with pytest.raises(TypeError) as got:
        impl.accepts(**bad)
    assert str(got.value) == str(expected.value)


def test_the_plan_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(unpack_plan, "_CACHE", unpack_plan.PlanCache(2))
    for rows in (1, 2, 3):
        PLANNERS["unpack_mxfp8"](torch.zeros(rows, 32, dtype=torch.float8_e4m3fn),
                                 torch.zeros(rows, 1, dtype=torch.uint8))
    assert 0 < len(unpack_plan._CACHE) <= 2


@pytest.mark.parametrize("rounding", [*unpack_plan.BF16_ROUNDINGS, "fast"])
def test_the_bfloat16_rounding_switch_reaches_the_kernel_arguments_of_bfloat16_plans(
        rounding, monkeypatch):
    """``BF16_ROUNDING`` (``bench_unpack.py --bf16-rounding``) decides the kernel's last
    argument, ``HARDWARE_BF16``: True only for bfloat16 outputs of the compiled kernel under
    ``"hardware"`` (float32 and float16 plans pass False: their kernels do not convert to
    bfloat16); an unknown value is an error naming the choices, not a silent default."""
    monkeypatch.setattr(unpack_plan, "BF16_ROUNDING", rounding)
    monkeypatch.setattr(unpack_plan, "_CACHE", unpack_plan.PlanCache(8))
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        if rounding not in unpack_plan.BF16_ROUNDINGS:
            with pytest.raises(ValueError, match="BF16_ROUNDING must be one of"):
                PLANNERS["unpack_mxfp8"](*mx_table("unpack_mxfp8"), dtype=dtype)
            continue
        plan = PLANNERS["unpack_mxfp8"](*mx_table("unpack_mxfp8"), dtype=dtype)
        hardware = dtype == torch.bfloat16 and rounding == "hardware" and not interpreting()
        assert plan.work.kernel_args[-1] is hardware, (dtype, plan.work.kernel_args)


@pytest.mark.parametrize("capability, dtype, viewed", [
    ((8, 0), torch.float8_e4m3fn, True), ((8, 9), torch.float8_e4m3fn, False),
    ((9, 0), torch.float8_e4m3fn, False), ((8, 0), torch.uint8, False)])
def test_float8_tensors_are_viewed_as_bytes_only_where_triton_takes_no_float8_pointer(
        monkeypatch, capability, dtype, viewed):
    """An A100 (sm_80) cannot compile the kernel with a float8 pointer argument: its calls pass
    uint8 views; an H200 reads the float8 tensors itself, without a view per call."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    tensors = (torch.zeros(4, dtype=torch.uint8).view(dtype), torch.zeros(4, dtype=torch.uint8))
    assert unpack_plan.byte_views(tensors, torch.device("cuda", 0)) is viewed
    assert unpack_plan.byte_views(tensors, torch.device("cpu")) is False

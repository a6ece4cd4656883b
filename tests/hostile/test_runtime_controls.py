"""Implementations that give back what no caller can use (issue 35, class 3): each negative
control of ``conformance/negative/runtime.py`` is disabled with exactly one warning on every
path, the next implementation answers, and its conformance cell fails by the check it names
(never passes because another implementation answered for it)."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch

from conformance.negative import load_controls
from conformance.negative.runtime import NO_REF, WITH_REF
from conformance.test_negative_controls import first_rejection
from libreyolo.kernels import KernelDisabledWarning, dispatch, ops, registry, resolve
from libreyolo.kernels.attention.ms_deform_attn.portable import ms_deform_attn_portable
from libreyolo.quant.fake_quant import fake_quant_int8_per_channel

CONTROLS = load_controls("RUNTIME_CONTROLS")
ENTRY_POINTS = {
    "ops": lambda op: getattr(ops, op),
    "dispatch": lambda op: functools.partial(dispatch, op),
    "resolve": lambda op: resolve(op),
}


def valid_input(op: str) -> tuple:
    gen = torch.Generator().manual_seed(0)
    if op == WITH_REF:
        return torch.randn(4, 6, generator=gen), torch.full((4,), 0.05)
    return (torch.randn(1, 6, 2, 4, generator=gen), [(2, 3)],
            torch.rand(1, 5, 2, 1, 3, 2, generator=gen), torch.rand(1, 5, 2, 1, 3, generator=gen))


def right_answer(op: str, args: tuple) -> torch.Tensor:
    return (fake_quant_int8_per_channel if op == WITH_REF else ms_deform_attn_portable)(*args)


def test_there_is_a_control_for_each_way_to_give_back_the_wrong_thing():
    names = {c.name.removeprefix("negative-") for c in CONTROLS}
    for op in (WITH_REF, NO_REF):
        for how in ("raises", "wrong_shape", "wrong_dtype", "wrong_device", "returns_none",
                    "returns_generator", "answers_through_dispatch"):
            assert f"{op}-{how}" in names


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("control", CONTROLS, ids=lambda c: c.name)
def test_the_registry_disables_it_once_and_the_next_implementation_answers(
        control, entry, isolated_registry):
    control.register()
    args = valid_input(control.slot)
    call = ENTRY_POINTS[entry](control.slot)
    with pytest.warns(KernelDisabledWarning, match=control.name) as record:
        out = call(*args)
    assert len([w for w in record if w.category is KernelDisabledWarning]) == 1
    assert (control.slot, control.name) in registry.failures()
    want = right_answer(control.slot, args)
    if control.slot == NO_REF and not control.name.endswith("answers_through_dispatch"):
        assert out is None  # the caller's portable path answers
    else:
        assert torch.equal(out, want)
    with warnings.catch_warnings():  # disabled: later calls neither warn nor call it
        warnings.simplefilter("error", KernelDisabledWarning)
        again = ENTRY_POINTS[entry](control.slot)
        out = again(*args) if again is not None else None
    assert out is None or torch.equal(out, want)


@pytest.mark.parametrize("registered_control", CONTROLS, indirect=True, ids=lambda c: c.name)
def test_its_conformance_cell_fails_by_the_check_it_names(registered_control, run_options,
                                                          whole_suite):
    control = registered_control
    if run_options.interpreter:
        pytest.skip("negative controls are PyTorch code: the interpreter adds nothing")
    cell, others = first_rejection(control, run_options)
    assert cell is not None, (
        f"{control.name} passed the '{control.check}' check on every case: {control.why}. "
        f"Other rejections: {[(c.case, c.failed_checks) for c in others[:3]]}")

"""The registry's judge (issue 35, classes 1 and 3): a call is bound to its slot's signature
before anything runs; what an implementation returns is judged against the slot's declared
output; an implementation that may write its inputs gets no fallback."""

from __future__ import annotations

import warnings

import pytest
import torch

from libreyolo.kernels import (
    KernelDisabledWarning,
    KernelOutputError,
    dispatch,
    ops,
    register,
    registry,
)
from libreyolo.kernels.slots import SLOTS, get_slot

from .cases import valid

pytestmark = pytest.mark.usefixtures("isolated_registry")


def _gemm_inputs():
    a = torch.zeros(4, 32, dtype=torch.float8_e4m3fn)
    b = torch.zeros(6, 32, dtype=torch.float8_e4m3fn)
    return a, b, torch.tensor(1.0), torch.tensor(1.0)  # tensorwise scales


def test_a_keyword_the_gemm_slot_does_not_take_disables_nothing():
    """``ops.fp8_gemm(a, b, sa, sb, rowwise=False)`` returned None and disabled scaled_mm for
    the process: its accepts raised on the keyword, and the validator, which takes ``rowwise``,
    judged the input good. Here a stand-in with scaled_mm's strict signature."""

    def accepts(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16):
        return None

    def gemm(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16):
        return torch.zeros(a.shape[0], b.shape[0], dtype=out_dtype)

    register("fp8_gemm", gemm, name="strict", accepts=accepts)
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelDisabledWarning)
        with pytest.raises(TypeError, match=r"^fp8_gemm\(a, b, scale_a, scale_b, bias=None, "
                                            r"out_dtype=torch.bfloat16\): got an unexpected "
                                            r"keyword argument 'rowwise'"):
            ops.fp8_gemm(*_gemm_inputs(), rowwise=False)
    assert registry.failures() == {}
    assert registry.candidates("fp8_gemm")[0].name == "strict"


def test_a_bad_input_of_a_slot_without_reference_raises_when_nothing_takes_it():
    """On CPU no implementation of ms_deform_attn runs: dispatch returned None for an input
    the interpreter and the portable core refuse; the validator now speaks on every path."""
    value, shapes, locations, weights = valid("ms_deform_attn", "cpu").args
    with pytest.raises(ValueError, match="len_in"):
        dispatch("ms_deform_attn", value[:, :-1], shapes, locations, weights)


@pytest.mark.parametrize("slot", [s.name for s in SLOTS])
def test_the_declared_output_is_what_the_fallback_returns(slot):
    """The judge's rule (``Slot.output``) and the fast check compiled from it agree with what
    each slot's reference or portable path returns for a valid call."""
    inputs = valid(slot, "cpu")
    declared = get_slot(slot)
    out = declared.load_portable()(*inputs.args, **inputs.kwargs)
    want = declared.expected_output(inputs.args, inputs.kwargs)
    parts = zip(out, want, strict=True) if type(want) is tuple else ((out, want),)
    for got, wanted in parts:
        assert wanted.mismatch(got) is None
    assert declared.fits(inputs.args, inputs.kwargs, out)


@pytest.mark.parametrize("slot", [s.name for s in SLOTS])
def test_a_valid_call_through_ops_disables_nothing(slot):
    inputs = valid(slot, "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelDisabledWarning)
        getattr(ops, slot)(*inputs.args, **inputs.kwargs)
    assert registry.failures() == {}


@pytest.mark.parametrize("slot", [s.name for s in SLOTS])
def test_the_fast_check_reads_the_arguments_however_a_call_spells_them(slot):
    """Positional, every argument by name, defaults given or left out: the fast check takes the
    declared output and refuses one of another shape, read from wherever the call put them."""
    inputs = valid(slot, "cpu")
    declared = get_slot(slot)
    portable = declared.load_portable()
    calls = [(inputs.args, inputs.kwargs)]
    for name in {"dtype", "out_dtype"} & set(declared.signature.parameters):
        for dtype in (torch.float16, torch.bfloat16):  # a dtype besides the default
            if dtype is not declared.signature.parameters[name].default:
                bound = declared.bind(inputs.args, inputs.kwargs)
                calls.append(declared.split({**bound, name: dtype}))
    for i, call in enumerate(calls):
        try:
            out = portable(*call[0], **call[1])
        except (TypeError, ValueError):  # another dtype the other arguments do not allow
            assert i > 0, "the catalogue's valid call"
            continue
        wrong = (out[0].unsqueeze(0), *out[1:]) if type(out) is tuple else out.unsqueeze(0)
        bound = declared.bind(*call)
        for args, kwargs in (call, ((), bound), declared.split(bound)):
            assert declared.fits(args, kwargs, out), (args, kwargs)
            assert not declared.fits(args, kwargs, wrong), (args, kwargs)


def _with_ref_input():
    return torch.randn(4, 6), torch.full((4,), 0.05)


def test_an_implementation_that_writes_its_inputs_gets_no_fallback_after_raising():
    """It may have written ``x`` already: the reference must not run the changed input (it
    would answer with numbers of the wrong input); its error propagates, and it is disabled."""
    register("fake_quant_int8_per_channel",
             lambda x, scale, axis=0: (x.add_(1), 1 / 0), name="in-place", writes_inputs=True)
    x, scale = _with_ref_input()
    with pytest.warns(KernelDisabledWarning, match="in-place failed") as record:
        with pytest.raises(ZeroDivisionError):
            dispatch("fake_quant_int8_per_channel", x, scale)
    assert len(record) == 1
    assert ("fake_quant_int8_per_channel", "in-place") in registry.failures()


def test_an_input_error_of_one_that_writes_its_inputs_propagates_and_disables_nothing():
    def rejects(x, scale, axis=0):
        raise ValueError("x: expected something else")

    register("fake_quant_int8_per_channel", rejects, name="in-place", writes_inputs=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelDisabledWarning)
        with pytest.raises(ValueError, match="expected something else"):
            dispatch("fake_quant_int8_per_channel", *_with_ref_input())
    assert registry.failures() == {}


def test_a_wrong_output_of_an_implementation_that_writes_its_inputs_is_an_error():
    register("fake_quant_int8_per_channel", lambda x, scale, axis=0: x.flatten(),
             name="in-place", writes_inputs=True)
    with pytest.warns(KernelDisabledWarning, match="in-place failed"):
        with pytest.raises(KernelOutputError, match=r"returned shape \(24,\), expected \(4, 6\)"):
            dispatch("fake_quant_int8_per_channel", *_with_ref_input())


def test_the_judge_can_be_switched_off_for_benchmarks_only(monkeypatch):
    """``registry.JUDGE_OUTPUTS`` (bench_host's judge off rows): off, a wrong shape reaches
    the caller, which is why nothing but the benchmark turns it off."""
    register("fake_quant_int8_per_channel", lambda x, scale, axis=0: x.flatten(), name="bad")
    monkeypatch.setattr(registry, "JUDGE_OUTPUTS", False)
    assert dispatch("fake_quant_int8_per_channel", *_with_ref_input()).shape == (24,)
    monkeypatch.setattr(registry, "JUDGE_OUTPUTS", True)
    with pytest.warns(KernelDisabledWarning):
        assert dispatch("fake_quant_int8_per_channel", *_with_ref_input()).shape == (4, 6)


def test_an_implementation_taking_any_keyword_does_not_make_a_bad_call_good():
    """The call is bound to the slot's signature before any implementation runs: one that
    ignores unknown keywords (``**kwargs``) cannot turn a typo into numbers."""
    register("fake_quant_int8_per_channel", lambda x, scale, axis=0, **kwargs: x.clone(),
             name="lenient")
    with pytest.raises(TypeError, match=r"^fake_quant_int8_per_channel\(x, scale, axis=0\): "
                                        r"got an unexpected keyword argument 'axes'"):
        dispatch("fake_quant_int8_per_channel", *_with_ref_input(), axes=1)
    assert registry.failures() == {}

"""Hostile registrations (issue #12): each test states what the registry does with one of them.

Every case here failed against the registry before the issue's change (checked by running this
file against that commit); the comments say what it did then.
"""

from __future__ import annotations

import functools
import inspect
import warnings

import pytest
import torch
from registry_helpers import NO_REF, WITH_REF, msda_input, tag_of, tagged
from test_imports import run_python

from libreyolo.kernels import (
    KernelDisabledWarning,
    SelectionWarning,
    dispatch,
    explain,
    register,
    registry,
    resolve,
    settings,
    unregister,
)
from libreyolo.kernels.prepared import Prepared

# NO_REF is judged by its declared validator, WITH_REF by its reference
pytestmark = pytest.mark.usefixtures("clean_registry")


def raising(error: Exception, calls: list | None = None):
    def impl(*args, **kwargs):
        if calls is not None:
            calls.append(1)
        raise error

    return impl


def test_a_kernel_failing_on_a_good_input_of_a_slot_without_reference_is_disabled_once():
    # before: dispatch returned None silently and called the kernel again on every call
    calls = []
    register(NO_REF, raising(ValueError("kernel bug"), calls), name="fast")
    with pytest.warns(KernelDisabledWarning, match="fast failed.*kernel bug") as record:
        assert dispatch(NO_REF, *msda_input()) is None
    assert len(record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dispatch(NO_REF, *msda_input()) is None
    assert calls == [1]


@pytest.mark.parametrize("entry", ["ops", "dispatch"])
def test_the_disabling_warning_names_the_callers_line_whichever_entry_point(entry):
    from libreyolo.kernels import ops

    register(WITH_REF, raising(RuntimeError("kernel bug")), name="fast")
    call = ops.fake_quant_fp8 if entry == "ops" else functools.partial(dispatch, WITH_REF)
    with pytest.warns(KernelDisabledWarning, match="fast failed") as record:
        line = inspect.currentframe().f_lineno + 1
        call(torch.ones(4))
    assert (record[0].filename, record[0].lineno) == (__file__, line)


def test_a_kernel_failing_on_an_input_the_validator_rejects_lets_the_validator_speak():
    # before: dispatch returned None; the caller's portable path then met the bad input
    register(NO_REF, raising(ValueError("kernel's own words")), name="fast")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="len_in=5"):
            dispatch(NO_REF, *msda_input(len_in=5))
    assert [i.name for i in registry.candidates(NO_REF)] == ["fast"]


@pytest.mark.parametrize("bug", [
    lambda x, scale=None: None,  # TypeError: fmt= is an unexpected keyword
    lambda *a, **k: int("accepts' own ValueError"),
], ids=["unexpected-keyword", "own-value-error"])
def test_a_buggy_accepts_disables_its_implementation_when_the_reference_takes_the_input(bug):
    # before: its TypeError/ValueError broke the op on every call, and explain() raised it
    register(WITH_REF, lambda *a, **k: "fast", name="fast", accepts=bug)
    x = torch.ones(4)
    reasons = {impl.name: reason for impl, reason in explain(WITH_REF, x, fmt="e5m2")}
    assert reasons["fast"].startswith("accepts() raised")
    with pytest.warns(KernelDisabledWarning, match="fast failed") as record:
        out = dispatch(WITH_REF, x, fmt="e5m2")
    assert len(record) == 1
    assert torch.equal(out, x)  # the reference's fake-quantized ones
    assert "disabled after a failure: accepts() raised" in dict(explain(WITH_REF))[
        registry.registered(WITH_REF)[0]]


def test_an_accepts_error_on_an_input_the_reference_rejects_too_is_the_reference_error():
    def accepts(x, *args, **kwargs):
        raise ValueError("accepts' words")

    register(WITH_REF, lambda *a, **k: "fast", name="fast", accepts=accepts)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="fmt must be one of"):
            dispatch(WITH_REF, torch.ones(4), fmt="e9m9")
    assert registry.candidates(WITH_REF)[0].name == "fast"


@pytest.mark.parametrize("answer", [True, False, 0, ["why"]], ids=repr)
def test_accepts_answering_neither_none_a_string_nor_a_plan_is_that_implementations_bug(answer):
    # before: any answer but None was read as a decline, silently
    register(WITH_REF, lambda *a, **k: "fast", name="fast", accepts=lambda *a, **k: answer)
    with pytest.warns(KernelDisabledWarning, match="must return None, a reason string or a"):
        out = dispatch(WITH_REF, torch.ones(4))
    assert torch.equal(out, torch.ones(4))
    assert registry.candidates(WITH_REF)[0].name == "reference"


@pytest.mark.parametrize("name", ["reference", " Reference ", "REFERENCE"])
def test_the_name_reference_cannot_be_registered_or_unregistered(name):
    # before: register replaced the slot's reference; unregister removed it
    reference = registry.candidates(WITH_REF)[-1]
    with pytest.raises(ValueError, match="name: 'reference' is the slot's reference"):
        register(WITH_REF, lambda *a, **k: "mine", name=name)
    with pytest.raises(ValueError, match="name: 'reference' is the slot's reference"):
        unregister(WITH_REF, name)
    assert registry.candidates(WITH_REF) == [reference]


@pytest.mark.parametrize("sources", ["abc", b"abc", 3, ["a.py", 3]], ids=repr)
def test_sources_must_be_an_iterable_of_paths(sources):
    # before: 'abc' became three one-letter paths
    with pytest.raises(TypeError, match="sources: expected"):
        register(NO_REF, lambda *a: None, name="a", sources=sources)


def test_sources_accepts_path_objects_and_stores_strings(tmp_path):
    entry = register(NO_REF, lambda *a: None, name="a", sources=[tmp_path / "k.py"])
    assert entry.sources == (str(tmp_path / "k.py"),)


def test_register_fail_cycles_keep_the_bookkeeping_bounded():
    # before: every cycle left its disabled entry behind (7,351 entries in 15 s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KernelDisabledWarning)
        for _ in range(200):
            register(WITH_REF, raising(RuntimeError("launch failed")), name="fast",
                     predicate=lambda: True)
            dispatch(WITH_REF, torch.ones(4))
    assert len(registry._failures) <= 1
    assert len(registry._predicate_results) <= len(registry.SLOTS) + 1


def test_resolve_of_a_slot_without_reference_gives_none_for_an_input_it_declines():
    # before: resolve() returned the implementation itself, which raised on a declined input,
    # as the MSDA Triton implementation does
    def strict(*args):
        raise ValueError("this implementation declines this input")

    register(NO_REF, strict, name="fast", accepts=lambda *a: "not mine")
    call = resolve(NO_REF)
    assert call.implementation.name == "fast"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert call(*msda_input()) is None


def test_resolve_of_a_slot_with_reference_falls_through_for_an_input_it_declines():
    def strict(x, *args, **kwargs):
        raise ValueError("this implementation declines this input")

    register(WITH_REF, strict, name="fast", accepts=lambda x, *a, **k: "not mine")
    x = torch.ones(4)
    assert torch.equal(resolve(WITH_REF)(x), x)


class Plan(Prepared):
    __slots__ = ("doubled",)

    def __init__(self, doubled):
        self.doubled = doubled


def test_a_prepared_plan_reaches_the_call_and_accepts_runs_once_per_call():
    asked = []

    def accepts(value, *args):
        asked.append(value)
        return Plan(2 * value.shape[1])

    def impl(value, *args, prepared=None):
        doubled = prepared.doubled if prepared is not None else 2 * value.shape[1]
        out = torch.zeros(1, 1, 2)
        out.tag = ("planned" if prepared is not None else "direct", doubled)
        return out

    inputs = msda_input()
    register(NO_REF, impl, name="fast", accepts=accepts)
    assert tag_of(dispatch(NO_REF, *inputs)) == ("planned", 8)
    assert asked == [inputs[0]]
    assert tag_of(registry.registered(NO_REF)[0].fn(*inputs)) == ("direct", 8)


def test_a_per_slot_selection_leaves_the_other_slots_accelerated(monkeypatch):
    # before: "ms_deform_attn=hub" was read as one implementation name: every slot lost its
    # accelerated implementations, with a warning
    register(NO_REF, tagged("hub"), name="hub")
    register(NO_REF, tagged("triton"), name="triton")
    register(WITH_REF, tagged("triton", WITH_REF), name="triton")
    monkeypatch.setenv(settings.KERNELS, "ms_deform_attn=hub")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tag_of(resolve(NO_REF)(*msda_input())) == "hub"
        assert tag_of(resolve(WITH_REF)(torch.ones(4))) == "triton"


def test_several_per_slot_choices_and_a_bare_name_combine(monkeypatch):
    register(NO_REF, lambda *a: "hub", name="hub")
    register(NO_REF, lambda *a: "triton", name="triton")
    register(WITH_REF, lambda *a, **k: "triton", name="triton")
    register(WITH_REF, lambda *a, **k: "cuda", name="cuda")
    monkeypatch.setenv(settings.KERNELS, "triton, ms_deform_attn=hub")
    assert [i.name for i in registry.candidates(NO_REF)] == ["hub"]
    assert [i.name for i in registry.candidates(WITH_REF)] == ["triton", "reference"]
    monkeypatch.setenv(settings.KERNELS, "ms_deform_attn=hub,fake_quant_fp8=off")
    assert [i.name for i in registry.candidates(WITH_REF)] == ["reference"]


@pytest.mark.parametrize("value, message", [
    ("fake_quant_fp9=triton", "unknown slot 'fake_quant_fp9'"),
    ("fake_quant_fp8=cutlass", "fake_quant_fp8='cutlass' names no registered implementation"),
])
def test_an_unknown_slot_or_name_in_a_per_slot_selection_warns_once(monkeypatch, value, message):
    register(WITH_REF, lambda *a, **k: "triton", name="triton")
    monkeypatch.setenv(settings.KERNELS, value)
    with pytest.warns(SelectionWarning, match=message):
        registry.candidates(WITH_REF)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        registry.candidates(WITH_REF)
        registry.candidates(NO_REF)


def test_a_predicate_names_the_part_of_its_condition_that_failed():
    def ready():
        """triton importable and a CUDA device present."""
        return "no CUDA device"

    register(NO_REF, lambda *a: None, name="fast", predicate=ready)
    reason = dict((i.name, r) for i, r in explain(NO_REF))["fast"]
    assert reason.endswith("no CUDA device")
    assert "triton importable" not in reason


def test_registrations_say_where_they_came_from():
    assert register(NO_REF, lambda *a: None, name="mine").origin == "caller"
    assert registry.candidates(WITH_REF)[-1].origin == "in-tree"


def test_the_resolved_in_tree_ms_deform_attn_gives_none_for_an_input_it_declines(tmp_path):
    # before: resolve() returned ms_deform_attn_triton itself, which raises ValueError on an
    # input its accepts() declines (here float64, which only the portable path computes)
    seen = run_python(
        """
        import json, torch
        from libreyolo.kernels import resolve
        call = resolve("ms_deform_attn")
        args = (torch.zeros(1, 4, 1, 2, dtype=torch.float64), torch.tensor([[2, 2]]),
                torch.zeros(1, 1, 1, 1, 1, 2, dtype=torch.float64),
                torch.ones(1, 1, 1, 1, 1, dtype=torch.float64))
        try:
            out = call(*args)
        except ValueError as exc:
            out = f"ValueError: {exc}"
        print(json.dumps({"name": call.implementation.name, "out": out}))
        """,
        tmp_path,
        {"TRITON_INTERPRET": "1", "LIBREYOLO_KERNELS": "triton"},
    )
    assert seen == {"name": "triton", "out": None}

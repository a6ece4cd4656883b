"""The registry's behaviour, one statement per test."""

from __future__ import annotations

import warnings

import pytest
import torch
from registry_helpers import NO_REF, WITH_REF, msda_input, tag_of, tagged

from libreyolo.kernels import (
    KernelDisabledWarning,
    NoImplementationError,
    PredicateWarning,
    active,
    candidates,
    dispatch,
    explain,
    register,
    registered,
    resolve,
    unregister,
)

X = torch.ones(1)  # an input of WITH_REF (the stand-ins answer it, or the reference does)
MSDA = msda_input()


def ran(call, *args):
    """The tag of what ``call`` answered for ``args`` (default: a valid ms_deform_attn input)."""
    return tag_of(call(*(args or MSDA)))


def names(op):
    return [impl.name for impl in candidates(op)]


pytestmark = pytest.mark.usefixtures("clean_registry")


def test_newest_registration_wins():
    register(NO_REF, tagged("a"), name="a")
    register(NO_REF, tagged("b"), name="b")
    assert names(NO_REF) == ["b", "a"]
    assert ran(resolve(NO_REF)) == "b"


def test_reference_sits_last_whatever_the_order():
    register(WITH_REF, tagged("fast", WITH_REF), name="fast")
    register(WITH_REF, tagged("faster", WITH_REF), name="faster")
    assert names(WITH_REF) == ["faster", "fast", "reference"]


def test_false_predicate_falls_through_to_the_next():
    register(NO_REF, tagged("a"), name="a")
    register(NO_REF, tagged("b"), name="b", predicate=lambda: False)
    assert ran(resolve(NO_REF)) == "a"


def test_predicate_is_memoized_until_clear_cache():
    calls = []

    def predicate():
        calls.append(1)
        return True

    register(NO_REF, tagged("a"), name="a", predicate=predicate)
    for _ in range(3):
        resolve(NO_REF)
    assert len(calls) == 1


def test_raising_predicate_is_warned_once_and_not_propagated():
    def broken():
        raise RuntimeError("no driver")

    register(NO_REF, tagged("a"), name="a")
    register(NO_REF, tagged("b"), name="b", predicate=broken)
    with pytest.warns(PredicateWarning, match="no driver"):
        assert ran(resolve(NO_REF)) == "a"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        register(NO_REF, tagged("c"), name="c")  # invalidates the cache: predicate re-read
        unregister(NO_REF, "c")
        assert ran(resolve(NO_REF)) == "a"


def test_registration_after_resolve_takes_effect_without_clear_cache():
    register(NO_REF, tagged("a"), name="a")
    assert ran(resolve(NO_REF)) == "a"
    register(NO_REF, tagged("b"), name="b")
    assert ran(resolve(NO_REF)) == "b"


def test_duplicate_name_replaces_and_becomes_newest():
    register(NO_REF, tagged("a1"), name="a")
    register(NO_REF, tagged("b"), name="b")
    register(NO_REF, tagged("a2"), name="a")
    assert names(NO_REF) == ["a", "b"]
    assert ran(resolve(NO_REF)) == "a2"


def test_unregister_removes_and_reports_true():
    register(NO_REF, tagged("a"), name="a")
    register(NO_REF, tagged("b"), name="b")
    assert ran(resolve(NO_REF)) == "b"
    assert unregister(NO_REF, "b") is True
    assert ran(resolve(NO_REF)) == "a"


def test_unregister_unknown_name_returns_false_and_changes_nothing():
    register(NO_REF, tagged("a"), name="a")
    assert unregister(NO_REF, "nope") is False
    assert names(NO_REF) == ["a"]


def test_unknown_slot_is_an_error_listing_the_slots():
    with pytest.raises(ValueError, match="unknown slot 'nope'.*fake_quant_fp8"):
        register("nope", tagged("a"), name="a")
    with pytest.raises(ValueError, match="unknown slot"):
        unregister("nope", "a")
    with pytest.raises(ValueError, match="unknown slot"):
        resolve("nope")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"impl": 3, "name": "a"}, "impl: expected a callable"),
        ({"impl": tagged("a"), "name": " "}, "name: expected a non-empty string"),
        ({"impl": tagged("a"), "name": "a", "predicate": True}, "predicate: expected a callable"),
        ({"impl": tagged("a"), "name": "a", "accepts": "x"}, "accepts: expected a callable"),
    ],
)
def test_bad_registration_arguments_are_named(kwargs, message):
    with pytest.raises((TypeError, ValueError), match=message):
        register(NO_REF, **kwargs)


def test_resolve_returns_none_and_active_says_unavailable_when_nothing_is_eligible():
    assert resolve(NO_REF) is None
    assert active()[NO_REF] == "unavailable"


def test_active_names_the_selected_implementation_of_every_slot():
    register(NO_REF, tagged("a"), name="a")
    report = active()
    assert report[NO_REF] == "a"
    assert report[WITH_REF] == "reference"


def test_declined_input_goes_to_the_next_implementation(stub_reference):
    stub_reference(WITH_REF, tagged("ref", WITH_REF))
    register(WITH_REF, tagged("fast", WITH_REF), name="fast",
             accepts=lambda x: None if x > 0 else "x <= 0")
    assert tag_of(dispatch(WITH_REF, X)) == "fast"
    assert tag_of(dispatch(WITH_REF, -X)) == "ref"


def test_slot_without_reference_returns_none_when_all_decline():
    register(NO_REF, tagged("a"), name="a", accepts=lambda *a: "never")
    assert dispatch(NO_REF, *MSDA) is None


def test_slot_with_reference_raises_when_even_the_reference_is_gone(clean_registry):
    clean_registry._impls[WITH_REF] = []  # callers cannot unregister it: only a broken registry
    register(WITH_REF, tagged("fast", WITH_REF), name="fast",
             accepts=lambda x: "declines everything")
    with pytest.raises(NoImplementationError, match="fast: declines everything"):
        dispatch(WITH_REF, X)


def test_explain_gives_each_decline_reason():
    register(NO_REF, tagged("a"), name="a",
             accepts=lambda value, *a: "too small" if value.shape[0] < 2 else None)
    register(NO_REF, tagged("b"), name="b", predicate=lambda: False)
    reasons = {impl.name: reason for impl, reason in explain(NO_REF, *MSDA)}
    assert reasons["a"] == "too small"
    assert "environment check" in reasons["b"] and "is false" in reasons["b"]
    assert {impl.name: reason for impl, reason in explain(NO_REF, *msda_input(batch=2))}[
        "a"] is None


def test_launch_failure_disables_once_and_the_next_takes_over(stub_reference):
    calls = []

    def broken(x):
        calls.append(x)
        raise RuntimeError("CUDA error: an illegal memory access")

    stub_reference(WITH_REF, tagged("ref", WITH_REF))
    register(WITH_REF, broken, name="fast")
    with pytest.warns(KernelDisabledWarning, match="fast failed") as record:
        assert tag_of(dispatch(WITH_REF, X)) == "ref"
    assert len(record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tag_of(dispatch(WITH_REF, 2 * X)) == "ref"
    assert len(calls) == 1
    assert "disabled after a failure" in dict((i.name, r) for i, r in explain(WITH_REF))["fast"]


def test_reregistering_a_disabled_name_enables_it_again(stub_reference):
    stub_reference(WITH_REF, tagged("ref", WITH_REF))
    register(WITH_REF, lambda x: 1 / 0, name="fast")
    with pytest.warns(KernelDisabledWarning):
        dispatch(WITH_REF, X)
    register(WITH_REF, tagged("fixed", WITH_REF), name="fast")
    assert tag_of(dispatch(WITH_REF, X)) == "fixed"


@pytest.mark.parametrize("error", [ValueError("x: expected 2-D"), TypeError("x: expected float")])
def test_bad_input_raised_by_every_implementation_propagates_and_disables_nothing(
    error, stub_reference
):
    def rejects(x):
        raise error

    stub_reference(WITH_REF, rejects)
    register(WITH_REF, rejects, name="fast")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(type(error), match="x: expected"):
            dispatch(WITH_REF, 1)
    assert names(WITH_REF)[0] == "fast"


@pytest.mark.parametrize("error", [ValueError("Pointer argument cannot be accessed"), TypeError()])
def test_an_input_error_only_the_kernel_raises_is_the_kernel_failing(error, stub_reference):
    def launch_fails(x):
        raise error

    stub_reference(WITH_REF, tagged("ref", WITH_REF))
    register(WITH_REF, launch_fails, name="fast")
    with pytest.warns(KernelDisabledWarning, match="fast failed") as record:
        assert tag_of(dispatch(WITH_REF, X)) == "ref"
    assert len(record) == 1
    assert names(WITH_REF) == ["reference"]


def test_running_out_of_memory_propagates_and_disables_nothing(stub_reference):
    def out_of_memory(x):
        raise torch.OutOfMemoryError("CUDA out of memory")

    stub_reference(WITH_REF, tagged("ref", WITH_REF))
    register(WITH_REF, out_of_memory, name="fast")
    with pytest.raises(torch.OutOfMemoryError):
        dispatch(WITH_REF, 1)
    assert names(WITH_REF)[0] == "fast"


def test_bad_input_errors_from_accepts_propagate_when_the_reference_rejects_it_too(
    stub_reference,
):
    def accepts(x):
        raise ValueError("scale: expected a 0-dim tensor")

    stub_reference(WITH_REF, accepts)
    register(WITH_REF, tagged("fast", WITH_REF), name="fast", accepts=accepts)
    with pytest.raises(ValueError, match="scale: expected"):
        dispatch(WITH_REF, 1)
    assert names(WITH_REF)[0] == "fast"


def test_reference_failures_propagate(stub_reference):
    stub_reference(WITH_REF, lambda x: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        dispatch(WITH_REF, 1)


def test_sources_default_to_the_defining_file():
    def here(*args):
        return None

    entry = register(NO_REF, here, name="a")
    assert entry.sources == (__file__,)
    assert registered(NO_REF)[0] is entry


def test_explain_reports_a_crashing_accepts_without_hiding_the_others():
    register(NO_REF, tagged("a"), name="a")
    register(NO_REF, tagged("b"), name="b", accepts=lambda *a: 1 // 0)
    reasons = {impl.name: reason for impl, reason in explain(NO_REF, *MSDA)}
    assert reasons["b"].startswith("accepts() raised ZeroDivisionError")
    assert reasons["a"] is None

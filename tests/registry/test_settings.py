"""Selection settings: each value of LIBREYOLO_KERNELS, its legacy alias, and Hub kernels."""

from __future__ import annotations

import warnings

import pytest
import torch
from registry_helpers import tag_of
from registry_helpers import tagged as tagged_in

from libreyolo.kernels import SelectionWarning, candidates, explain, register, resolve, settings

SLOT = "fake_quant_fp8"

pytestmark = pytest.mark.usefixtures("clean_registry")


def tagged(tag):
    return tagged_in(tag, SLOT)


def ran(call) -> str:
    """Which stand-in answered a call of ``call``."""
    return tag_of(call(torch.ones(4)))


@pytest.fixture
def two_fast_impls(stub_reference):
    stub_reference(SLOT, tagged("ref"))
    register(SLOT, tagged("triton"), name="triton")
    register(SLOT, tagged("hub"), name="hub")


@pytest.mark.parametrize("value", ["off", "reference", " OFF ", "Reference\n"])
def test_off_and_reference_force_the_reference(monkeypatch, two_fast_impls, value):
    monkeypatch.setenv(settings.KERNELS, value)
    assert [i.name for i in candidates(SLOT)] == ["reference"]


@pytest.mark.parametrize("value", ["triton", " Triton ", "TRITON"])
def test_a_name_restricts_selection_to_it_then_the_reference(monkeypatch, two_fast_impls, value):
    monkeypatch.setenv(settings.KERNELS, value)
    assert [i.name for i in candidates(SLOT)] == ["triton", "reference"]


def test_unset_and_empty_select_everything(monkeypatch, two_fast_impls):
    assert ran(resolve(SLOT)) == "hub"
    monkeypatch.setenv(settings.KERNELS, "  ")
    assert ran(resolve(SLOT)) == "hub"


def test_a_change_between_calls_is_honoured(monkeypatch, two_fast_impls):
    assert ran(resolve(SLOT)) == "hub"
    monkeypatch.setenv(settings.KERNELS, "triton")
    assert ran(resolve(SLOT)) == "triton"
    monkeypatch.setenv(settings.KERNELS, "off")
    assert ran(resolve(SLOT)) == "ref"
    monkeypatch.delenv(settings.KERNELS)
    assert ran(resolve(SLOT)) == "hub"


def test_legacy_alias_is_read_when_the_new_variable_is_unset(monkeypatch, two_fast_impls):
    monkeypatch.setenv(settings.LEGACY_KERNELS, "off")
    assert ran(resolve(SLOT)) == "ref"


def test_new_variable_wins_over_the_legacy_alias(monkeypatch, two_fast_impls):
    monkeypatch.setenv(settings.LEGACY_KERNELS, "off")
    monkeypatch.setenv(settings.KERNELS, "triton")
    assert ran(resolve(SLOT)) == "triton"


def test_new_variable_set_empty_still_hides_the_alias(monkeypatch, two_fast_impls):
    monkeypatch.setenv(settings.LEGACY_KERNELS, "off")
    monkeypatch.setenv(settings.KERNELS, "")
    assert ran(resolve(SLOT)) == "hub"


def test_a_name_nobody_registered_warns_once(monkeypatch, two_fast_impls):
    monkeypatch.setenv(settings.KERNELS, "cutlass")
    with pytest.warns(SelectionWarning, match="'cutlass' names no registered implementation"):
        assert ran(resolve(SLOT)) == "ref"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ran(resolve(SLOT)) == "ref"


@pytest.mark.parametrize("value", ["0", "false", " OFF", "No"])
def test_hub_kernels_can_be_turned_off(monkeypatch, value):
    monkeypatch.setenv(settings.HUB_KERNELS, value)
    assert settings.hub_kernels_enabled() is False


@pytest.mark.parametrize("value", [None, "1", "true", "on"])
def test_hub_kernels_are_on_by_default(monkeypatch, value):
    if value is None:
        monkeypatch.delenv(settings.HUB_KERNELS, raising=False)
    else:
        monkeypatch.setenv(settings.HUB_KERNELS, value)
    assert settings.hub_kernels_enabled() is True


@pytest.mark.parametrize(("value", "forced"), [(None, None), ("", None), ("auto", None),
                                               (" Auto ", None), ("0", False), ("off", False),
                                               ("No", False), ("1", True), (" ON", True),
                                               ("Yes", True)])
def test_fp8_fast_accumulation_is_decided_by_k_unless_forced(monkeypatch, value, forced):
    if value is None:
        monkeypatch.delenv(settings.FP8_FAST_ACCUMULATION, raising=False)
    else:
        monkeypatch.setenv(settings.FP8_FAST_ACCUMULATION, value)
    assert settings.fp8_fast_accumulation() is forced
    assert settings.FP8_FAST_ACCUMULATION in settings.in_effect()


@pytest.mark.parametrize("value", ["fast", "2", "float32"])
def test_an_unknown_fp8_accumulation_value_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv(settings.FP8_FAST_ACCUMULATION, value)
    with pytest.raises(ValueError, match=f"LIBREYOLO_FP8_FAST_ACCUMULATION.*{value!r}"):
        settings.fp8_fast_accumulation()


@pytest.fixture
def awaiting(monkeypatch):
    """Pretend ``fake_quant_fp8/triton`` awaits its GPU parity record."""
    from libreyolo.kernels import registry

    monkeypatch.setattr(registry, "awaiting_record", lambda: frozenset({f"{SLOT}/triton"}))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


@pytest.mark.usefixtures("awaiting")
def test_an_implementation_awaiting_its_record_is_not_selected_by_default(two_fast_impls):
    assert ran(resolve(SLOT)) == "hub"
    from libreyolo.kernels import unregister

    unregister(SLOT, "hub")
    assert ran(resolve(SLOT)) == "ref"
    reasons = {impl.name: reason for impl, reason in explain(SLOT)}
    assert reasons["triton"].startswith("awaiting a green CUDA parity record")


@pytest.mark.usefixtures("awaiting")
def test_naming_an_awaiting_implementation_selects_it(monkeypatch, two_fast_impls):
    monkeypatch.setenv(settings.KERNELS, "triton")
    assert ran(resolve(SLOT)) == "triton"


@pytest.mark.usefixtures("awaiting")
def test_the_interpreter_runs_awaiting_implementations(monkeypatch, two_fast_impls):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert [i.name for i in candidates(SLOT)] == ["hub", "triton", "reference"]


def test_the_shipped_awaiting_list_is_data_the_registry_reads():
    from libreyolo.kernels.registry import awaiting_record

    assert all(key.count("/") == 1 for key in awaiting_record())


@pytest.mark.usefixtures("awaiting")
def test_asking_for_an_awaiting_implementation_by_name_judges_it_on_its_own_checks(
    two_fast_impls,
):
    from libreyolo.kernels import decline_reason

    assert decline_reason(SLOT, "triton", 1) is None
    assert decline_reason(SLOT, "nope", 1).startswith("no implementation named 'nope'")


@pytest.mark.parametrize("value, on", [("1", True), (" TRUE", True), ("on", True), ("Yes", True),
                                       ("0", False), ("", False), ("false", False), (None, False)])
def test_the_interpreter_setting_reads_the_variable_as_triton_does(monkeypatch, value, on):
    if value is None:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("TRITON_INTERPRET", value)
    assert settings.interpreting() is on


def test_the_cache_key_sees_every_change_of_the_deciding_variables(monkeypatch):
    before = settings.raw_values()
    monkeypatch.setenv(settings.KERNELS, "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    changed = settings.raw_values()
    monkeypatch.delenv(settings.KERNELS)
    monkeypatch.delenv("TRITON_INTERPRET")
    assert len({before, changed, settings.raw_values()}) == 2
    assert settings.raw_values() == before != changed


def test_the_cache_key_reads_the_public_mapping_where_environ_has_no_private_dict(monkeypatch):
    monkeypatch.setattr(settings.os, "environ", {settings.KERNELS: "triton"})
    assert settings._raw_reader()() == ("triton", None, None)

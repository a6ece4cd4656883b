"""An unknown slot names the nearest declared slot instead of listing all of them (issue 50: a
mistyped slot got every name and no hint); a name near none still gets the list."""

from __future__ import annotations

import re

import pytest
import torch

from libreyolo.kernels.slots import get_slot, slot_names


def test_a_mistyped_slot_names_the_nearest_slot_alone():
    with pytest.raises(ValueError, match=re.escape(
            "op: unknown slot 'unpack_nvfp' (did you mean 'unpack_nvfp4'?)") + "$"):
        get_slot("unpack_nvfp")


@pytest.mark.parametrize("name", ["nope", ["unpack_nvfp4"]])
def test_a_name_near_no_slot_gets_the_list_of_slots(name):
    listed = ", ".join(sorted(slot_names()))
    with pytest.raises(ValueError, match=re.escape(
            f"op: unknown slot {name!r}; declared slots are {listed}") + "$"):
        get_slot(name)


def test_a_mistyped_slot_in_the_selection_setting_names_the_nearest(monkeypatch):
    from libreyolo.kernels import SelectionWarning, dispatch, settings

    monkeypatch.setenv(settings.KERNELS, "fake_quant_fp=triton")
    with pytest.warns(SelectionWarning, match=r"names the unknown slot 'fake_quant_fp' \(did you "
                                              r"mean 'fake_quant_fp8'\?\)"):
        dispatch("fake_quant_int8_affine", torch.tensor([0.5]), torch.tensor(1.0), torch.tensor(0))

"""A slot's conformance profile is data: the `[profile]` table of its shape set names a family
(a module of `conformance/catalogue/`), a kind (one of the module's `PROFILES`) and the kind's
parameters. A malformed table is refused naming the slot, the file and the defect, and no
catalogue module names a slot."""

import re
from pathlib import Path
from typing import Literal, get_origin

import pytest
import torch

from conformance import catalogue
from conformance.inputs import generators
from conformance.schema.spec import Case
from libreyolo.kernels import slot_names

CATALOGUE_DIR = Path(catalogue.__file__).parent
SLOT = "fake_quant_int8_per_channel"
CASE = '\n[[case]]\nname = "a"\nsource = "s"\nsize = "small"\nshape = [4]\n'


def _profile(*lines: str) -> str:
    return "\n".join(["[profile]", *lines]) + "\n" + CASE


@pytest.mark.parametrize("text, defect", [
    (CASE, "no [profile] table"),
    (_profile('kind = "per_channel"', "bits = 8"),
     "no family (one of ['fake_quant', 'fp8_execute', 'ms_deform_attn', "
     "'ms_deform_attn_ragged', 'packing'])"),
    (_profile('family = "fake_quantization"', 'kind = "per_channel"', "bits = 8"),
     "unknown family 'fake_quantization'; the families are ['fake_quant', 'fp8_execute', "
     "'ms_deform_attn', 'ms_deform_attn_ragged', 'packing']"),
    (_profile('family = "fake_quant"', "bits = 8"),
     "no kind (family 'fake_quant' has kinds ['affine', 'blocked', 'fp8', 'grouped', "
     "'nvfp4_weight', 'per_channel'])"),
    (_profile('family = "fake_quant"', 'kind = "per_tensor"', "bits = 8"),
     "unknown kind 'per_tensor'; family 'fake_quant' has kinds ['affine', 'blocked', 'fp8', "
     "'grouped', 'nvfp4_weight', 'per_channel']"),
    (_profile('family = "fake_quant"', 'kind = "per_channel"', "bits = 8", "axis = 0"),
     "kind 'per_channel' takes no parameter axis (it takes bits)"),
    (_profile('family = "fake_quant"', 'kind = "per_channel"'),
     "kind 'per_channel' needs parameter 'bits'"),
    (_profile('family = "fake_quant"', 'kind = "blocked"', 'grid = "e2m1"', 'block = "16"',
              'operand = "weight"'),
     "parameter 'block' of kind 'blocked' must be of type int, got '16'"),
    (_profile('family = "fake_quant"', 'kind = "blocked"', 'grid = "e2m1"', "block = true",
              'operand = "weight"'),
     "parameter 'block' of kind 'blocked' must be of type int, got True"),
    (_profile('family = "fake_quant"', 'kind = "per_channel"', "bits = 3"),
     "parameter 'bits' of kind 'per_channel' must be one of 2, 4, 8, got 3"),
], ids=["no-profile", "no-family", "unknown-family", "no-kind", "unknown-kind",
        "unknown-parameter", "missing-parameter", "wrong-type", "bool-for-int",
        "value-not-taken"])
def test_a_malformed_profile_is_refused_naming_the_file_and_the_defect(tmp_path, text, defect):
    path = tmp_path / f"{SLOT}.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as refused:
        catalogue.profile(SLOT, tmp_path)
    assert str(refused.value).startswith(f"slot {SLOT!r}, {path}")
    assert defect in str(refused.value)


def test_a_declared_slot_without_a_shape_set_is_an_error_naming_both(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(
            f"slot {SLOT!r}, {tmp_path / f'{SLOT}.toml'}: the slot is declared but has no "
            f"shape set")):
        catalogue.profile(SLOT, tmp_path)


def test_a_shape_set_of_no_declared_slot_is_an_error(tmp_path):
    (tmp_path / "fake_quant_int3_per_channel.toml").write_text(
        _profile('family = "fake_quant"', 'kind = "per_channel"', "bits = 4"))
    with pytest.raises(ValueError, match="fake_quant_int3_per_channel.toml: a shape set of no "
                                         "declared slot"):
        catalogue.build(tmp_path)


def test_the_profile_parameters_reach_the_kind(tmp_path):
    """`bits` picks the grid: int4's inputs spread over about ±7 scale units, int8's (the
    catalogue's own profile) over about ±127."""
    case = Case("c", "s", "small", {"shape": [8, 64], "axis": 0})
    (tmp_path / f"{SLOT}.toml").write_text(
        _profile('family = "fake_quant"', 'kind = "per_channel"', "bits = 4"))

    def spread(spec):
        with generators.plain_values():
            x, scale, _ = spec.make_inputs(case, torch.float32, "contiguous",
                                           torch.Generator().manual_seed(0)).args
        return float((x / scale[:, None]).abs().max())

    assert spread(catalogue.profile(SLOT, tmp_path)) < 20 < spread(catalogue.slot(SLOT))


@pytest.mark.parametrize("family", sorted(catalogue.FAMILIES))
def test_every_kind_takes_typed_parameters(family):
    """What the `[profile]` check can read: keyword-only parameters typed int, str, bool or a
    Literal of their values."""
    for kind, factory in catalogue.FAMILIES[family].items():
        for name, p in catalogue.parameters(factory).items():
            assert p.annotation in (int, str, bool) or get_origin(p.annotation) is Literal, \
                f"{family}.{kind}: parameter {name} is typed {p.annotation!r}"


@pytest.mark.parametrize("module", sorted(p.name for p in CATALOGUE_DIR.glob("*.py")))
def test_no_catalogue_module_names_a_slot(module):
    """A profile's slot comes from its shape set: a slot's name quoted or in backticks in a
    catalogue module would tie the module to that slot."""
    text = (CATALOGUE_DIR / module).read_text()
    named = [name for name in slot_names()
             if re.search(rf"""["'`]{re.escape(name)}["'`]""", text)]
    assert not named, f"conformance/catalogue/{module} names {named}"

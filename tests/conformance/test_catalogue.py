"""The suite's profiles attach to the slots' declarations by name: one per declared slot, none
repeating a declared field; the shape sets follow their schema, and the docs table is generated
from the declarations."""

from pathlib import Path

import pytest

from conformance.catalogue import CATALOGUE
from conformance.inputs import shapesets
from conformance.reporting.render import catalogue_table, generated_block

DOCS = Path(__file__).resolve().parents[2] / "docs" / "conformance.md"


def test_every_declared_slot_has_a_profile_and_every_profile_a_declaration():
    from libreyolo.kernels import SLOTS

    assert {slot.name for slot in SLOTS} == CATALOGUE.keys()
    assert all(CATALOGUE[slot.name].slot is slot for slot in SLOTS)


def test_a_profile_repeats_no_field_of_the_declaration():
    """What a slot is lives in its declaration (libreyolo/kernels/slots.py) alone: a profile's
    fields are the suite's (inputs, strategy, errors, expectations), never the slot's."""
    from dataclasses import fields

    from conformance.schema.spec import SlotSpec
    from libreyolo.kernels import Slot

    declared = {f.name for f in fields(Slot)} - {"name"}
    assert not declared & {f.name for f in fields(SlotSpec)}


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_each_slot_has_a_shape_set_with_awkward_cases(name):
    cases = shapesets.load(CATALOGUE[name].shapes)
    assert any(c.size == "small" for c in cases), "the interpreter needs small cases"
    assert all(c.source for c in cases)


@pytest.mark.parametrize("text, error", [
    ('[[case]]\nsource = "s"\nsize = "small"\n', "name must match"),
    ('[[case]]\nname = "a"\nsize = "small"\n', "source must say"),
    ('[[case]]\nname = "a"\nsource = "s"\nsize = "huge"\n', "size must be one of"),
    ('[[case]]\nname = "a"\nsource = "s"\nsize = "small"\n' * 2, "duplicate case name"),
], ids=["no-name", "no-source", "bad-size", "duplicate"])
def test_a_malformed_shape_set_is_refused_with_its_reason(tmp_path, text, error):
    (tmp_path / "bad.toml").write_text(text)
    with pytest.raises(ValueError, match=error):
        shapesets.load("bad.toml", tmp_path)


def test_the_docs_slot_table_is_generated_from_the_catalogue():
    table = generated_block(DOCS.read_text(), "catalogue-table")
    assert table == catalogue_table(), \
        "regenerate: python -m conformance.reporting.render --catalogue"

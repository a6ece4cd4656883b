"""The recipes are data, and docs/quantization.md's recipes table is that data: derived here from
``RECIPES`` and compared with the page, row for row."""

from __future__ import annotations

from pathlib import Path

import pytest

from libreyolo.kernels import slot_names
from libreyolo.nn.finalized import FinalizedLinear
from libreyolo.nn.quantized import RECIPES, Recipe, get_recipe

DOC = Path(__file__).resolve().parents[2] / "docs" / "quantization.md"
HEADER = ("| recipe | what | weight slot | activation slot | calibrated | input dim a multiple of "
          "| finalized weight / activation |")


def _row(recipe: Recipe) -> str:
    def code(value):
        return f"`{value}`" if value else "-"

    calibrated = ", ".join(f"`{n}`" for n in recipe.calibrated) or "-"
    return (f"| `{recipe.name}` | {recipe.doc} | {code(recipe.weight_slot)} | "
            f"{code(recipe.activation_slot)} | {calibrated} | {recipe.block or '-'} | "
            f"`{recipe.weight}` / `{recipe.activation}` |")


def _doc_table() -> list[str]:
    lines = DOC.read_text().splitlines()
    start = lines.index(HEADER)
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def test_the_docs_table_is_the_recipes():
    assert _doc_table() == [_row(r) for r in RECIPES.values()]


def test_every_recipe_names_real_slots_and_a_finalized_layer_that_holds_it():
    for recipe in RECIPES.values():
        assert recipe.weight_slot in slot_names()
        assert recipe.activation_slot is None or recipe.activation_slot in slot_names()
        FinalizedLinear(128, 8, **recipe.finalized_kwargs)  # the formats pair


def test_the_issue_recipes_are_there():
    assert list(RECIPES) == ["w8a8_int8", "fp8_static", "fp8_dynamic", "w4a16", "nvfp4",
                             "mxfp4", "mxfp8"]
    assert [r.name for r in RECIPES.values() if r.static] == ["w8a8_int8", "fp8_static"]


def test_a_recipe_round_trips_as_data_and_a_variant_says_what_changed():
    for recipe in RECIPES.values():
        assert Recipe.from_dict(recipe.to_dict()) == recipe
        assert get_recipe(recipe.name) is recipe and get_recipe(recipe) is recipe
    variant = RECIPES["w4a16"].replace(group_size=32)
    assert variant.name == "w4a16[group_size=32]" and variant.block == 32
    assert RECIPES["w4a16"].replace(bits=2, name="w2a16").name == "w2a16"
    with pytest.raises(ValueError, match="group_size must be a positive int, got -1"):
        RECIPES["w4a16"].replace(group_size=-1)


def test_a_negative_control_row_would_not_match():
    """The comparison sees a change in any column."""
    changed = RECIPES["mxfp4"].replace(name="mxfp4", doc="something else")
    assert _row(changed) not in _doc_table()

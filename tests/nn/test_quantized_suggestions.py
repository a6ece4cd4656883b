"""A mistyped module pattern or recipe name is an error that names the nearest real one, in
grammatical English (issue 50: ``'stemm' match no module``, ``recipe 'w4a16''s``)."""

from __future__ import annotations

import re

import pytest
from torch import nn

from libreyolo.nn.quantized import RECIPES, LayerError, prepare


class _Stem(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 32, 3)
        self.head = nn.Linear(32, 10)


def _raises(exception, message):
    return pytest.raises(exception, match=f"^{re.escape(message)}$")


def test_a_mistyped_skip_pattern_matches_no_module_and_names_the_nearest():
    with _raises(ValueError, "skip: 'stemm' matches no module of the model "
                             "(did you mean 'stem'?)"):
        prepare(_Stem(), "w8a8_int8", skip=["stemm"])


def test_each_unmatched_skip_pattern_is_named_with_its_own_nearest_or_none():
    with _raises(ValueError, "skip: 'haed' matches no module of the model (did you mean "
                             "'head'?); 'zzz*' matches no module of the model"):
        prepare(_Stem(), "w8a8_int8", skip=["haed", "stem", "zzz*"])


def test_a_mistyped_recipe_names_the_nearest_recipe_then_lists_them_all():
    with _raises(ValueError, "unknown recipe 'w4a6' (did you mean 'w4a16'?); the recipes are "
                             f"{', '.join(RECIPES)}"):
        prepare(_Stem(), "w4a6", skip=["stem"])


def test_a_recipe_s_block_is_named_without_a_doubled_quote():
    with pytest.raises(LayerError) as caught:
        prepare(nn.Sequential(nn.Linear(64, 8)), "w4a16")
    assert caught.value.layers == {"0": "Linear: in_features = 64 is not a multiple of 128, the "
                                        "group_size of recipe 'w4a16' (its scales span 128 "
                                        "inputs)"}

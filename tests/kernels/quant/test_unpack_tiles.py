"""``unpack_tiles.toml`` is complete and valid, and a missing or invalid row is an error that
names the row and what was expected (``unpack_checks.py`` shows that each row is the one its
format and dtype take)."""

from __future__ import annotations

import pytest

from libreyolo.kernels.quant.execute import unpack_tiles
from libreyolo.kernels.quant.execute.unpack_tiles import DTYPES, FORMATS, TileConfig, parse


def _text(rows: dict[tuple[str, str], str]) -> str:
    return "\n".join(f"[{fmt}.{dtype}]\n{body}" for (fmt, dtype), body in rows.items())


VALID = "tile_bytes = 16384\nnum_warps = 4\n"
COMPLETE = {(fmt, dtype): VALID for fmt in FORMATS for dtype in DTYPES}


def test_the_shipped_file_has_a_valid_row_for_every_format_and_dtype():
    assert set(unpack_tiles.load()) == {(f, d) for f in FORMATS for d in DTYPES}


def test_a_complete_file_parses_to_its_rows():
    assert parse(_text(COMPLETE)) == {key: TileConfig(16384, 4) for key in COMPLETE}


@pytest.mark.parametrize("bad, message", [
    ("tile_bytes = 12288\nnum_warps = 4\n",
     r"\[nvfp4\.bfloat16\]\.tile_bytes must be a power-of-two int from 4096 to 65536, got 12288"),
    ("tile_bytes = 2048\nnum_warps = 4\n",
     r"\[nvfp4\.bfloat16\]\.tile_bytes .* got 2048"),
    ("tile_bytes = 131072\nnum_warps = 4\n",
     r"\[nvfp4\.bfloat16\]\.tile_bytes .* got 131072"),
    ("tile_bytes = '16384'\nnum_warps = 4\n",
     r"\[nvfp4\.bfloat16\]\.tile_bytes .* got '16384'"),
    ("tile_bytes = 16384\nnum_warps = 3\n",
     r"\[nvfp4\.bfloat16\]\.num_warps must be one of \(1, 2, 4, 8, 16\), got 3"),
    ("tile_bytes = 16384\nnum_warps = true\n",
     r"\[nvfp4\.bfloat16\]\.num_warps must be one of .* got True"),
    ("tile_bytes = 16384\n",
     r"\[nvfp4\.bfloat16\] must have exactly the keys .* missing \['num_warps'\]"),
    (VALID + "vector = 4\n",
     r"\[nvfp4\.bfloat16\] must have exactly the keys .* unknown \['vector'\]"),
])
def test_an_invalid_row_names_itself_and_what_was_expected(bad, message):
    with pytest.raises(ValueError, match=message):
        parse(_text(COMPLETE | {("nvfp4", "bfloat16"): bad}))


def test_a_missing_row_is_an_error_naming_it():
    rows = dict(COMPLETE)
    del rows["mxfp8", "float16"]
    with pytest.raises(ValueError, match=r"has no row \[mxfp8\.float16\]"):
        parse(_text(rows))


def test_a_missing_format_is_an_error_naming_it():
    rows = {key: body for key, body in COMPLETE.items() if key[0] != "int2"}
    with pytest.raises(ValueError, match=r"has no \[int2\.DTYPE\] rows"):
        parse(_text(rows))


@pytest.mark.parametrize("extra, message", [
    (("int3", "float32"), r"unknown formats \['int3'\]"),
    (("nvfp4", "float8"), r"\[nvfp4\] has unknown dtypes \['float8'\]"),
])
def test_an_unknown_format_or_dtype_is_an_error(extra, message):
    with pytest.raises(ValueError, match=message):
        parse(_text(COMPLETE | {extra: VALID}))


def test_a_file_that_is_not_toml_is_an_error_naming_it():
    with pytest.raises(ValueError, match="tiles.toml is not valid TOML"):
        parse("[nvfp4.bfloat16\n", "tiles.toml")

"""The unpack kernel's configuration for each packed format and output dtype, read once from
``unpack_tiles.toml`` and validated.

Why data and not a constant: one tile size for all formats left NVFP4 under its target on a
4096x4096 weight while the other formats met it, and each output dtype measured best at another
size (``benchmarks/NOTES.md``, "Why unpack tiles are data"). The file is written from a sweep
(``gpu_run.sh sweep-unpack``; each row's share of the copy is in ``benchmarks/NOTES.md``).

A row is a table ``[FORMAT.DTYPE]`` with every key of ``TileConfig``. Every format and dtype the
kernel takes must have a row: a missing one is an error at import, not a silent default, so a
format added to the kernel cannot run on a configuration nobody chose for it.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

#: The formats' names in the file: integer groups by field width, then the float formats.
FORMATS = ("int2", "int4", "int8", "nvfp4", "mxfp4", "mxfp8")
DTYPES = ("float32", "float16", "bfloat16")
#: A program's output bytes: at least one 16-byte store per thread of eight warps, at most what
#: a program's registers hold without spilling (64 KB tiles measured slower:
#: ``benchmarks/NOTES.md``, "Why unpack tiles are data").
MIN_TILE_BYTES = 4096
MAX_TILE_BYTES = 65536
WARP_COUNTS = (1, 2, 4, 8, 16)
TILES_FILE = Path(__file__).with_name("unpack_tiles.toml")


@dataclass(frozen=True, slots=True)
class TileConfig:
    """One row: the output bytes a program writes (smaller outputs get smaller tiles, see
    ``unpack_plan.tiling``) and the warps per program."""

    tile_bytes: int
    num_warps: int


def row_config(where: str, table: object) -> TileConfig:
    """A row's ``TileConfig`` from its TOML ``table``; a ValueError naming ``where`` and the key."""
    if not isinstance(table, dict):
        raise ValueError(f"{where} must be a table of {[f.name for f in fields(TileConfig)]}, "
                         f"got {table!r}")
    names = [f.name for f in fields(TileConfig)]
    missing, unknown = set(names) - set(table), set(table) - set(names)
    if missing or unknown:
        raise ValueError(f"{where} must have exactly the keys {names}: "
                         f"missing {sorted(missing)}, unknown {sorted(unknown)}")
    tile_bytes, num_warps = (table[n] for n in names)
    if (type(tile_bytes) is not int or tile_bytes & (tile_bytes - 1)
            or not MIN_TILE_BYTES <= tile_bytes <= MAX_TILE_BYTES):
        raise ValueError(f"{where}.tile_bytes must be a power-of-two int from {MIN_TILE_BYTES} "
                         f"to {MAX_TILE_BYTES}, got {tile_bytes!r}")
    if type(num_warps) is not int or num_warps not in WARP_COUNTS:
        raise ValueError(f"{where}.num_warps must be one of {WARP_COUNTS}, got {num_warps!r}")
    return TileConfig(tile_bytes, num_warps)


def parse(text: str, source: str = "unpack_tiles.toml") -> dict[tuple[str, str], TileConfig]:
    """Every ``(format, dtype)`` row of a tiles file's ``text``; a ValueError naming ``source``
    and the row for a missing, unknown or invalid one."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{source} is not valid TOML: {exc}") from exc
    unknown = sorted(set(data) - set(FORMATS))
    if unknown:
        raise ValueError(f"{source}: unknown formats {unknown}; the kernel's are {list(FORMATS)}")
    rows = {}
    for fmt in FORMATS:
        by_dtype = data.get(fmt)
        if not isinstance(by_dtype, dict):
            raise ValueError(f"{source} has no [{fmt}.DTYPE] rows: every format needs a row "
                             f"for each of {list(DTYPES)}")
        unknown = sorted(set(by_dtype) - set(DTYPES))
        if unknown:
            raise ValueError(f"{source}: [{fmt}] has unknown dtypes {unknown}; the kernel "
                             f"writes {list(DTYPES)}")
        for dtype in DTYPES:
            if dtype not in by_dtype:
                raise ValueError(f"{source} has no row [{fmt}.{dtype}]: every format needs a "
                                 f"row for each of {list(DTYPES)}")
            rows[fmt, dtype] = row_config(f"{source}: [{fmt}.{dtype}]", by_dtype[dtype])
    return rows


def load(path: Path = TILES_FILE) -> dict[tuple[str, str], TileConfig]:
    return parse(path.read_text(), str(path))


#: The shipped rows, read at import (the planner looks a row up once per new description).
TILES = load()

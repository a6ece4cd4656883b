"""The attention families as data: ``families.toml`` (what was read, the call sites) and
``evidence.toml`` (generated: whether each site's fused output equals its manual one, bit for bit).

A family's default comes from those two files and nothing else: the upstream default where the
upstream module itself defaults to SDPA (timm's ViT and DeiT, MoGe-2), else SDPA only where every
call site was byte-exact on the reference platform in every measured dtype, else the manual
equation with the flag off. ``python -m conformance.reporting.attention_evidence`` regenerates the
evidence and the docs table; ``tests/attention/test_fused_evidence.py`` fails when either is stale.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path

FAMILIES_FILE = Path(__file__).with_name("families.toml")
EVIDENCE_FILE = Path(__file__).with_name("evidence.toml")
MODULE_KINDS = ("qkv", "window", "spatial_reduction", "tinyvit", "separate_proj", "projected",
                "global_tokens")
MASKS = ("none", "shifted_window", "local", "padding", "causal_padding", "additive_padding")
PUBLISHED = ("sdpa", "flag", "flag-on")


@dataclass(frozen=True)
class Site:
    """One call site: the module that computes it and the sizes it runs at."""

    family: str
    name: str
    module: str
    dim: int
    heads: int
    batch: int
    tokens: int
    mask: str
    window: int | None = None
    grid: tuple[int, int] | None = None
    fill: float | None = None
    sr_ratio: int | None = None
    kernel: tuple[int, int] | None = None
    scale_at: str | None = None
    learned_tokens: int | None = None

    @property
    def id(self) -> str:
        return f"{self.family}/{self.name}"

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


@dataclass(frozen=True)
class Family:
    name: str
    title: str
    source: str
    file: str
    equation: str
    published: str
    upstream_fused: bool
    sizes: str
    sites: tuple[Site, ...]


def _site(family: str, raw: dict) -> Site:
    raw = dict(raw)
    for key in ("grid", "kernel"):
        if key in raw:
            raw[key] = tuple(raw[key])
    site = Site(family=family, **raw)
    if site.module not in MODULE_KINDS:
        raise ValueError(f"{site.id}: module {site.module!r} is not one of {MODULE_KINDS}")
    if site.mask not in MASKS:
        raise ValueError(f"{site.id}: mask {site.mask!r} is not one of {MASKS}")
    if site.dim % site.heads:
        raise ValueError(f"{site.id}: dim {site.dim} is not divisible by heads {site.heads}")
    return site


@functools.cache
def families() -> tuple[Family, ...]:
    """Every family in ``families.toml``, in file order."""
    with FAMILIES_FILE.open("rb") as file:
        raw = tomllib.load(file)["family"]
    out = []
    for entry in raw:
        entry = dict(entry)
        sites = tuple(_site(entry["name"], s) for s in entry.pop("site"))
        family = Family(sites=sites, **entry)
        if family.published not in PUBLISHED:
            raise ValueError(f"{family.name}: published {family.published!r} not in {PUBLISHED}")
        out.append(family)
    return tuple(out)


def family(name: str) -> Family:
    """The family called ``name``; a ValueError listing the families otherwise."""
    for entry in families():
        if entry.name == name:
            return entry
    raise ValueError(f"family: unknown attention family {name!r}; known: "
                     f"{', '.join(f.name for f in families())}")


def sites() -> tuple[Site, ...]:
    return tuple(site for entry in families() for site in entry.sites)


@functools.cache
def evidence() -> dict:
    """The generated evidence: ``{"platform": {...}, "site": [{"id", dtype: bool, ...}]}``."""
    with EVIDENCE_FILE.open("rb") as file:
        return tomllib.load(file)


def exact_sites(name: str) -> dict[str, dict[str, bool]]:
    """Per call site of family ``name``: ``{dtype: fused output bit-equal to the manual one}``."""
    wanted = {site.id for site in family(name).sites}
    return {row["id"]: {k: v for k, v in row.items() if k != "id"}
            for row in evidence()["site"] if row["id"] in wanted}


def decide(entry: Family, exact: dict[str, dict[str, bool]]) -> tuple[bool, str]:
    """The default for ``entry`` given its sites' evidence, and why: (fused?, reason)."""
    if entry.upstream_fused:
        return True, "upstream defaults to SDPA"
    missing = {site.id for site in entry.sites} - set(exact)
    if missing:
        raise ValueError(f"{entry.name}: no evidence for {sorted(missing)}; regenerate it with "
                         "`python -m conformance.reporting.attention_evidence`")
    if all(all(per_dtype.values()) for per_dtype in exact.values()):
        return True, "byte-exact at every call site"
    inexact = sorted(f"{site} {dtype}" for site, per_dtype in exact.items()
                     for dtype, same in per_dtype.items() if not same)
    return False, "not byte-exact: " + ", ".join(inexact)


def fused_attention_default(name: str) -> bool:
    """Whether family ``name``'s attention modules start with ``fused_attn`` on."""
    entry = family(name)
    return decide(entry, exact_sites(name))[0]

"""Each family's default is a generated fact: the stored evidence is what the reference platform
measures now, the docs table is what the evidence says, and the rule turns evidence into defaults.
"""

from __future__ import annotations

import dataclasses
import tomllib

import pytest
import torch

from conformance.reporting.attention_evidence import (
    DOCS_FILE,
    TABLE_BEGIN,
    TABLE_END,
    fused_equals_manual,
    measure,
    render_evidence,
    render_table,
)
from libreyolo.kernels.attention import families, fused_attention_default


@pytest.fixture(scope="module")
def measured():
    return measure()


def stored_rows():
    return families.evidence()["site"]


def test_the_stored_evidence_is_what_the_reference_platform_measures(measured):
    stale = [(row, fresh) for row, fresh in zip(stored_rows(), measured, strict=True)
             if row != fresh]
    assert not stale, ("evidence.toml is stale; regenerate it with "
                       f"`python -m conformance.reporting.attention_evidence`: {stale}")


def test_the_evidence_covers_every_call_site_in_both_dtypes():
    ids = [row["id"] for row in stored_rows()]
    assert ids == [site.id for site in families.sites()]
    assert all(set(row) == {"id", "float32", "float64"} for row in stored_rows())


def test_the_docs_table_is_generated_from_the_evidence():
    document = DOCS_FILE.read_text()
    table = document[document.index(TABLE_BEGIN) + len(TABLE_BEGIN):document.index(TABLE_END)]
    assert table.strip() == render_table(stored_rows())


def test_a_changed_measurement_makes_the_table_and_the_file_differ():
    """Negative control for the two currency checks: one flipped cell shows in both outputs."""
    rows = [dict(row) for row in stored_rows()]
    flipped = [dict(row) for row in rows]
    flipped[0]["float32"] = not flipped[0]["float32"]
    assert render_table(flipped) != render_table(rows)
    assert render_evidence(flipped) != render_evidence(rows)
    assert tomllib.loads(render_evidence(rows))["site"] == rows


def test_the_measurement_can_say_exact():
    """Positive control: at head width 16, s = 1/4 and the MATH backend's sqrt(s) = 1/2 are
    powers of two, so (q*s) @ k^T and (q/2) @ (k/2)^T are the same numbers."""
    site = dataclasses.replace(families.sites()[0], dim=64, heads=4, tokens=49)
    assert fused_equals_manual(site, torch.float32)
    assert fused_equals_manual(site, torch.float64)


def test_the_measurement_can_say_differs():
    site = dataclasses.replace(families.sites()[0], dim=64, heads=2, tokens=49)
    assert not fused_equals_manual(site, torch.float32)


@pytest.mark.parametrize("entry", families.families(), ids=lambda f: f.name)
def test_a_family_defaults_to_sdpa_only_when_upstream_does_or_every_site_is_exact(entry):
    exact = families.exact_sites(entry.name)
    every_site_exact = all(all(per_dtype.values()) for per_dtype in exact.values())
    assert fused_attention_default(entry.name) == (entry.upstream_fused or every_site_exact)


def test_only_the_families_whose_upstream_calls_sdpa_default_on_with_this_evidence():
    on = {f.name for f in families.families() if fused_attention_default(f.name)}
    assert on == {"vit", "deit", "moge2"}


def test_an_unknown_family_is_a_value_error_listing_the_known_ones():
    with pytest.raises(ValueError, match="unknown attention family 'nope'.*swin"):
        fused_attention_default("nope")

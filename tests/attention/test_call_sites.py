"""Every family's call layout reaches the slot through the public helpers (CPU, stand-in
implementation); the interpreter and the GPU tests check the same with the Triton kernels."""

import pytest
import torch

from libreyolo.kernels.attention.ms_deform_attn import ms_deform_attn_portable

from .call_sites import CALL_SITES, CASES, native_inputs


@pytest.mark.parametrize("site", CALL_SITES, ids=lambda s: s.name)
def test_each_family_layout_reaches_the_slot(site, fake_impl):
    native, (value, shapes, locations, weights) = native_inputs(site)
    out = site.call(*native)
    assert len(fake_impl.calls) == 1, f"{site.families}: the slot was not consulted"
    slot_value, _, slot_locations, slot_weights = fake_impl.calls[0]
    assert slot_value.shape == value.shape and torch.equal(slot_value, value)
    assert torch.equal(slot_locations, locations) and torch.equal(slot_weights, weights)
    assert (out == fake_impl.MARK).all()


@pytest.mark.parametrize("site", CALL_SITES, ids=lambda s: s.name)
def test_each_family_layout_computes_the_slot(site):
    """Without an implementation, the family's call gives the portable core's numbers."""
    native, inputs = native_inputs(site, dtype=torch.float64)
    torch.testing.assert_close(site.call(*native), ms_deform_attn_portable(*inputs),
                               rtol=0, atol=0)


@pytest.mark.parametrize("points_per_level", [[3, 6, 3], [4, 2, 2]])
def test_a_point_count_per_level_takes_the_ragged_core_not_the_slot(points_per_level, fake_impl):
    """D-FINE's [3, 6, 3], DEIMv2's [4, 2], OV-DEIM's [4, 6, 4]: the slot takes one point count
    for every level, so these call sites run the portable ragged core (the slot is not asked)."""
    site = next(s for s in CALL_SITES if s.name == "flat_points_pairs")
    case = CASES[site.case]
    value, pairs = native_inputs(site)[0][:2]
    total = sum(points_per_level)
    generator = torch.Generator().manual_seed(2)
    locations = torch.rand(case.batch, case.queries, case.heads, total, 2, generator=generator)
    weights = torch.rand(case.batch, case.queries, case.heads, total, generator=generator)
    out = site.call(value, pairs, locations, weights, points_per_level)
    assert fake_impl.calls == []
    assert out.shape == (case.batch, case.queries, case.heads * case.channels)


def test_discrete_sampling_takes_the_ragged_core_not_the_slot(fake_impl):
    """RT-DETRv2's method="discrete" (nearest pixel) is not the slot's bilinear sampling."""
    site = next(s for s in CALL_SITES if s.name == "flat_points_pairs")
    native = native_inputs(site)[0]
    site.call(*native, method="discrete")
    assert fake_impl.calls == []

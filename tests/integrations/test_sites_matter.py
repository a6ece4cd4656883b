"""The test models (``detectors.build``) are ones whose deformable-attention sites matter to their
detections, as a trained model's do: otherwise comparing a wired model's outputs with the stock
model's would pass whatever the sites computed, and only the per-call bound would check them.

Each family's sites are made to return zeros, through the wiring (no implementation needed):
the logits and the boxes must move far past the model-level tolerances, and the values the sites
read must be of order one. A fresh RT-DETR, RT-DETRv2, D-FINE, DEIMv2 or PP-DocLayoutV3 fails
both: its encoder hands the sites values of order 1e-10 (1e-16), which ``build``'s BatchNorm
calibration lifts.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers", reason="the transformers extra is not installed")

from .detectors import (  # noqa: E402
    DETECTIONS,
    FAMILIES,
    Run,
    build,
    largest_difference,
    sites_computing,
    under_stock_selection,
)

#: Sites returning zeros move the logits and the boxes by more than this: a hundred times the
#: CPU wiring tests' float32 tolerance (``check_family``'s 1e-4), far past any rounding. The fresh
#: encoders' models moved by at most 7e-3.
SEEN = 1e-2
#: The standard deviation of each value a site reads: of order one (a trained model's encoder
#: hands its sites layer-normalised or batch-normalised features), within a factor of 4.
VALUE_STD = (0.25, 4.0)


@pytest.mark.parametrize("family", FAMILIES.values(), ids=lambda f: f.name)
def test_sites_that_return_zeros_move_the_detections(family):
    model, arguments = build(family)
    with torch.no_grad():
        expected = model(**arguments)
    spreads = []

    def nothing(core, value, shapes, locations, *rest):
        """Records the value's standard deviation; answers (batch, queries, channels) zeros."""
        spreads.append(value.std().item())
        return value.new_zeros(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3])

    with torch.no_grad(), sites_computing(family, model, nothing):
        free = model(**arguments)
        read = list(spreads)
        got = Run(free, under_stock_selection(family, model, arguments, expected))
    low, high = VALUE_STD
    assert len(read) == family.sites, f"{family.name}: {len(read)} site calls in a forward"
    assert all(low <= spread <= high for spread in read), \
        f"{family.name}: the sites' values have standard deviations {read}, not in {VALUE_STD}"
    for key in DETECTIONS:
        moved = largest_difference(getattr(got.holding(key), key), getattr(expected, key))
        assert moved > SEEN, f"{family.name} {key}: moved by {moved:.3g}, not over {SEEN:.3g}"

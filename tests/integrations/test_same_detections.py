"""How the wiring's checks compare a wired detector's outputs with the stock one's
(``detectors.assert_same_detections``): query by query, or, where the queries are the top-k of
proposals scored after deformable-attention sites (the Grounding DINOs), proposal by proposal, so
that proposals tied at the cut may be selected in another order or swapped, and nothing else may
differ.

The outputs here are made up: five encoder proposals, each with a score (one text token), box
logits and the detection the decoder gives it; the model selects three by score, as Grounding
DINO does, and reports their reference points and detections in query order.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from .detectors import FAMILIES, assert_same_detections

ATOL = 1e-3
QUERIES = 3
#: the stock model's proposal scores: the first and fourth proposals are tied within a rounding
#: at the top, the third and fifth at the cut (the third and fourth best)
STOCK = [0.9000, 0.10, 0.5000, 0.8998, 0.4995]
#: what a rounding at the sites may do (every score within ATOL of the stock one): the top two
#: in the other order, or the fifth proposal selected in place of the third
WITHIN_A_ROUNDING = {
    "same": STOCK,
    "tied-swapped-at-the-cut": [0.9000, 0.10, 0.4994, 0.8998, 0.4999],
    "order-of-two-near-ties": [0.8999, 0.10, 0.5000, 0.9003, 0.4995],
}
SELECTING = FAMILIES["grounding_dino"]


def detections(scores, moved=None):
    """The model's output for proposal ``scores``: the encoder's proposals, the top-``QUERIES``
    selection's reference points, and each selected proposal's detection; ``moved``: the
    proposal whose detection differs by 0.01."""
    scores = torch.tensor([scores])
    proposals = scores.shape[1]
    boxes = torch.arange(proposals * 4, dtype=torch.float32).reshape(1, proposals, 4) / 10
    found = torch.arange(proposals, dtype=torch.float32).reshape(1, proposals, 1) * 10
    if moved is not None:
        found[0, moved] += 0.01
    chosen = torch.topk(scores, QUERIES, dim=1)[1]
    return SimpleNamespace(
        enc_outputs_class=scores.unsqueeze(-1), enc_outputs_coord_logits=boxes,
        init_reference_points=torch.gather(boxes, 1, chosen.unsqueeze(-1).expand(-1, -1, 4))
        .sigmoid(),
        logits=torch.gather(found, 1, chosen.unsqueeze(-1)),
        pred_boxes=torch.gather(boxes, 1, chosen.unsqueeze(-1).expand(-1, -1, 4)))


@pytest.mark.parametrize("scores", WITHIN_A_ROUNDING.values(), ids=WITHIN_A_ROUNDING.keys())
def test_proposals_tied_within_a_rounding_may_be_selected_otherwise(scores):
    assert_same_detections(SELECTING, detections(scores), detections(STOCK), ATOL)


def test_a_proposal_selected_by_both_must_give_the_same_detection():
    with pytest.raises(AssertionError, match="paired by proposal"):
        assert_same_detections(SELECTING, detections(STOCK, moved=3), detections(STOCK), ATOL)


def test_an_encoder_score_off_by_more_than_a_rounding_fails():
    changed = [0.9000, 0.10, 0.5000, 0.8998, 0.6000]  # the fifth selected, 0.1 above the cut
    with pytest.raises(AssertionError, match="enc_outputs_class"):
        assert_same_detections(SELECTING, detections(changed), detections(STOCK), ATOL)


def test_reference_points_that_are_not_the_top_k_proposals_fail():
    """The check reads the selection from the scores as transformers makes it, and proves that
    reading against the reference points the model reports."""
    other = detections(STOCK)
    other.init_reference_points = other.init_reference_points.flip(1)
    with pytest.raises(AssertionError, match="selection changed"):
        assert_same_detections(SELECTING, other, detections(STOCK), ATOL)


def test_a_family_selecting_before_its_sites_is_compared_query_by_query():
    """RT-DETR and its kin select their queries before any deformable-attention site: a
    reordering there is a wiring fault, not a tie."""
    query_by_query = replace(SELECTING, selects_after_sites=False)
    reordered = WITHIN_A_ROUNDING["order-of-two-near-ties"]
    with pytest.raises(AssertionError, match="logits"):
        assert_same_detections(query_by_query, detections(reordered), detections(STOCK), ATOL)

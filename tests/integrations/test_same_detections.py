"""How the wiring's checks compare a wired detector's outputs with the stock one's
(``detectors.assert_same_detections``): query by query, or, where the queries are the top-k of
proposals scored after deformable-attention sites (the Grounding DINOs), the encoder's proposals
of the two forwards, then the wired model's detections with the stock's selection; and within
which tolerance (``detectors.Absolute``; ``detectors.WithinSiteSensitivity``: a multiple of how
far the stock model moves with its sites perturbed within the slot's contract; or, for the
Grounding DINOs in bf16, ``detectors.WithinStockError``: a multiple of the stock's own error
against its float32 forward).

The outputs of the first tests are made up: five encoder proposals, each with a score (one text
token) and box logits; the model selects three by score, as Grounding DINO does, reports their
reference points, and gives each query a detection that depends, as Grounding DINO's does, on its
proposal, on its rank (the content embedding is the rank's) and on every other query (the
decoder's self-attention is unmasked). The bf16 Grounding DINO tests and the sensitivity rule's
run the small real models on CPU, as the GPU test runs the default ones.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from types import SimpleNamespace

import pytest
import torch

import libreyolo.integrations.transformers as wiring

from .detectors import (
    DETECTIONS,
    FAMILIES,
    Absolute,
    Run,
    WithinSiteSensitivity,
    WithinStockError,
    assert_same_detections,
    build,
    largest_difference,
    model_tolerance,
    perturbed,
    site_sensitivity,
    sites_computing,
    stock_core,
    under_stock_selection,
)

ATOL = 1e-3
TOLERANCE = Absolute(ATOL)
QUERIES = 3
#: the stock model's proposal scores: the first and fourth proposals are tied within a rounding
#: at the top, the third and fifth at the cut (the third and fourth best)
STOCK = [0.9000, 0.10, 0.5000, 0.8998, 0.4995]
#: what a rounding at the sites may do (every score within ATOL of the stock one): the top two
#: in the other order, or the fifth proposal selected in place of the third
WITHIN_A_ROUNDING = {
    "tied-swapped-at-the-cut": [0.9000, 0.10, 0.4994, 0.8998, 0.4999],
    "order-of-two-near-ties": [0.8999, 0.10, 0.5000, 0.9003, 0.4995],
}
SELECTING = FAMILIES["grounding_dino"]
QUERY_BY_QUERY = replace(SELECTING, selects_after_sites=False)


def detections(scores, selection=None, moved=None):
    """The model's output for its encoder's proposal ``scores``, selecting from ``selection``
    (another forward's scores, as ``detectors.selecting`` hands them; the output then reports
    them, as transformers does) or from its own; ``moved``: the proposal whose detection differs
    by 0.01. A query's logit: 10 x its proposal + 100 x its rank + the mean of every query's
    proposal x rank (the self-attention's share)."""
    own = torch.tensor([scores])
    reported = own if selection is None else torch.tensor([selection])
    proposals = own.shape[1]
    boxes = torch.arange(proposals * 4, dtype=torch.float32).reshape(1, proposals, 4) / 10
    chosen = torch.topk(reported, QUERIES, dim=1)[1]
    rank = torch.arange(QUERIES, dtype=torch.float32).unsqueeze(0)
    found = 10 * chosen + 100 * rank + (chosen * rank).mean(1, keepdim=True)
    if moved is not None:
        found = found + 0.01 * (chosen == moved)
    picked = torch.gather(boxes, 1, chosen.unsqueeze(-1).expand(-1, -1, 4))
    return SimpleNamespace(
        enc_outputs_class=reported.unsqueeze(-1), enc_outputs_coord_logits=boxes,
        init_reference_points=picked.sigmoid(), logits=found.unsqueeze(-1), pred_boxes=picked)


def wired(scores, moved=None):
    """The wired model's runs: its own forward, and its forward with the stock's selection."""
    return Run(detections(scores), detections(scores, selection=STOCK, moved=moved))


def test_the_same_outputs_pass():
    assert_same_detections(SELECTING, wired(STOCK), detections(STOCK), TOLERANCE)


@pytest.mark.parametrize("scores", WITHIN_A_ROUNDING.values(), ids=WITHIN_A_ROUNDING.keys())
def test_a_selection_of_its_own_within_a_rounding_is_not_compared(scores):
    """Its detections differ from the stock's on every query (ranks swapped, and the queries'
    mix), so they cannot be compared with the stock's; the run with the stock's selection can."""
    got = wired(scores)
    assert not torch.equal(got.free.logits, detections(STOCK).logits)
    assert_same_detections(SELECTING, got, detections(STOCK), TOLERANCE)


def test_a_run_that_does_not_decode_the_stocks_selection_fails():
    """The run meant to have the stock's selection made its own (a hook that did not take)."""
    swapped = WITHIN_A_ROUNDING["order-of-two-near-ties"]
    own = Run(detections(swapped), detections(swapped))
    with pytest.raises(AssertionError, match="decodes other queries"):
        assert_same_detections(SELECTING, own, detections(STOCK), TOLERANCE)


def test_a_wiring_that_moves_a_detection_fails():
    with pytest.raises(AssertionError, match="logits"):
        assert_same_detections(SELECTING, wired(STOCK, moved=3), detections(STOCK), TOLERANCE)


def test_an_encoder_score_off_by_more_than_a_rounding_fails():
    changed = [0.9000, 0.10, 0.5000, 0.8998, 0.6000]  # the fifth selected, 0.1 above the cut
    with pytest.raises(AssertionError, match="enc_outputs_class"):
        assert_same_detections(SELECTING, wired(changed), detections(STOCK), TOLERANCE)


def test_reference_points_that_are_not_the_top_k_proposals_fail():
    """The check reads the selection from the scores as transformers makes it, and proves that
    reading against the reference points the model reports."""
    got = wired(STOCK)
    got.selected.init_reference_points = got.selected.init_reference_points.flip(1)
    with pytest.raises(AssertionError, match="selection changed"):
        assert_same_detections(SELECTING, got, detections(STOCK), TOLERANCE)


def test_a_family_selecting_before_its_sites_is_compared_query_by_query():
    """RT-DETR and its kin select their queries before any deformable-attention site: a
    reordering there is a wiring fault, not a tie."""
    reordered = WITHIN_A_ROUNDING["order-of-two-near-ties"]
    with pytest.raises(AssertionError, match="logits"):
        assert_same_detections(QUERY_BY_QUERY, Run(detections(reordered)), detections(STOCK),
                               TOLERANCE)


@pytest.mark.parametrize(("family", "got"), [(SELECTING, Run(detections(STOCK))),
                                             (QUERY_BY_QUERY, wired(STOCK))],
                         ids=["selecting-without-the-stocks-selection", "query-by-query-with-it"])
def test_runs_that_do_not_fit_the_family_are_refused(family, got):
    with pytest.raises(ValueError, match="got: expected a Run"):
        assert_same_detections(family, got, detections(STOCK), TOLERANCE)


#: bf16: the float32 oracle's logits (the last is past the prompt), the stock's bf16 logits 0.25
#: off (limit: 8 x 0.25 + 8 ulps of 20 = 2 + 8 x 2^-7 x 20 = 3.25), and wired ones
ORACLE = [10.0, 20.0, -float("inf")]
STOCK_BF16 = [10.25, 20.0, -float("inf")]
WITHIN_THE_STOCKS_ERROR = {"within": [12.0, 22.0, -float("inf")],
                           "at-the-limit": [10.0, 23.25, -float("inf")]}
BEYOND_IT = {"beyond": [10.0, 23.5, -float("inf")],
             "finite-past-the-prompt": [10.0, 20.0, 0.0]}


def _logits(values):
    return SimpleNamespace(logits=torch.tensor([values]))


def _check_bf16(values, oracle: Run) -> None:
    WithinStockError(oracle).check("logits", _logits(values).logits, _logits(STOCK_BF16).logits,
                                   "made up")


@pytest.mark.parametrize("values", WITHIN_THE_STOCKS_ERROR.values(),
                         ids=WITHIN_THE_STOCKS_ERROR.keys())
def test_the_bf16_rule_accepts_an_error_within_the_stocks_own(values):
    _check_bf16(values, Run(_logits(ORACLE)))


@pytest.mark.parametrize("values", BEYOND_IT.values(), ids=BEYOND_IT.keys())
def test_the_bf16_rule_rejects_an_error_beyond_the_stocks_own(values):
    with pytest.raises(AssertionError, match="from the float32 stock model, over 3.25"):
        _check_bf16(values, Run(_logits(ORACLE)))


def test_the_bf16_rule_reads_the_oracle_decoded_with_the_stocks_selection():
    """The oracle's own forward decodes other queries (100 off): bounding by its distance from
    the stock would let anything pass."""
    with pytest.raises(AssertionError, match="over 3.25"):
        _check_bf16(BEYOND_IT["beyond"], Run(_logits([110.0, 120.0, 0.0]), _logits(ORACLE)))


def _small_grounding_dino_in_bf16(monkeypatch, scale):
    """The GPU test's comparison (``model_tolerance``, ``under_stock_selection``) on the small
    Grounding DINO in bf16 autocast on CPU, its wired sites computing transformers' own core in
    float64, times ``scale``, rounded to the call's dtype (at 1, a kernel more accurate than the
    stock one): the arguments of ``assert_same_detections``."""
    pytest.importorskip("transformers", reason="the transformers extra is not installed")
    core = stock_core(SELECTING)

    def site(value, shapes, locations, weights):
        exact = core(value.double(), shapes, locations.double(), weights.double())
        return (exact * scale).to(wiring._widest(value, locations, weights))

    stock, arguments = build(SELECTING)
    wired_model, _ = build(SELECTING)
    wiring.wire_deformable_attention(wired_model)
    monkeypatch.setattr(wiring, "_ask_classic", site)
    autocast = torch.autocast("cpu", torch.bfloat16)
    with torch.no_grad(), autocast:
        expected = stock(**arguments)
    tolerance = model_tolerance(SELECTING, "bf16", stock, arguments, expected)
    with torch.no_grad(), autocast:
        got = Run(wired_model(**arguments),
                  under_stock_selection(SELECTING, wired_model, arguments, expected))
    return SELECTING, got, expected, tolerance


def test_a_small_grounding_dino_with_exact_sites_passes_in_bf16(monkeypatch):
    assert_same_detections(*_small_grounding_dino_in_bf16(monkeypatch, 1.0))


def test_a_small_grounding_dino_whose_sites_double_fails_in_bf16(monkeypatch):
    with pytest.raises(AssertionError, match="from the float32 stock model"):
        assert_same_detections(*_small_grounding_dino_in_bf16(monkeypatch, 2.0))


#: The sensitivity rule's cases: every family in float32, and in bf16 those whose queries are
#: selected before their sites (the Grounding DINOs' bf16 rule is ``WithinStockError``)
SENSITIVITY_CASES = [(family.name, dtype) for family in FAMILIES.values()
                     for dtype in ("fp32", "bf16")
                     if dtype == "fp32" or not family.selects_after_sites]
#: Two images, so a rounding has more entries to turn at
BATCH = 2
#: The limit stays below this fraction of how far sites returning zeros move each output.
#: Measured on these models: float32 at most 1e-5; bf16 at most 0.39 (RT-DETRv2 discrete's boxes:
#: its core gives bf16, so its sites are perturbed by 8 bf16 ulps, and a sampling point moved to
#: the next pixel moves a detection far), then 0.31 (LW-DETR's logits: no perturbed run moved
#: them, the floor of 2 ulps of the largest logit is the limit), the others 0.18 or less.
NOT_VACUOUS = {"fp32": 1e-3, "bf16": 0.5}


def _autocast(dtype: str):
    return torch.autocast("cpu", torch.bfloat16, enabled=dtype == "bf16")


@cache
def _calibrated(name: str, dtype: str):
    """The family's stock model (unwired), its inputs, its forward in ``dtype`` and the tolerance
    the GPU test would hold a wired model to (``model_tolerance``)."""
    pytest.importorskip("transformers", reason="the transformers extra is not installed")
    family = FAMILIES[name]
    stock, arguments = build(family, batch=BATCH)
    with torch.no_grad(), _autocast(dtype):
        expected = stock(**arguments)
    return stock, arguments, expected, model_tolerance(family, dtype, stock, arguments, expected)


def _with_sites(name: str, dtype: str, site) -> Run:
    """The family's stock model run in ``dtype`` with its sites computing ``site`` (and under the
    stock's selection, where its queries are selected after the sites)."""
    stock, arguments, expected, _ = _calibrated(name, dtype)
    family = FAMILIES[name]
    with torch.no_grad(), _autocast(dtype), sites_computing(family, stock, site):
        return Run(stock(**arguments), under_stock_selection(family, stock, arguments, expected))


def _stock_core_swapping_the_locations_axes(core, value, shapes, locations, *rest):
    return core(value, shapes, locations.flip(-1), *rest)


@pytest.mark.parametrize("name", ["rt_detr", "rt_detr_v2_discrete", "d_fine"])
def test_sites_computing_the_stock_core_give_the_stock_outputs_bit_for_bit(name):
    """What the perturbed runs start from is the stock model: the classic module, the discrete
    ragged core called by name, the ragged core as an attribute."""
    _, _, expected, _ = _calibrated(name, "fp32")
    got = _with_sites(name, "fp32", lambda core, *arguments: core(*arguments))
    for key in DETECTIONS:
        assert torch.equal(getattr(got.free, key), getattr(expected, key)), key


@pytest.mark.parametrize(("name", "dtype"), SENSITIVITY_CASES)
def test_the_stock_with_its_sites_perturbed_by_a_quarter_of_the_contract_passes(name, dtype):
    """Another seed than the calibration's, and a quarter of its perturbation: an error a kernel
    within the contract would make."""
    _, _, expected, tolerance = _calibrated(name, dtype)
    assert isinstance(tolerance, WithinSiteSensitivity), tolerance
    got = _with_sites(name, dtype, perturbed(seed=99, scale=0.25))
    assert_same_detections(FAMILIES[name], got, expected, tolerance)


#: The sites of a wiring beyond the contract, made afresh for each test (a perturbed site's noise
#: generator has state)
BEYOND_THE_CONTRACT = {"fp32": lambda: perturbed(seed=99, scale=100),
                       "bf16": lambda: _stock_core_swapping_the_locations_axes}


@pytest.mark.parametrize(("name", "dtype"), [
    ("rt_detr", "fp32"), ("rt_detr", "bf16"), ("d_fine", "fp32"), ("d_fine", "bf16"),
    ("grounding_dino", "fp32")])
def test_a_wiring_whose_sites_err_beyond_the_contract_fails(name, dtype):
    """fp32: sites 100 x the contract's perturbation off; bf16: the locations' axes swapped."""
    site = BEYOND_THE_CONTRACT[dtype]()
    _, _, expected, tolerance = _calibrated(name, dtype)
    got = _with_sites(name, dtype, site)
    with pytest.raises(AssertionError, match="from the stock model, over"):
        assert_same_detections(FAMILIES[name], got, expected, tolerance)


@pytest.mark.parametrize(("name", "dtype"), SENSITIVITY_CASES)
def test_the_limit_is_a_fraction_of_what_sites_returning_zeros_move(name, dtype):
    _, _, expected, tolerance = _calibrated(name, dtype)
    got = _with_sites(name, dtype, lambda core, *arguments: core(*arguments) * 0)
    for key in DETECTIONS:
        limit = tolerance.limit(key, getattr(expected, key))
        moved = largest_difference(getattr(got.holding(key), key), getattr(expected, key))
        assert limit < NOT_VACUOUS[dtype] * moved, \
            f"{name} {dtype} {key}: limit {limit:.3g}, zeroed sites move it by {moved:.3g}"


def test_perturbed_runs_that_decode_other_queries_fail():
    """The rule needs the stock's queries in every perturbed run: here the stock's forward is
    made to report other reference points (the same boxes, queries in reverse)."""
    stock, arguments, expected, _ = _calibrated("rt_detr", "fp32")
    other = replace(expected, init_reference_points=expected.init_reference_points.flip(1))
    with torch.no_grad(), pytest.raises(AssertionError, match="decodes other queries"):
        site_sensitivity(FAMILIES["rt_detr"], stock, arguments, other)

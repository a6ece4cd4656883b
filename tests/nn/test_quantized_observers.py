"""Observers (min/max, moving average, percentile), the calibrated values they give, and
calibrate's observer choice and progress reporting (tqdm optional)."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from libreyolo.nn.quantized import (
    MinMaxObserver,
    MovingAverageObserver,
    PercentileObserver,
    calibrate,
    input_qparams,
    prepare,
)
from libreyolo.quant.fake_quant import fake_quant_fp8, fake_quant_int8_affine


def _batches():
    return [torch.tensor([-1.0, 0.5, 2.0, float("nan")]), torch.tensor([-3.0, 1.0, float("inf")]),
            torch.tensor([0.0, 4.0])]


def _range(observer):
    for b in _batches():
        observer.observe(b)
    lo, hi = observer.range()
    return lo.item(), hi.item()


def test_minmax_keeps_the_extremes_of_the_finite_values():
    assert _range(MinMaxObserver()) == (-3.0, 4.0)


def test_moving_average_starts_at_the_first_batch_and_averages_exponentially():
    lo, hi = _range(MovingAverageObserver(averaging_constant=0.5))
    # lo: -1 -> -1 + 0.5 (-3 + 1) = -2 -> -2 + 0.5 (0 + 2) = -1; hi: 2 -> 1.5 -> 2.75
    assert (lo, hi) == (-1.0, 2.75)


def test_percentile_averages_each_batchs_exact_percentiles():
    observer = PercentileObserver(percentile=75)
    values = torch.arange(1.0, 101.0)  # 1..100: the 75th percentile is the 75th value
    observer.observe(values)
    observer.observe(values * 2)
    lo, hi = observer.range()
    assert (lo.item(), hi.item()) == ((26 + 52) / 2, (75 + 150) / 2)


def test_percentile_clips_outliers_minmax_keeps():
    x = torch.cat([torch.randn(100_000), torch.tensor([1000.0])])
    minmax, percentile = MinMaxObserver(), PercentileObserver()
    minmax.observe(x)
    percentile.observe(x)
    assert minmax.range()[1].item() == 1000.0
    assert percentile.range()[1].item() < 10


def test_an_observer_that_saw_nothing_finite_has_no_range():
    observer = MinMaxObserver()
    observer.observe(torch.tensor([float("nan"), float("inf")]))
    assert observer.range() is None


def test_int8_affine_parameters_hold_zero_exactly_and_cover_the_range():
    lo, hi = torch.tensor(-1.0), torch.tensor(3.0)
    scale, zero_point = input_qparams("int8_affine", lo, hi)
    assert scale.dtype == torch.float32 and scale.shape == ()
    assert scale.item() == (torch.tensor(4.0) / torch.tensor(255.0)).item()
    assert zero_point == -128 + round(1.0 / scale.item())
    x = torch.tensor([-1.0, 0.0, 3.0])
    q = fake_quant_int8_affine(x, scale, zero_point)
    assert q[1].item() == 0.0 and (q - x).abs().max() <= scale / 2
    # a range entirely above 0 is widened to hold 0: the zero point is -128
    assert input_qparams("int8_affine", torch.tensor(2.0), torch.tensor(5.0))[1] == -128


def test_fp8_static_scale_maps_the_amax_to_448():
    scale, zero_point = input_qparams("fp8_static", torch.tensor(-7.0), torch.tensor(3.0))
    assert zero_point is None and scale.item() == (torch.tensor(7.0) / 448).item()
    assert fake_quant_fp8(torch.tensor(-7.0), scale).item() == -7.0


def test_an_empty_range_gives_scale_one():
    assert input_qparams("fp8_static", torch.tensor(0.0), torch.tensor(0.0))[0].item() == 1.0
    assert input_qparams("int8_affine", torch.tensor(0.0), torch.tensor(0.0)) == (
        torch.tensor(1.0), -128)


def _model():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 8))
    prepare(model, "fp8_static")
    return model


@pytest.mark.parametrize("observer, expected", [
    ("minmax", MinMaxObserver), ("moving_average", MovingAverageObserver),
    ("percentile", PercentileObserver), (lambda: PercentileObserver(99.0), PercentileObserver)])
def test_calibrate_uses_the_observer_asked_for(observer, expected, monkeypatch):
    seen = []
    real = expected.observe
    monkeypatch.setattr(expected, "observe", lambda self, x: seen.append(self) or real(self, x))
    batches = [torch.randn(16, 32) for _ in range(3)]
    report = calibrate(_model(), batches, observer=observer, progress=False)
    assert len(seen) == 6 and all(type(s) is expected for s in seen)  # 2 layers x 3 batches
    assert set(report.layers) == {"0", "2"} and report.batches == 3


def test_the_observers_give_the_scale_their_range_gives():
    model = _model()
    batches = [torch.randn(16, 32) * (i + 1) for i in range(3)]
    calibrate(model, batches, observer="minmax", progress=False)
    amax = max(b.abs().max() for b in batches)
    assert model[0].input_scale.item() == (amax / torch.tensor(448.0)).item()


def test_calibrate_restores_training_mode_and_runs_without_gradients():
    model = _model().train()
    grads = []
    model[0].register_forward_pre_hook(lambda m, a: grads.append(torch.is_grad_enabled()))
    training = []
    model[0].register_forward_pre_hook(lambda m, a: training.append(m.training))
    calibrate(model, [torch.randn(4, 32)], progress=False)
    assert grads == [False] and training == [False] and model.training and model[0].training


def test_progress_is_reported_to_a_callable_with_the_total():
    seen = []
    calibrate(_model(), [torch.randn(4, 32)] * 3, progress=lambda done, total: seen.append(
        (done, total)))
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_progress_works_without_tqdm(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    report = calibrate(_model(), (torch.randn(4, 32) for _ in range(2)), progress=True)
    assert report.batches == 2


def test_batches_can_be_tuples_dicts_or_a_forward():
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(32, 8)

        def forward(self, a, b=None):
            return self.fc(a if b is None else a + b)

    model = Two()
    prepare(model, "fp8_static")
    x = torch.randn(4, 32)
    assert calibrate(model, [(x, x)], progress=False).layers["fc"]["input_scale"] == (
        (2 * x).abs().max() / 448).item()
    assert calibrate(model, [{"a": x}], progress=False).batches == 1
    report = calibrate(model, [x], forward=lambda m, batch: m(batch * 3), progress=False)
    assert report.layers["fc"]["input_scale"] == ((3 * x).abs().max() / 448).item()


def test_a_dynamic_recipe_has_nothing_to_calibrate():
    model = nn.Sequential(nn.Linear(32, 8))
    prepare(model, "mxfp8")
    report = calibrate(model, [torch.randn(2, 32)])
    assert report.layers == {} and "nothing" not in str(report) and "no layer" in str(report)

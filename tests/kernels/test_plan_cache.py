"""Plans kept under a description of their arguments (``libreyolo.kernels.plan_cache``), as the
fake-quant provider uses them: a call described as an earlier one runs no planning code, and
nothing a plan depends on can change without the next call planning again.

Run on CPU tensors: the compiled kernels decline them, but ``prepare`` plans (and keeps) first.
That a kept plan computes the reference's bits is checked under the interpreter
(``tests/kernels/quant/interpreted_checks.py``) and on the GPU.
"""

from __future__ import annotations

import pytest
import torch

from libreyolo.kernels import registered
from libreyolo.kernels.plan_cache import PlanCache, describe
from libreyolo.kernels.quant.simulate import plan as fq
from libreyolo.kernels.registry import answer
from libreyolo.kernels.settings import raw_values


@pytest.fixture
def planned(monkeypatch):
    """Counts the planner runs of every fake-quant slot; the cache starts empty."""
    fq._CACHE.clear()
    counts: dict[str, int] = {}
    for slot, planner in list(fq.PLANNERS.items()):
        def counted(*args, _slot=slot, _planner=planner, **kwargs):
            counts[_slot] = counts.get(_slot, 0) + 1
            return _planner(*args, **kwargs)

        monkeypatch.setitem(fq.PLANNERS, slot, counted)
    yield counts
    fq._CACHE.clear()


def _layout(answer):
    return answer.layout if isinstance(answer, fq.Plan) else answer


def test_a_call_described_as_an_earlier_one_is_not_planned_again(planned):
    x, scale = torch.randn(16, 32), torch.tensor(0.02)
    first = fq.prepare("fake_quant_fp8", x, scale)
    again = fq.prepare("fake_quant_fp8", torch.randn(16, 32), scale)  # same description
    assert planned == {"fake_quant_fp8": 1}
    assert again.layout is first.layout  # from the kept entry


def test_each_difference_in_the_description_plans_again(planned):
    x, scale = torch.randn(16, 32), torch.tensor(0.02)
    fq.prepare("fake_quant_fp8", x, scale)
    for other in (
        (torch.randn(16, 33), scale),  # shape
        (torch.randn(32, 16).t(), scale),  # strides
        (x.half(), scale),  # dtype
        (x, scale, "e5m2"),  # an argument
    ):
        fq.prepare("fake_quant_fp8", *other[:2], **({"fmt": other[2]} if len(other) > 2 else {}))
    assert planned == {"fake_quant_fp8": 5}


def test_an_argument_of_another_type_is_checked_again_even_if_it_compares_equal(planned):
    x = torch.randn(4, 8)
    fq.prepare("fake_quant_int8_per_channel", x, torch.ones(4), 0)
    with pytest.raises(TypeError, match="axis must be an int"):
        fq.prepare("fake_quant_int8_per_channel", x, torch.ones(4), False)


def test_a_keyword_of_another_type_is_checked_again_even_if_it_compares_equal(planned):
    x, scale = torch.randn(4, 8), torch.ones(4)
    fq.prepare("fake_quant_fp8", x, scale, fmt="e4m3", axis=0)
    with pytest.raises(TypeError, match="axis must be an int"):
        fq.prepare("fake_quant_fp8", x, scale, fmt="e4m3", axis=False)


def test_a_scale_given_by_keyword_and_changed_in_place_is_validated_again(planned):
    x, scale = torch.randn(4, 8), torch.tensor(0.5)
    fq.prepare("fake_quant_fp8", x, scale=scale, fmt="e4m3")
    scale.fill_(float("nan"))
    with pytest.raises(ValueError, match="finite and non-negative"):
        fq.prepare("fake_quant_fp8", x, scale=scale, fmt="e4m3")


def test_a_scale_changed_in_place_is_validated_again(planned):
    x, scale = torch.randn(4, 8), torch.tensor(0.5)
    fq.prepare("fake_quant_fp8", x, scale)
    scale.fill_(float("nan"))
    with pytest.raises(ValueError, match="finite and non-negative"):
        fq.prepare("fake_quant_fp8", x, scale)


def test_another_scale_tensor_with_the_same_metadata_is_validated(planned):
    x = torch.randn(4, 8)
    fq.prepare("fake_quant_fp8", x, torch.tensor(0.5))
    with pytest.raises(ValueError, match="finite and non-negative"):
        fq.prepare("fake_quant_fp8", x, torch.tensor(-1.0))


def test_layers_with_their_own_scales_keep_their_own_plans(planned):
    """A model's layers share descriptions, each with its own calibrated scale: taking turns,
    none re-plans the others' way (one entry per description thrashed: every call planned)."""
    x = torch.randn(4, 8)
    scales = [torch.tensor(0.5), torch.tensor(0.25), torch.tensor(0.125)]
    for _ in range(3):
        for scale in scales:
            fq.prepare("fake_quant_int8_affine", x, scale, 3)
    assert planned == {"fake_quant_int8_affine": len(scales)}


def _kept_affine(*args):
    """The cache entry (layout, binder) of an int8 affine call with these arguments."""
    key = ("fake_quant_int8_affine", raw_values()[2], *map(describe, args))
    return fq._CACHE.get(key, args[1:])


def test_a_zero_point_changed_in_place_is_read_again(planned):
    x, scale, zero_point = torch.randn(64), torch.tensor(0.05), torch.tensor(3)
    assert _layout(fq.prepare("fake_quant_int8_affine", x, scale, zero_point)) is not None
    assert _kept_affine(x, scale, zero_point)[0].zero_point == 3
    zero_point.fill_(-7)
    fq.prepare("fake_quant_int8_affine", x, scale, zero_point)
    assert planned["fake_quant_int8_affine"] == 2
    assert _kept_affine(x, scale, zero_point)[0].zero_point == -7


def test_a_plan_whose_scale_was_not_read_is_not_kept(planned, monkeypatch):
    """Under a CUDA graph capture the scale check cannot read values: the plan it made must not
    spare a later eager call its check."""
    from libreyolo.quant import validation

    x, scale = torch.randn(4, 8), torch.tensor(float("inf"))
    monkeypatch.setattr(validation, "host_reads_forbidden", lambda: True)
    fq.prepare("fake_quant_fp8", x, scale)  # not read: nothing to reject yet
    monkeypatch.undo()
    with pytest.raises(ValueError, match="finite and non-negative"):
        fq.prepare("fake_quant_fp8", x, scale)


def test_graph_capture_declines_a_kept_description(planned):
    """The declaration is asked on every call, before the kept plan: a description planned
    eagerly is still declined while a graph is traced."""
    x = torch.randn(4, 64)
    fq.prepare("fake_quant_mxfp4_dynamic", x)
    (impl,) = [i for i in registered("fake_quant_mxfp4_dynamic") if i.name == "triton"]
    reasons = []

    def trace(t):
        reasons.append(answer(impl, (t,)))
        return t * 2

    torch.jit.trace(trace, (x,))
    assert reasons[0].startswith("declared unsupported (a graph is being captured")


def test_the_cache_is_bounded():
    cache = PlanCache(limit=3)
    for i in range(10):
        cache.put((i,), i)
    assert len(cache) <= 3


def test_an_unhashable_description_is_never_kept():
    cache = PlanCache(limit=3)
    cache.put(([1],), "plan")
    assert cache.get(([1],)) is None and len(cache) == 0

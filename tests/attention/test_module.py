"""MSDeformAttn reaches the slot whenever an implementation takes the input, else falls back."""

import pytest
import torch

from conformance.inputs.ms_deform_attn_cases import load_cases, make_inputs
from libreyolo.kernels import clear_cache
from libreyolo.kernels.attention.ms_deform_attn import can_use_slot, maybe_ms_deform_attn
from libreyolo.kernels.attention.ms_deform_attn import dispatch as ms_dispatch
from libreyolo.kernels.attention.ms_deform_attn import levels as levels_module
from libreyolo.kernels.attention.ms_deform_attn.portable import ms_deform_attn_portable
from libreyolo.nn import MSDeformAttn

from .static_shapes import WithStaticShapes, example_inputs

LEVELS = [(6, 8), (3, 4)]


def module_inputs(batch=2, len_q=5, d_model=32, reference_dims=2):
    shapes = torch.tensor(LEVELS, dtype=torch.int64)
    len_in = sum(h * w for h, w in LEVELS)
    starts = torch.tensor([0, LEVELS[0][0] * LEVELS[0][1]], dtype=torch.int64)
    return (torch.randn(batch, len_q, d_model), torch.rand(batch, len_q, len(LEVELS),
                                                           reference_dims),
            torch.randn(batch, len_in, d_model), shapes, starts)


def make_module():
    return MSDeformAttn(d_model=32, n_levels=len(LEVELS), n_heads=4, n_points=3).eval()


def test_forward_reaches_the_slot_with_the_spatial_shapes_tensor(fake_impl):
    query, reference, value, shapes, starts = module_inputs()
    out = make_module()(query, reference, value, shapes, starts)
    assert len(fake_impl.calls) == 1
    slot_value, slot_shapes, slot_locations, slot_weights = fake_impl.calls[0]
    assert slot_shapes is shapes
    assert slot_value.shape == (2, value.shape[1], 4, 8)
    assert slot_locations.shape == (2, 5, 4, len(LEVELS), 3, 2)
    assert slot_weights.shape == (2, 5, 4, len(LEVELS), 3)
    torch.testing.assert_close(slot_weights.sum((-1, -2)), torch.ones(2, 5, 4))
    # the slot's output is what the module projects
    module = make_module()
    expected = module.output_proj(torch.full((2, 5, 32), fake_impl.MARK))
    torch.testing.assert_close(module(query, reference, value, shapes, starts), expected)
    assert out.shape == (2, 5, 32)


def portable_forward(module, query, reference, value, shapes):
    """What the module computes without the slot, written out from Deformable DETR's equations."""
    heads, levels, points = module.n_heads, module.n_levels, module.n_points
    b, q, _ = query.shape
    v = module.value_proj(value).view(b, value.shape[1], heads, -1)
    offsets = module.sampling_offsets(query).view(b, q, heads, levels, points, 2)
    weights = module.attention_weights(query).view(b, q, heads, -1).softmax(-1)
    size = torch.tensor([[w, h] for h, w in LEVELS], dtype=query.dtype)
    locations = reference[:, :, None, :, None, :] + offsets / size[None, None, None, :, None, :]
    out = ms_deform_attn_portable(v, shapes, locations, weights.view(b, q, heads, levels, points))
    return module.output_proj(out)


@pytest.mark.parametrize("why", ["declines the input", "is not eligible here"])
def test_falls_back_to_the_portable_core(fake_impl, why):
    if why == "declines the input":
        fake_impl.decline = "not this input"
    else:
        fake_impl.eligible = False
        clear_cache()
    module = make_module()
    query, reference, value, shapes, starts = module_inputs()
    out = module(query, reference, value, shapes, starts)
    assert fake_impl.calls == []
    torch.testing.assert_close(out, portable_forward(module, query, reference, value, shapes))


def test_without_any_implementation_the_module_runs_the_portable_core():
    module = make_module()
    query, reference, value, shapes, starts = module_inputs()
    torch.testing.assert_close(module(query, reference, value, shapes, starts),
                               portable_forward(module, query, reference, value, shapes))


def test_spatial_shapes_as_pairs_give_the_same_output():
    module = make_module()
    query, reference, value, shapes, starts = module_inputs()
    torch.testing.assert_close(module(query, reference, value, LEVELS, starts),
                               module(query, reference, value, shapes, starts))


@pytest.mark.parametrize("layout", ["pairs", "tensor read before"])
def test_the_offset_normalizer_is_made_once_and_changes_no_bit(layout, monkeypatch):
    """Level sizes known on the host (pairs, or a tensor the kernels read before at this
    version) divide the offsets by a normalizer kept per (levels, device, dtype): the same
    arithmetic as the per-call path, without its two launches a call."""
    module = make_module()
    query, reference, value, shapes, starts = module_inputs()
    per_call = module(query, reference, value, shapes, starts)  # a tensor never read: per call
    if layout == "pairs":
        shapes = LEVELS
    else:
        assert levels_module.level_shapes(shapes) == tuple(LEVELS)  # what the kernels' read does
    made, flip = [], torch.Tensor.flip
    monkeypatch.setattr(torch.Tensor, "flip", lambda self, *a: made.append(a) or flip(self, *a))
    levels_module._normalizers.clear()
    first = module(query, reference, value, shapes, starts)
    second = module(query, reference, value, shapes, starts)
    assert len(made) == 1, "the normalizer is made on the first call only"
    assert torch.equal(first, per_call) and torch.equal(second, per_call)


def test_sizes_written_into_a_read_tensor_are_normalized_by_the_new_sizes():
    module = make_module()
    query, reference, value, shapes, starts = module_inputs()
    levels_module.level_shapes(shapes)
    module(query, reference, value, shapes, starts)
    shapes[1] = torch.tensor([4, 3])  # same number of rows, other sizes: a new version
    swapped = [LEVELS[0], (4, 3)]
    expected = module(query, reference, value, torch.tensor(swapped), starts)
    torch.testing.assert_close(module(query, reference, value, shapes, starts), expected)


def test_box_reference_points_scale_offsets_by_the_box():
    module = make_module()
    query, boxes, value, shapes, starts = module_inputs(reference_dims=4)
    out = module(query, boxes, value, shapes, starts)
    assert out.shape == (2, 5, 32)
    # a zero-size box puts every point on its centre, so the offsets cannot matter
    centres = torch.cat([boxes[..., :2], torch.zeros_like(boxes[..., 2:])], -1)
    with torch.no_grad():
        module.sampling_offsets.bias.normal_()
    moved = module(query, centres, value, shapes, starts)
    with torch.no_grad():
        module.sampling_offsets.bias.zero_()
    torch.testing.assert_close(moved, module(query, centres, value, shapes, starts))


def test_padding_mask_zeroes_padded_values():
    module = make_module()
    query, reference, value, shapes, starts = module_inputs()
    mask = torch.zeros(value.shape[:2], dtype=torch.bool)
    mask[:, 10:20] = True
    noisy = value.clone()
    noisy[:, 10:20] = 1e3
    torch.testing.assert_close(module(query, reference, noisy, shapes, starts, mask),
                               module(query, reference, value, shapes, starts, mask))


def test_under_autocast_the_slot_gets_one_dtype(fake_impl):
    query, reference, value, shapes, starts = module_inputs()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        make_module()(query, reference, value, shapes, starts)
    slot_value, _, slot_locations, slot_weights = fake_impl.calls[0]
    assert slot_value.dtype == slot_locations.dtype == slot_weights.dtype == torch.float32


def test_every_parameter_gets_a_gradient():
    module = make_module().train()
    query, reference, value, shapes, starts = module_inputs()
    module(query, reference, value, shapes, starts).square().sum().backward()
    for name, parameter in module.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


def test_init_spreads_each_head_in_its_own_direction():
    module = MSDeformAttn(d_model=32, n_levels=2, n_heads=8, n_points=2)
    ring = module.sampling_offsets.bias.view(8, 2, 2, 2)
    torch.testing.assert_close(ring[:, :, 1], 2 * ring[:, :, 0])
    assert ring[:, 0, 0].abs().amax(-1).eq(1).all()
    assert len({tuple(d.tolist()) for d in ring[:, 0, 0]}) == 8


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"d_model": 30, "n_heads": 4}, ["d_model (30)", "n_heads (4)"]),
    ({"n_points": 0}, ["n_points", "positive"]),
    ({"n_points": True}, ["n_points", "positive", "True"]),
    ({"n_levels": 2.0}, ["n_levels", "positive", "2.0"]),
])
def test_bad_configuration(kwargs, words):
    with pytest.raises(ValueError) as raised:
        MSDeformAttn(**kwargs)
    for word in words:
        assert word in str(raised.value)


# Bad forward arguments: (id, how the valid (query, reference, value, shapes, starts, mask) are
# broken, exception, words the message must contain). The module: d_model 32, 2 levels; the
# inputs: batch 2, 5 queries, len_in 60.
BAD_FORWARD = [
    ("query_width", lambda q, r, v, s, i, m: (q[..., :16], r, v, s, i, m), ValueError,
     ["query", "d_model=32", "(2, 5, 16)"]),
    ("value_width", lambda q, r, v, s, i, m: (q, r, v[..., :16], s, i, m), ValueError,
     ["value", "d_model=32", "(2, 60, 16)"]),
    ("batch_mismatch", lambda q, r, v, s, i, m: (q, r, v[:1], s, i, m[:1]), ValueError,
     ["value has batch 1", "query has batch 2"]),
    ("query_2d", lambda q, r, v, s, i, m: (q[0], r, v, s, i, m), ValueError,
     ["query", "(batch, length, d_model=32)", "(5, 32)"]),
    ("query_not_a_tensor", lambda q, r, v, s, i, m: (q.tolist(), r, v, s, i, m), TypeError,
     ["query", "torch.Tensor", "list"]),
    ("reference_points_3_wide", lambda q, r, v, s, i, m: (q, r[..., :1].expand(-1, -1, -1, 3),
                                                         v, s, i, m), ValueError,
     ["reference_points", "(2, 5, 2, 2 or 4)", "(2, 5, 2, 3)"]),
    ("reference_points_levels", lambda q, r, v, s, i, m: (q, r[:, :, :1], v, s, i, m), ValueError,
     ["reference_points", "n_levels", "(2, 5, 1, 2)"]),
    ("mask_float", lambda q, r, v, s, i, m: (q, r, v, s, i, m.float()), TypeError,
     ["value_padding_mask", "bool", "torch.float32"]),
    ("mask_shape", lambda q, r, v, s, i, m: (q, r, v, s, i, m[:, :10]), ValueError,
     ["value_padding_mask", "(batch, len_in) = (2, 60)", "(2, 10)"]),
    ("level_count_tensor", lambda q, r, v, s, i, m: (q, r, v, s[:1], i, m), ValueError,
     ["spatial_shapes", "1 levels", "n_levels=2"]),
    ("level_count_pairs", lambda q, r, v, s, i, m: (q, r, v, [*LEVELS, (1, 1)], i, m),
     ValueError, ["spatial_shapes", "3 levels", "n_levels=2"]),
]


@pytest.mark.parametrize(("break_args", "error", "words"),
                         [pytest.param(*row[1:], id=row[0]) for row in BAD_FORWARD])
def test_bad_forward_arguments_raise_an_error_naming_them(break_args, error, words):
    query, reference, value, shapes, starts = module_inputs()
    mask = torch.zeros(value.shape[:2], dtype=torch.bool)
    with pytest.raises(error) as raised:
        make_module()(*break_args(query, reference, value, shapes, starts, mask))
    for word in words:
        assert word in str(raised.value)


def test_the_slot_is_not_consulted_while_tracing(fake_impl, monkeypatch):
    seen = []
    original = can_use_slot

    def probe():
        seen.append(original())
        return seen[-1]

    monkeypatch.setattr(ms_dispatch, "can_use_slot", probe)
    torch.jit.trace(WithStaticShapes().eval(), example_inputs(), check_trace=False)
    assert seen == [False]
    assert fake_impl.calls == []
    assert can_use_slot()


def test_maybe_returns_none_when_nothing_takes_the_input(fake_impl):
    fake_impl.decline = "no"
    inputs = make_inputs(load_cases(sizes=("small",))[0])
    assert maybe_ms_deform_attn(*inputs) is None
    fake_impl.decline = None
    assert maybe_ms_deform_attn(*inputs) is not None

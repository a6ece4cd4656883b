"""Checks of the Triton provider that need TRITON_INTERPRET=1 (run by test_triton_interpreter).

Not collected on its own (no ``test_`` prefix); run directly with
``TRITON_INTERPRET=1 python -m pytest tests/attention/interpreted_checks.py``.
"""

import os

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 before triton kernels are imported",
                allow_module_level=True)

from conformance.ms_deform_attn.cases import (  # noqa: E402
    LOCATIONS,
    Case,
    load_cases,
    make_inputs,
)
from conformance.ms_deform_attn.parity import bounded_check  # noqa: E402
from libreyolo.kernels.attention.ms_deform_attn.portable import (  # noqa: E402
    ms_deform_attn_portable,
)
from libreyolo.kernels.attention.ms_deform_attn.triton_provider import (  # noqa: E402
    accepts,
    environment_ok,
    ms_deform_attn_triton,
)

SMALL_CASES = load_cases(sizes=("small",))


def test_the_environment_check_passes_under_the_interpreter():
    assert environment_ok()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["float32", "float16"])
@pytest.mark.parametrize("case", SMALL_CASES, ids=lambda c: c.name)
def test_forward_and_gradients_are_within_the_bounded_contract(case, dtype):
    inputs = make_inputs(case, dtype=dtype, seed=3)
    for verdict in bounded_check(ms_deform_attn_triton, *inputs):
        assert verdict.passed, f"{case.name} {dtype}: {verdict}"


@st.composite
def layouts(draw):
    """Tiny layouts: 1x1 levels, odd sizes, zero queries, every location kind, strided views."""
    locations = draw(st.sampled_from(LOCATIONS))
    # exact pixel centres need power-of-two sizes (see the shape set); elsewhere a "centre" would
    # sit a rounding away from bilinear's kink, where either side's location gradient is right
    side = st.sampled_from([1, 2, 4, 8]) if locations == "centres" else st.integers(1, 5)
    return Case(name="hypothesis", source="hypothesis", size="small",
                batch=draw(st.integers(1, 3)),
                levels=tuple(draw(st.lists(st.tuples(side, side), min_size=1, max_size=3))),
                heads=draw(st.integers(1, 3)), channels=draw(st.integers(1, 20)),
                points=draw(st.integers(1, 3)), queries=draw(st.integers(0, 9)),
                locations=locations, contiguous=draw(st.booleans()))


@settings(max_examples=12, deadline=None)
@given(case=layouts(), seed=st.integers(0, 2**16))
def test_hypothesis_layouts_are_within_the_bounded_contract(case, seed):
    for verdict in bounded_check(ms_deform_attn_triton, *make_inputs(case, seed=seed)):
        assert verdict.passed, f"{case}: {verdict}"


@pytest.mark.parametrize("case", SMALL_CASES, ids=lambda c: c.name)
def test_returns_the_input_dtype_for_output_and_gradients(case):
    value, shapes, locations, weights = make_inputs(case, dtype=torch.float16)
    leaves = [t.detach().requires_grad_() for t in (value, locations, weights)]
    out = ms_deform_attn_triton(leaves[0], shapes, leaves[1], leaves[2])
    out.float().sum().backward()
    assert out.dtype == torch.float16
    assert [leaf.grad.dtype for leaf in leaves] == [torch.float16] * 3


def test_gradients_only_for_inputs_that_need_them():
    value, shapes, locations, weights = make_inputs(SMALL_CASES[0])
    value.requires_grad_()
    ms_deform_attn_triton(value, shapes, locations, weights).sum().backward()
    assert value.grad is not None and locations.grad is None and weights.grad is None


def test_a_spatial_shapes_overstating_len_in_reads_zeros_past_value():
    """The device path cannot check sum(H*W) == len_in without a host sync, so the kernels
    mask every access at len_in: rows past the end read as zeros, nothing outside is touched."""
    value, shapes, locations, weights = make_inputs(SMALL_CASES[0])
    big = shapes * 2
    missing = int((big[:, 0] * big[:, 1]).sum()) - value.shape[1]
    padded = torch.cat([value, value.new_zeros(value.shape[0], missing, *value.shape[2:])], 1)
    torch.testing.assert_close(ms_deform_attn_triton(value, big, locations, weights),
                               ms_deform_attn_portable(padded, big, locations, weights))


@pytest.mark.parametrize(("change", "reason_words"), [
    (lambda v, s, loc, w: (v.double(), s, loc.double(), w.double()), "dtype"),
    (lambda v, s, loc, w: (v, s.int(), loc, w), "int64"),
    (lambda v, s, loc, w: (v, s.tolist(), loc, w), "tensor"),
    (lambda v, s, loc, w: (v, s, loc.double(), w), "share a dtype"),
    (lambda v, s, loc, w: (v, s, loc[:, :, :1], w), "sampling_locations does not match"),
    (lambda v, s, loc, w: (v, s, loc, w[..., :1]), "attention_weights does not match"),
    (lambda v, s, loc, w: (v.to("meta"), s, loc, w), "meta"),
    (lambda v, s, loc, w: tuple(t if t is s else t[:1].expand(65536, *t.shape[1:])
                                for t in (v, s, loc, w)), "launch grid"),
])
def test_declines_what_it_does_not_take_with_a_reason(change, reason_words):
    inputs = change(*make_inputs(SMALL_CASES[0]))
    reason = accepts(*inputs)
    assert reason is not None and reason_words in reason
    with pytest.raises(ValueError, match="declines"):
        ms_deform_attn_triton(*inputs)


def test_declines_while_a_graph_is_captured():
    inputs = make_inputs(SMALL_CASES[0])
    reasons = []
    torch.jit.trace(lambda v: reasons.append(accepts(v, *inputs[1:])) or v, (inputs[0],))
    assert reasons and "captured" in reasons[0]

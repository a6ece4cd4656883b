"""The common rules of docs/quantization.md, checked for every reference fake-quant op."""

from __future__ import annotations

import pytest
import torch
from quant_helpers import (
    DEVICES,
    FLOAT_DTYPES,
    adversarial,
    assert_same_bits,
    bits,
    canonical_nan,
)

from libreyolo.quant import fake_quant as fq
from libreyolo.quant import quantizers

ROWS, COLS = 6, 40  # 40 = 2 x 16 + 8 = 32 + 8: every block format has a ragged last block


def _scale(value, device):
    return torch.tensor(value, dtype=torch.float32, device=device)


# name -> (op name, params builder taking the device). One entry per op mode.
CASES = {
    "int8_per_channel": (
        "fake_quant_int8_per_channel",
        lambda d: {"scale": torch.linspace(0.005, 0.05, ROWS, device=d)},
    ),
    "int8_per_channel_last_axis": (
        "fake_quant_int8_per_channel",
        lambda d: {"scale": torch.linspace(0.005, 0.05, COLS, device=d), "axis": -1},
    ),
    "int8_affine": (
        "fake_quant_int8_affine",
        lambda d: {"scale": _scale(0.02, d), "zero_point": 5},
    ),
    "fp8_e4m3_tensor": ("fake_quant_fp8", lambda d: {"scale": _scale(0.01, d)}),
    "fp8_e5m2_tensor": ("fake_quant_fp8", lambda d: {"scale": _scale(1e-4, d), "fmt": "e5m2"}),
    "fp8_e4m3_channel": (
        "fake_quant_fp8",
        lambda d: {"scale": torch.linspace(1e-3, 1e-2, ROWS, device=d), "axis": 0},
    ),
    "fp8_e4m3_dynamic": ("fake_quant_fp8", lambda d: {}),
    "fp8_e5m2_dynamic": ("fake_quant_fp8", lambda d: {"fmt": "e5m2"}),
    "int2_grouped": ("fake_quant_int_grouped", lambda d: {"bits": 2, "group_size": 16}),
    "int4_grouped": ("fake_quant_int_grouped", lambda d: {"bits": 4, "group_size": 16}),
    "int8_grouped": ("fake_quant_int_grouped", lambda d: {"bits": 8, "group_size": 7}),
    "nvfp4_weight": ("fake_quant_nvfp4_weight", lambda d: {}),
    "nvfp4_weight_global": ("fake_quant_nvfp4_weight", lambda d: {"global_amax": _scale(3.0, d)}),
    "nvfp4_dynamic": ("fake_quant_nvfp4_dynamic", lambda d: {}),
    "mxfp4_weight": ("fake_quant_mxfp4_weight", lambda d: {}),
    "mxfp4_dynamic": ("fake_quant_mxfp4_dynamic", lambda d: {}),
    "mxfp8_weight": ("fake_quant_mxfp8_weight", lambda d: {}),
    "mxfp8_dynamic": ("fake_quant_mxfp8_dynamic", lambda d: {}),
}
DATA_SCALED = [name for name, (_, params) in CASES.items() if not params("cpu")]


def _run(case, x, **override):
    op_name, params = CASES[case]
    kwargs = params(x.device) | override
    return getattr(fq, op_name), op_name, kwargs


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_output_has_input_dtype_and_shape_and_nan_only_where_input_nan(case, dtype, device):
    x = adversarial((ROWS, COLS), seed=1, dtype=dtype, device=device)
    op, _, kwargs = _run(case, x)
    out = op(x, **kwargs)
    assert out.dtype == dtype and out.shape == x.shape
    assert torch.equal(out.isnan(), x.isnan())
    assert (bits(out)[x.isnan().cpu()] == bits(canonical_nan(dtype))).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", CASES)
def test_low_precision_input_is_computed_in_float32_and_rounded_once(case, dtype):
    x = adversarial((ROWS, COLS), seed=2, dtype=dtype)
    op, _, kwargs = _run(case, x)
    wide = op(x.float(), **kwargs)
    # torch's own float32 -> bfloat16 cast does not keep NaNs canonical (the op does): compare
    # non-NaN bits here; NaN positions and bits are checked by the test above.
    finite = ~x.isnan()
    assert_same_bits(op(x, **kwargs)[finite], wide.to(dtype)[finite])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_gradient_is_upstream_gradient_where_mask_else_positive_zero(case, dtype, device):
    x = adversarial((ROWS, COLS), seed=3, dtype=dtype, device=device).requires_grad_()
    op, op_name, kwargs = _run(case, x)
    g = (torch.randn(x.shape, generator=torch.Generator().manual_seed(4)) * 3 + 0.5).to(dtype)
    op(x, **kwargs).backward(g.to(device))
    mask = fq.ste_mask(op_name, x.detach(), **kwargs)
    assert_same_bits(x.grad, torch.where(mask, g.to(device), 0.0))
    assert not mask[~torch.isfinite(x.detach())].any()


@pytest.mark.parametrize("case", [name for name in CASES if name not in DATA_SCALED])
def test_fake_quantization_with_a_given_scale_is_idempotent(case):
    x = adversarial((ROWS, COLS), seed=5)
    op, _, kwargs = _run(case, x)
    once = op(x, **kwargs)
    assert_same_bits(op(once, **kwargs), once)


@pytest.mark.skipif("cuda" not in DEVICES, reason="needs CUDA to compare with CPU")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("case", CASES)
def test_cuda_reference_gives_the_cpu_reference_bits(case, dtype):
    results = []
    for device in ("cpu", "cuda"):
        x = adversarial((ROWS, COLS), seed=6, dtype=dtype, device=device).requires_grad_()
        op, _, kwargs = _run(case, x)
        g = torch.linspace(-2, 3, x.numel()).reshape(x.shape).to(dtype).to(device)
        out = op(x, **kwargs)
        out.backward(g)
        results.append((out.detach().cpu(), x.grad.cpu()))
    assert_same_bits(results[1][0], results[0][0])
    assert_same_bits(results[1][1], results[0][1])


@pytest.mark.parametrize("case", DATA_SCALED)
@pytest.mark.parametrize("poison", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_element_does_not_change_its_blocks_scale(case, poison):
    x = adversarial((ROWS, COLS), seed=7).nan_to_num(0.0, 0.0, 0.0)
    poisoned = x.clone()
    poisoned[2, 3] = poison
    op, _, kwargs = _run(case, x)
    others = torch.ones_like(x, dtype=torch.bool)
    others[2, 3] = False
    assert_same_bits(op(poisoned, **kwargs)[others], op(x, **kwargs)[others])


@pytest.mark.parametrize("case", DATA_SCALED)
def test_all_zero_input_is_returned_with_float_zero_signs(case):
    x = torch.zeros(ROWS, COLS)
    x[::2] = -0.0
    op, op_name, kwargs = _run(case, x)
    assert_same_bits(op(x, **kwargs), x)
    assert fq.ste_mask(op_name, x, **kwargs).all()


@pytest.mark.parametrize("case", DATA_SCALED)
def test_all_infinite_input_saturates_with_scale_one(case):
    x = torch.full((ROWS, COLS), float("inf"))
    x[::2] = -float("inf")
    op, op_name, kwargs = _run(case, x)
    out = op(x, **kwargs)
    fmax = out.abs().max()
    assert fmax in (1.0, 7.0, 127.0, 6.0, 448.0, 57344.0)
    assert_same_bits(out, torch.sign(x) * fmax)
    assert not fq.ste_mask(op_name, x, **kwargs).any()


@pytest.mark.parametrize("case", CASES)
def test_empty_input_gives_empty_output(case):
    x = torch.zeros(0, COLS) if case.endswith("last_axis") else torch.zeros(ROWS, 0)
    op, _, kwargs = _run(case, x)
    assert op(x, **kwargs).shape == x.shape


@pytest.mark.parametrize(
    "op_name, kwargs, qmax",
    [
        ("fake_quant_int_grouped", {"bits": 4, "group_size": 8}, 7.0),
        ("fake_quant_int_grouped", {"bits": 8, "group_size": 8}, 127.0),
        ("fake_quant_fp8", {"fmt": "e4m3"}, 448.0),
        ("fake_quant_fp8", {"fmt": "e5m2"}, 57344.0),
    ],
)
def test_the_amax_element_of_a_group_or_row_maps_to_the_max_code_unclamped(op_name, kwargs, qmax):
    x = adversarial((64, 8), seed=9).nan_to_num(0.0, 0.0, 0.0)
    quantize = {"fake_quant_int_grouped": quantizers.int_grouped, "fake_quant_fp8": quantizers.fp8}
    result = quantize[op_name](x, **kwargs)
    at_amax = x.abs() == x.abs().amax(dim=1, keepdim=True)
    nonzero = x.abs().amax(dim=1, keepdim=True) > 1e-30
    selected = at_amax & nonzero
    assert_same_bits(result.codes[selected].abs(), torch.full_like(x[selected], qmax))
    assert result.mask[selected].all()


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning", "ignore::DeprecationWarning")
@pytest.mark.parametrize("case", CASES)
def test_reference_traces_and_exports_to_the_same_bits(case):
    """Graph capture keeps the portable math, so the references must trace and export."""
    x = adversarial((ROWS, COLS), seed=8)
    op, _, kwargs = _run(case, x)

    class Quantize(torch.nn.Module):
        def forward(self, t):
            return op(t, **kwargs)

    expected = op(x, **kwargs)
    traced = torch.jit.trace(Quantize(), (x,))
    # an input without a gradient gets plain tensor math, not the autograd function's callback
    assert "prim::PythonOp" not in {node.kind() for node in traced.inlined_graph.nodes()}
    assert_same_bits(traced(x), expected)
    assert_same_bits(torch.export.export(Quantize(), (x,)).module()(x), expected)
    assert_same_bits(op(x.clone().requires_grad_(True), **kwargs).detach(), expected)


@pytest.mark.parametrize("case", CASES)
def test_non_contiguous_input_with_nan_in_its_gaps_gives_the_contiguous_bits(case):
    storage = torch.full((ROWS, 2 * COLS), float("nan"))
    storage[:, ::2] = adversarial((ROWS, COLS), seed=10).nan_to_num(0.0, 0.0, 0.0)
    x = storage[:, ::2]
    op, _, kwargs = _run(case, x)
    assert_same_bits(op(x, **kwargs), op(x.contiguous(), **kwargs))


GIVEN_SCALE_CASES = {
    "int8_per_channel": ("fake_quant_int8_per_channel", lambda z: {"scale": z.expand(ROWS)}),
    "int8_affine": ("fake_quant_int8_affine", lambda z: {"scale": z, "zero_point": 5}),
    "fp8_tensor": ("fake_quant_fp8", lambda z: {"scale": z}),
    "fp8_channel": ("fake_quant_fp8", lambda z: {"scale": z.expand(ROWS), "axis": 0}),
}


@pytest.mark.parametrize("zero", [0.0, -0.0], ids=["+0", "-0"])
@pytest.mark.parametrize("case", GIVEN_SCALE_CASES)
def test_a_zero_scale_gives_positive_zero_nan_only_at_nan_and_no_gradient(case, zero):
    op_name, params = GIVEN_SCALE_CASES[case]
    x = adversarial((ROWS, COLS), seed=7).requires_grad_()
    kwargs = params(torch.tensor(zero))
    out = getattr(fq, op_name)(x, **kwargs)
    out.backward(torch.randn_like(out) + 2.0)
    finite_or_inf = ~x.isnan()
    assert (bits(out)[finite_or_inf] == 0).all()
    assert out.isnan().equal(x.isnan())
    assert (bits(x.grad) == 0).all()

"""Every bad argument gets a TypeError or ValueError that names it and says what was expected."""

from __future__ import annotations

import re

import pytest
import torch

from libreyolo.quant import fake_quant as fq

X = torch.ones(4, 8)
S0 = torch.tensor(0.1)
S4 = torch.full((4,), 0.1)


def _t(*values):
    return torch.tensor(values, dtype=torch.float32)


# (id, op, args, kwargs, exception, message pattern)
BAD = [
    ("x-int", fq.fake_quant_fp8, (torch.ones(4, 8, dtype=torch.int32), S0), {}, TypeError,
     "x must be float32, float16 or bfloat16, got int32"),
    ("x-float64", fq.fake_quant_mxfp4_dynamic, (X.double(),), {}, TypeError,
     "x must be float32, float16 or bfloat16, got float64"),
    ("x-not-tensor", fq.fake_quant_nvfp4_dynamic, ([1.0, 2.0],), {}, TypeError,
     "x must be a torch.Tensor, got list"),
    ("w-int8", fq.fake_quant_int_grouped, (torch.ones(4, 8, dtype=torch.int8), 4, 4), {},
     TypeError, "w must be float32, float16 or bfloat16, got int8"),
    ("per-channel-0d", fq.fake_quant_int8_per_channel, (torch.tensor(1.0), S4), {}, ValueError,
     r"x must have at least 1 dimension\(s\), got shape \(\)"),
    ("per-channel-axis", fq.fake_quant_int8_per_channel, (X, S4, 2), {}, ValueError,
     r"axis must be in \[-2, 1\] for a 2-D tensor, got 2"),
    ("per-channel-axis-type", fq.fake_quant_int8_per_channel, (X, S4, 0.0), {}, TypeError,
     "axis must be an int, got float"),
    ("per-channel-scale-len", fq.fake_quant_int8_per_channel, (X, torch.full((8,), 0.1)), {},
     ValueError, r"scale must have shape \(4,\), got \(8,\)"),
    ("per-channel-scale-dtype", fq.fake_quant_int8_per_channel, (X, S4.half()), {}, TypeError,
     "scale must be float32, got float16"),
    ("per-channel-scale-list", fq.fake_quant_int8_per_channel, (X, [0.1] * 4), {}, TypeError,
     "scale must be a torch.Tensor, got list"),
    ("scale-negative", fq.fake_quant_int8_per_channel, (X, _t(0.1, -0.1, 0.1, 0.1)), {},
     ValueError, r"scale must be finite and non-negative, got -0.1\d* at index \(1,\)"),
    ("scale-nan", fq.fake_quant_int8_affine, (X, _t(float("nan")).reshape(()), 0), {},
     ValueError, r"scale must be finite and non-negative, got nan at index \(\)"),
    ("scale-inf", fq.fake_quant_fp8, (X, _t(float("inf")).reshape(())), {}, ValueError,
     "scale must be finite and non-negative, got inf"),
    ("affine-scale-1d", fq.fake_quant_int8_affine, (X, S4, 0), {}, ValueError,
     r"scale must have shape \(\), got \(4,\)"),
    ("affine-zp-range", fq.fake_quant_int8_affine, (X, S0, 128), {}, ValueError,
     r"zero_point must be in \[-128, 127\], got 128"),
    ("affine-zp-float", fq.fake_quant_int8_affine, (X, S0, 1.0), {}, TypeError,
     "zero_point must be a Python int or a 0-dim integer tensor, got float"),
    ("affine-zp-float-tensor", fq.fake_quant_int8_affine, (X, S0, torch.tensor(1.0)), {},
     TypeError, "zero_point must be a Python int or a 0-dim integer tensor, got a float32"),
    ("affine-zp-tensor-range", fq.fake_quant_int8_affine, (X, S0, torch.tensor(-129)), {},
     ValueError, r"zero_point must be in \[-128, 127\], got -129"),
    ("zero-point-bool-tensor", fq.fake_quant_int8_affine, (X, S0, torch.tensor(True)), {},
     TypeError, "zero_point must be a Python int or a 0-dim integer tensor, got a bool"),
    ("fp8-fmt", fq.fake_quant_fp8, (X, S0), {"fmt": "e3m4"}, ValueError,
     r"fmt must be one of \('e4m3', 'e5m2'\), got 'e3m4'"),
    ("fp8-tensor-scale-with-axis", fq.fake_quant_fp8, (X, S0), {"axis": 0}, ValueError,
     r"scale must have shape \(4,\), got \(\)"),
    ("fp8-channel-scale-no-axis", fq.fake_quant_fp8, (X, S4), {}, ValueError,
     r"scale must have shape \(\), got \(4,\)"),
    ("fp8-dynamic-axis", fq.fake_quant_fp8, (X,), {"axis": 0}, ValueError,
     "axis must be None when scale is None"),
    ("fp8-dynamic-0d", fq.fake_quant_fp8, (torch.tensor(1.0),), {}, ValueError,
     "x must have at least 1 dimension"),
    ("grouped-rank", fq.fake_quant_int_grouped, (torch.ones(2, 4, 8), 4, 4), {}, ValueError,
     r"w must be 2-D, got shape \(2, 4, 8\)"),
    ("grouped-bits", fq.fake_quant_int_grouped, (X, 3, 4), {}, ValueError,
     r"bits must be one of \(2, 4, 8\), got 3"),
    ("grouped-bits-type", fq.fake_quant_int_grouped, (X, True, 4), {}, TypeError,
     "bits must be an int, got bool"),
    ("grouped-size-zero", fq.fake_quant_int_grouped, (X, 4, 0), {}, ValueError,
     "group_size must be a positive int, got 0"),
    ("grouped-size-type", fq.fake_quant_int_grouped, (X, 4, 4.0), {}, TypeError,
     "group_size must be an int, got float"),
    ("nvfp4-rank", fq.fake_quant_nvfp4_weight, (torch.ones(16),), {}, ValueError,
     r"w must be 2-D, got shape \(16,\)"),
    ("nvfp4-global-amax-shape", fq.fake_quant_nvfp4_weight, (X, S4), {}, ValueError,
     r"global_amax must have shape \(\), got \(4,\)"),
    ("nvfp4-global-amax-negative", fq.fake_quant_nvfp4_weight, (X, torch.tensor(-1.0)), {},
     ValueError, "global_amax must be finite and non-negative, got -1.0"),
    ("nvfp4-dynamic-0d", fq.fake_quant_nvfp4_dynamic, (torch.tensor(1.0),), {}, ValueError,
     "x must have at least 1 dimension"),
    ("mxfp4-rank", fq.fake_quant_mxfp4_weight, (torch.ones(2, 2, 32),), {}, ValueError,
     "w must be 2-D"),
    ("mxfp8-rank", fq.fake_quant_mxfp8_weight, (torch.ones(32),), {}, ValueError,
     "w must be 2-D"),
    ("mxfp8-dynamic-int", fq.fake_quant_mxfp8_dynamic, (torch.ones(32, dtype=torch.int64),), {},
     TypeError, "x must be float32, float16 or bfloat16, got int64"),
]


@pytest.mark.parametrize(
    "op, args, kwargs, error, message", [case[1:] for case in BAD], ids=[case[0] for case in BAD]
)
def test_bad_argument_is_rejected_with_a_message_naming_it(op, args, kwargs, error, message):
    with pytest.raises(error, match=message):
        op(*args, **kwargs)


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# A per-channel scale of four values with one bad one, and where the message must point.
BAD_SCALE_VALUES = [
    ((0.1, float("-inf"), 0.1, 0.1), "got -inf at index (1,)"),
    ((0.1, 0.1, 0.1, float("nan")), "got nan at index (3,)"),
    ((float("inf"), 0.1, 0.1, 0.1), "got inf at index (0,)"),
    ((0.1, 0.1, -2.0, 0.1), "got -2.0 at index (2,)"),
    ((float("nan"), -1.0, float("inf"), 0.1), "got nan at index (0,)"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("values, where", BAD_SCALE_VALUES, ids=lambda v: str(v))
def test_a_bad_scale_value_is_found_on_every_device(device, values, where):
    x, scale = X.to(device), torch.tensor(values, device=device)
    message = re.escape(f"scale must be finite and non-negative, {where}")
    with pytest.raises(ValueError, match=message):
        fq.fake_quant_int8_per_channel(x, scale)


@pytest.mark.parametrize("device", DEVICES)
def test_zero_negative_zero_the_largest_float_and_no_channels_are_valid_scales(device):
    scale = torch.tensor([0.0, -0.0, torch.finfo(torch.float32).max, 1e-45], device=device)
    fq.fake_quant_int8_per_channel(X.to(device), scale)
    fq.fake_quant_int8_per_channel(torch.ones(0, 3, device=device), torch.ones(0, device=device))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a second device")
def test_scale_on_another_device_is_rejected():
    with pytest.raises(ValueError, match=re.escape("scale must be on cuda:0 (the input's device)")):
        fq.fake_quant_fp8(X.cuda(), S0)


def test_ste_mask_names_the_known_ops():
    with pytest.raises(ValueError, match="op must be one of .*fake_quant_fp8.*, got 'nope'"):
        fq.ste_mask("nope", X)

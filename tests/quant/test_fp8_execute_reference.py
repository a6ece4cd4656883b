"""The FP8 execute references (libreyolo/quant/fp8_execute.py) against literal values from the
OCP OFP8 spec (rev 1.0, table 1: E4M3 bias 7, max 448, S.1111.111 NaN, subnormals m * 2^-9) and
the epilogue's stated float32 operation order."""

import pytest
import torch

from libreyolo.quant import fp8_execute as ref
from libreyolo.quant.packing import pack_fp8

NAN, INF = float("nan"), float("inf")


def e4m3_bytes(codes: torch.Tensor) -> list[int]:
    return codes.view(torch.uint8).tolist()


@pytest.mark.parametrize("value, byte", [
    (1.0, 0x38), (448.0, 0x7E), (1000.0, 0x7E), (-1000.0, 0xFE), (-0.0, 0x80), (0.0, 0x00),
    (2.0**-9, 0x01), (2.0**-10, 0x00), (3 * 2.0**-10, 0x02), (1.0625, 0x38), (1.1875, 0x3A),
    (INF, 0x7E), (-INF, 0xFE), (NAN, 0x7F), (-NAN, 0x7F),
], ids=["one", "max", "saturates", "saturates-negative", "negative-zero", "zero", "min-subnormal",
        "tie-to-zero", "tie-to-even-subnormal", "tie-down-to-even", "tie-up-to-even", "inf",
        "minus-inf", "nan", "minus-nan"])
def test_static_cast_codes_are_the_ocp_e4m3_bytes(value, byte):
    x = torch.tensor([[value]], dtype=torch.float32)
    assert e4m3_bytes(ref.fp8_cast_static(x, torch.tensor(1.0))) == [[byte]]


def test_a_zero_scale_gives_positive_zero_codes_even_for_nan():
    x = torch.tensor([[1.0, -2.0, NAN]])
    assert e4m3_bytes(ref.fp8_cast_static(x, torch.tensor(0.0))) == [[0, 0, 0]]


def test_the_casts_store_the_codes_pack_fp8_stores():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn((3, 5, 70), generator=gen) * 40
    scale = torch.tensor(0.125)
    assert torch.equal(ref.fp8_cast_static(x, scale).view(torch.uint8),
                       pack_fp8(x, scale).codes.view(torch.uint8))
    codes, scales = ref.fp8_cast_dynamic(x)
    packed = pack_fp8(x)
    assert torch.equal(codes.view(torch.uint8), packed.codes.view(torch.uint8))
    assert torch.equal(scales, packed.scale) and scales.shape == (3, 5, 1)


def test_dynamic_scale_is_the_finite_row_amax_over_448_and_one_for_a_zero_row():
    x = torch.tensor([[896.0, -1.0, INF, NAN], [0.0, -0.0, 0.0, 0.0]])
    codes, scales = ref.fp8_cast_dynamic(x)
    assert scales.tolist() == [[2.0], [1.0]]
    assert e4m3_bytes(codes)[0] == [0x7E, 0xB0, 0x7E, 0x7F]  # -0.5 is 0xB0


def test_the_epilogue_multiplies_row_then_column_scale_then_adds_the_bias():
    """Values where the other product order, and a fused multiply-add (one rounding of the
    product and the sum), each give another float32."""
    acc = torch.tensor([[float.fromhex("0x1.e59c78p+0")]])
    row = torch.tensor([[float.fromhex("0x1.73a4b4p-2")]])
    col = torch.tensor([float.fromhex("0x1.ef5f6ep-1")])
    bias = torch.tensor([float.fromhex("0x1.859304p-2")])
    stated = ((acc * row) * col) + bias
    other = (acc * (row * col)) + bias
    fused = ((acc * row).double() * col.double() + bias.double()).float()
    assert not torch.equal(stated, other) and not torch.equal(stated, fused)
    out = ref.fp8_perchannel_epilogue(acc, row, col, bias, None, torch.float32)
    assert torch.equal(out, stated)


def test_the_epilogue_relu_keeps_nan_and_negative_zero_and_writes_canonical_nan():
    acc = torch.tensor([[-3.0, NAN, -0.0, 5.0]])
    out = ref.fp8_perchannel_epilogue(acc, torch.ones((1, 1)), torch.ones(4), None, "relu",
                                      torch.bfloat16)
    assert out.view(torch.int16).tolist() == [[0x0000, 0x7FC0, -0x8000, 0x40A0]]


@pytest.mark.parametrize("bad, error, name", [
    ({"a": torch.zeros((2, 16))}, TypeError, "a"),
    ({"scale_a": torch.ones(2)}, ValueError, "scale_a"),
    ({"bias": torch.zeros(3)}, TypeError, "bias"),
    ({"out_dtype": torch.int32}, TypeError, "out_dtype"),
], ids=["float32-a", "1-d-scale-a", "float32-bias", "int32-out"])
def test_the_gemm_judge_names_the_bad_argument(bad, error, name):
    args = {"a": torch.zeros((2, 16), dtype=torch.float8_e4m3fn),
            "b": torch.zeros((3, 16), dtype=torch.float8_e4m3fn),
            "scale_a": torch.ones((2, 1)), "scale_b": torch.ones(3), "bias": None,
            "out_dtype": torch.bfloat16}
    with pytest.raises(error, match=name):
        ref.check_fp8_gemm(**{**args, **bad})

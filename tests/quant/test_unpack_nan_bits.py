"""The unpack references' NaN bits are stated, not inherited: the rules of
``libreyolo.quant.nan_bits`` describe what float32 arithmetic on the CPU gives (so the references'
CPU bits are those of docs/checkpoint_format.md, "Unpacked bits"), and a CUDA reference gives the
CPU reference's bits for every NaN a checkpoint's bytes can hold: E4M3 NaN codes, NaN and
infinite scales with any payload, in every output dtype."""

import pytest
import torch
from quant_helpers import assert_same_bits

from libreyolo.quant import nan_bits, packing

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _nan_patterns() -> torch.Tensor:
    """Float32 NaNs of both signs, quiet and signalling, with payloads in every bit position,
    beside infinities, zeros and finite values."""
    payloads = [1 << i for i in range(23)] + [0x7FFFFF, 0x400000, 0x400001, 0x12345, 0x3FFFFF]
    words = [0x7F800000 | p for p in payloads] + [0xFF800000 | p for p in payloads]
    words += [0x7F800000, 0xFF800000, 0, 0x80000000, 0x3F800000, 0xC0400000, 0x00000001]
    return torch.tensor([w - (1 << 32) if w >= 1 << 31 else w for w in words],
                        dtype=torch.int32).view(torch.float32)


def _hex(t: torch.Tensor) -> list[str]:
    width = t.element_size() * 8
    ints = t.view({32: torch.int32, 16: torch.int16}[width]).tolist()
    return [f"0x{v & ((1 << width) - 1):0{width // 4}x}" for v in ints]


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_rules_are_what_cpu_arithmetic_gives(dtype):
    values = _nan_patterns()
    a, b = values.repeat_interleave(len(values)), values.repeat(len(values))
    product = nan_bits.product(a, b)
    assert _hex(product) == _hex(a * b)
    assert _hex(nan_bits.convert(product, dtype)) == _hex((a * b).to(dtype))


def test_the_documented_examples():
    """docs/checkpoint_format.md, "Unpacked bits": E4M3 NaN codes widen to 0x7FF00000 and
    0xFFF00000, 0 * inf is 0xFFC00000, float16 keeps the top 9 payload bits, bfloat16 NaN is
    0xFFFF."""
    codes = torch.tensor([0x7F, 0xFF], dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    assert _hex(nan_bits.product(codes, torch.ones(2))) == ["0x7ff00000", "0xfff00000"]
    zero_inf = nan_bits.product(torch.zeros(1), torch.full((1,), float("inf")))
    assert _hex(zero_inf) == ["0xffc00000"]
    assert _hex(nan_bits.convert(codes, torch.float16)) == ["0x7f80", "0xff80"]
    assert _hex(nan_bits.convert(codes, torch.bfloat16)) == ["0xffff", "0xffff"]


def _every_byte(rows: int, cols: int, seed: int) -> torch.Tensor:
    """Codes holding every byte value (both E4M3 NaN codes and -0.0 among them)."""
    gen = torch.Generator().manual_seed(seed)
    flat = torch.cat([torch.arange(256), torch.randint(0, 256, (rows * cols,), generator=gen)])
    return flat[:rows * cols].to(torch.uint8).reshape(rows, cols)


def _nan_scales(shape: tuple, seed: int) -> torch.Tensor:
    """Float32 scales with NaNs of many payloads, infinities, zeros and ordinary values."""
    gen = torch.Generator().manual_seed(seed)
    specials = _nan_patterns()
    picks = torch.randint(0, len(specials) * 2, shape, generator=gen)
    ordinary = torch.rand(shape, generator=gen) * 4
    return torch.where(picks < len(specials), specials[picks.clamp(max=len(specials) - 1)],
                       ordinary)


def _bytes(values: list[int], shape: tuple) -> torch.Tensor:
    """``shape`` bytes cycling through ``values`` (scale codes that hold the edges)."""
    n = shape[0] * shape[1]
    return torch.tensor((values * (n // len(values) + 1))[:n], dtype=torch.uint8).reshape(shape)


def _calls(device: str):
    """One call of each unpack reference with NaN or infinity sources in its inputs (E4M3 NaN
    codes, NaN and infinite scales; MXFP4 has no NaN: its E8M0 code 254 overflows to inf)."""
    rows, cols = 8, 70
    codes = _every_byte(rows, (cols + 1) // 2, 1).to(device)
    e4m3_scales = _bytes([0x7F, 0x38, 0xFF, 0x00, 0x40, 0x80], (rows, -(-cols // 16))).view(
        torch.float8_e4m3fn).to(device)
    yield "int_grouped", lambda dtype: packing.unpack_int_grouped(
        codes, _nan_scales((rows, -(-cols // 16)), 3).to(device), 4, 16, cols, dtype)
    yield "nvfp4", lambda dtype: packing.unpack_nvfp4(
        codes, e4m3_scales, _nan_scales((), 4).to(device), cols, dtype)
    yield "nvfp4-nan-tensor-scale", lambda dtype: packing.unpack_nvfp4(
        codes, e4m3_scales, torch.tensor(float("nan")).to(device), cols, dtype)
    yield "mxfp4", lambda dtype: packing.unpack_mxfp4(
        codes, _bytes([254, 127, 0, 200, 255], (rows, -(-cols // 32))).to(device), cols, dtype)
    yield "mxfp8", lambda dtype: packing.unpack_mxfp8(
        _every_byte(rows, cols, 6).view(torch.float8_e4m3fn).to(device),
        _every_byte(rows, -(-cols // 32), 7).to(device), dtype)
    yield "fp8-per-channel", lambda dtype: packing.unpack_fp8(
        _every_byte(rows, cols, 8).view(torch.float8_e4m3fn).to(device),
        _nan_scales((cols,), 9).to(device), axis=1, dtype=dtype)


@pytest.mark.skipif("cuda" not in DEVICES, reason="needs CUDA to compare with CPU")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", [name for name, _ in _calls("cpu")])
def test_cuda_unpack_references_give_the_cpu_bits(name, dtype):
    cpu = dict(_calls("cpu"))[name](dtype)
    cuda = dict(_calls("cuda"))[name](dtype)
    assert (~torch.isfinite(cpu.float())).any(), "the inputs must hold NaN or inf sources"
    assert_same_bits(cuda.cpu(), cpu)


@pytest.mark.parametrize("name", [name for name, _ in _calls("cpu")])
def test_each_call_holds_a_non_finite_source(name):
    """What the CUDA comparison needs to mean anything (checked here, without a GPU)."""
    out = dict(_calls("cpu"))[name](torch.float32)
    assert (~torch.isfinite(out)).any()
    if name != "mxfp4":
        assert torch.isnan(out).any()

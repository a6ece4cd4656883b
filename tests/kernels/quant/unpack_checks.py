"""The Triton unpack kernel equals the reference unpack bit for bit on every code against every
scale code, and on float32 scales a checkpoint could hold but no packer writes (NaN payloads,
±inf, ±0, subnormals, negative), in every output dtype. The reference runs on the CPU.

It runs where the kernel runs: under ``TRITON_INTERPRET=1`` on CPU tensors (CI runs it in a child
process: ``test_triton_unpack_interpreter.py``) or compiled on a CUDA device:

    TRITON_INTERPRET=1 .venv/bin/python -m pytest tests/kernels/quant/unpack_checks.py
    .venv/bin/python -m pytest tests/kernels/quant/unpack_checks.py     # on a CUDA machine
"""

from __future__ import annotations

import pytest
import torch
from quant_check_device import DEVICE, INTERPRETING, MARKS

pytestmark = MARKS

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from unpack_inputs import (  # noqa: E402
    DTYPES,
    SLOTS,
    int_grouped_tables,
    mx_table,
    nvfp4_tables,
)

from conformance.golden import regenerate  # noqa: E402
from conformance.inputs.layouts import bits  # noqa: E402
from libreyolo.kernels import registered  # noqa: E402
from libreyolo.kernels.prepared import Prepared  # noqa: E402
from libreyolo.kernels.quant.execute import unpack_kernels, unpack_plan, unpack_tiles  # noqa: E402
from libreyolo.kernels.quant.execute.unpack_plan import UnpackPlan  # noqa: E402
from libreyolo.quant import packing as reference  # noqa: E402


def _triton(slot: str):
    (impl,) = [i for i in registered(slot) if i.name == "triton"]
    return impl


def _on_device(args: tuple) -> tuple:
    return tuple(a.to(DEVICE) if isinstance(a, torch.Tensor) else a for a in args)


def assert_same_bits(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.dtype)
    differ = bits(got) != bits(want)
    if differ.any():
        where = tuple(int(i) for i in differ.nonzero()[0])
        pytest.fail(f"{int(differ.sum())} elements differ, first at {where}: got bits "
                    f"{int(bits(got)[where]):#x}, reference {int(bits(want)[where]):#x}")


def _check(slot: str, args: tuple, dtype: torch.dtype) -> None:
    want = getattr(reference, slot)(*args, dtype=dtype)
    got = _triton(slot).fn(*_on_device(args), dtype=dtype)
    assert got.is_contiguous() and 0 not in got.stride()[got.dim() - 1:], got.stride()
    assert_same_bits(got.cpu(), want)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("slot", ["unpack_mxfp4", "unpack_mxfp8"])
def test_every_code_times_every_e8m0_scale(slot, dtype):
    _check(slot, mx_table(slot), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_code_times_every_e4m3_block_scale_times_hostile_tensor_scales(dtype):
    for args in nvfp4_tables():
        _check("unpack_nvfp4", args, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_every_int_field_times_hostile_float32_scales(dtype):
    for args in int_grouped_tables():
        _check("unpack_int_grouped", args, dtype)


GOLDEN_UNPACKS = [case for case in regenerate.load_cases()
                  if f"un{case.get('pack')}" in SLOTS]


@pytest.mark.parametrize("case", GOLDEN_UNPACKS, ids=[case["name"] for case in GOLDEN_UNPACKS])
def test_the_golden_packed_bytes_unpack_to_the_golden_floats(case):
    golden = load_file(str(regenerate.GOLDEN_FILE))
    slot, prefix = f"un{case['pack']}", f"{case['name']}.packed."
    fields = {k.removeprefix(prefix): v for k, v in golden.items() if k.startswith(prefix)}
    params = {name: case["params"][name] for name in ("bits", "group_size") if name in
              case["params"]}
    in_features = {"in_features": case["shape"][-1]} if slot != "unpack_mxfp8" else {}
    want = golden[f"{case['name']}.unpacked"]
    got = _triton(slot).fn(**{k: v.to(DEVICE) for k, v in fields.items()}, **params,
                           **in_features, dtype=want.dtype)
    assert_same_bits(got.cpu(), want)


@triton.jit
def _convert_pairs(high_ptr, low_ptr, pair_ptr, fixed_ptr, n, HARDWARE_BF16: tl.constexpr,
                   BLOCK: tl.constexpr):
    """The kernel's bfloat16 pair conversion alone: ``_bf16x2`` and ``_bf16_nan`` on float32s."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    valid = i < n
    pair = unpack_kernels._bf16x2(tl.load(high_ptr + i, mask=valid, other=0.0),
                                  tl.load(low_ptr + i, mask=valid, other=0.0), HARDWARE_BF16)
    tl.store(pair_ptr + i, pair, mask=valid)
    tl.store(fixed_ptr + i, unpack_kernels._bf16_nan(pair), mask=valid)


def _cvt_rn_bf16(bits: torch.Tensor) -> torch.Tensor:
    """What PTX ``cvt.rn.bf16x2.f32`` writes for one float32 (int64 bits 0..2^32-1): round to
    nearest even at bit 16, subnormals kept, overflow to infinity, NaN as the canonical 0x7FFF."""
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 & 0xFFFF
    return torch.where((bits & 0x7FFFFFFF) > 0x7F800000, 0x7FFF, rounded)


def test_bfloat16_pairs_convert_as_cvt_rn_bf16x2_f32_and_the_fix_writes_the_reference_nan():
    """Every float32 upper half with low halves at the rounding edges (0, 1, a tie, past a tie,
    all ones): NaN of every sign and payload, infinities, subnormals, ties, overflow. The pair
    the kernel converts (the instruction compiled, its emulation interpreted) equals the
    instruction's documented rounding with NaN as 0x7FFF (on the GPU this pins the hardware's
    NaN, which the PTX ISA leaves unstated), and after ``_bf16_nan`` equals torch's CPU
    conversion, the reference's (NaN as 0xFFFF)."""
    upper = torch.arange(1 << 16, dtype=torch.int64)[:, None] << 16
    low = torch.tensor([0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xFFFF], dtype=torch.int64)
    high_bits = (upper | low).flatten()
    low_bits = high_bits.roll(12345)  # every value meets others, NaN beside non-NaN included
    as_float = [b.to(torch.int32).view(torch.float32) for b in (high_bits, low_bits)]
    n, block = high_bits.numel(), 65536 if INTERPRETING else 1024  # few interpreted programs
    pair, fixed = (torch.empty(n, dtype=torch.int32, device=DEVICE) for _ in range(2))
    _convert_pairs[(triton.cdiv(n, block),)](*(x.to(DEVICE) for x in as_float), pair, fixed, n,
                                             HARDWARE_BF16=not INTERPRETING, BLOCK=block)
    want_pair = ((_cvt_rn_bf16(high_bits) << 16) | _cvt_rn_bf16(low_bits)).to(torch.int32)
    want_fixed = torch.stack([x.to(torch.bfloat16).view(torch.int16) for x in as_float[::-1]],
                             dim=1).view(torch.int32).flatten()  # [low, high]: little-endian
    for got, want, what in ((pair.cpu(), want_pair, "conversion"),
                            (fixed.cpu(), want_fixed, "fixed NaN")):
        differ = got != want
        if differ.any():
            i = int(differ.nonzero()[0])
            pytest.fail(f"{what}: {int(differ.sum())} pairs differ, first of float32 "
                        f"{int(high_bits[i]):#010x}, {int(low_bits[i]):#010x}: got "
                        f"{int(got[i]) & 0xFFFFFFFF:#010x}, want {int(want[i]) & 0xFFFFFFFF:#010x}")


@triton.jit
def _nan_left_as_converted(pair):
    """Broken on purpose: the conversion's NaN (0x7FFF) kept, not the reference's 0xFFFF."""
    return pair


@pytest.mark.skipif(not INTERPRETING, reason="a patched helper is not recompiled: the compiled "
                    "kernel keeps the hash of the helpers it was first compiled with")
@pytest.mark.parametrize("slot", ["unpack_nvfp4", "unpack_int_grouped"])
def test_bfloat16_nan_left_as_the_conversion_writes_it_is_caught(slot, monkeypatch):
    """Negative control: without ``_bf16_nan`` the NaN outputs are 0x7FFF, and the bfloat16
    checks above fail (the conversion's NaN equals no reference bits)."""
    tables = nvfp4_tables() if slot == "unpack_nvfp4" else int_grouped_tables()
    _check(slot, tables[0], torch.bfloat16)  # tensor scale / scales NaN: every output NaN
    monkeypatch.setattr(unpack_kernels, "_bf16_nan", _nan_left_as_converted)
    with pytest.raises(pytest.fail.Exception, match="elements differ.*got bits 0x7fff"):
        _check(slot, tables[0], torch.bfloat16)


def test_e4m3_nan_codes_keep_sign_and_payload_as_the_cpu_reference_writes_them():
    """Pinned bits (x86 torch): 0x7F / 0xFF widen to 0x7FF00000 / 0xFFF00000 and stay so times a
    scale; float16 keeps sign, quiet bit and payload top (0x7F80 / 0xFF80); bfloat16 is 0xFFFF."""
    codes = torch.tensor([[0x7F, 0xFF, 0x80, 0x00]], dtype=torch.uint8)
    args = (codes.view(torch.float8_e4m3fn), torch.tensor([[130]], dtype=torch.uint8))
    expected = {torch.float32: [0x7FF00000, -0x100000, -0x80000000, 0],
                torch.float16: [0x7F80, -0x80, -0x8000, 0], torch.bfloat16: [-1, -1, -0x8000, 0]}
    for dtype, want in expected.items():
        got = _triton("unpack_mxfp8").fn(*_on_device(args), dtype=dtype).cpu()
        ints = got.view(torch.int32 if dtype == torch.float32 else torch.int16)
        assert ints[0].tolist() == want, dtype
        assert_same_bits(got, reference.unpack_mxfp8(*args, dtype=dtype))


@pytest.mark.parametrize("slot", SLOTS)
def test_accepts_hands_its_plan_to_the_call_which_then_checks_nothing_again(slot, monkeypatch):
    """The prepared-input protocol: ``accepts`` returns the plan it made (a ``Prepared``), and
    the call given it runs no argument check again. A direct call plans for itself: arguments
    of a description (shapes, dtypes, ...) not planned before are checked."""
    args = {"unpack_int_grouped": int_grouped_tables()[1], "unpack_nvfp4": nvfp4_tables()[16],
            "unpack_mxfp4": mx_table("unpack_mxfp4"), "unpack_mxfp8": mx_table("unpack_mxfp8")}
    want = getattr(reference, slot)(*args[slot])
    impl, device_args = _triton(slot), _on_device(args[slot])
    plan = impl.accepts(*device_args)
    assert isinstance(plan, UnpackPlan) and isinstance(plan, Prepared)

    def checked_again(*_, **__):
        raise AssertionError("the call checked its arguments again")

    for name in [n for n in dir(reference) if n.startswith("check_unpack_")]:
        monkeypatch.setattr(reference, name, checked_again)
    assert_same_bits(impl.fn(*device_args, prepared=plan).cpu(), want)
    one_row_less = tuple(a[:-1] if isinstance(a, torch.Tensor) and a.dim() == 2 else a
                         for a in device_args)
    with pytest.raises(AssertionError, match="checked its arguments again"):
        impl.fn(*one_row_less)  # a new description: the direct call checks it


gpu_only = pytest.mark.skipif(INTERPRETING, reason="CUDA behaviour: the compiled kernel")


@gpu_only
@pytest.mark.parametrize("slot", SLOTS)
def test_a_call_never_synchronizes_with_the_device(slot):
    """Safe inside CUDA-graph capture and free of host stalls: after a warm-up (compilation),
    checking, planning and launching read no device data."""
    args = _on_device({"unpack_int_grouped": int_grouped_tables()[1],
                       "unpack_nvfp4": nvfp4_tables()[16], "unpack_mxfp4": mx_table("unpack_mxfp4"),
                       "unpack_mxfp8": mx_table("unpack_mxfp8")}[slot])
    impl = _triton(slot)
    impl.fn(*args)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        impl.fn(*args, prepared=impl.accepts(*args))
        impl.fn(*args)
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.fixture
def bf16_rounding(monkeypatch):
    """Sets ``unpack_plan.BF16_ROUNDING`` for one test; kept plans are dropped on the way in
    and out (the switch is read when a description is planned)."""

    def use(rounding: str) -> None:
        monkeypatch.setattr(unpack_plan, "BF16_ROUNDING", rounding)
        unpack_plan._CACHE.clear()

    yield use
    unpack_plan._CACHE.clear()


@gpu_only
@pytest.mark.parametrize("rounding", unpack_plan.BF16_ROUNDINGS)
def test_both_compiled_bfloat16_roundings_give_the_reference_bits(rounding, bf16_rounding):
    """The hardware conversion is what ships (its plans say so); the integer emulation, which
    ``bench_unpack.py --bf16-rounding integer`` times, is exact compiled as well: every table
    above, to bfloat16."""
    bf16_rounding(rounding)
    tables = [(slot, mx_table(slot)) for slot in ("unpack_mxfp4", "unpack_mxfp8")]
    tables += [("unpack_nvfp4", args) for args in nvfp4_tables()]
    tables += [("unpack_int_grouped", args) for args in int_grouped_tables()]
    for slot, args in tables:
        plan = _triton(slot).accepts(*_on_device(args), dtype=torch.bfloat16)
        assert plan.work.kernel_args[-1] is (rounding == "hardware"), plan.work.kernel_args
        _check(slot, args, torch.bfloat16)


@gpu_only
def test_outputs_past_two_to_the_31_elements_are_addressed_in_64_bits():
    """2^31 + 3 * 4096 outputs: the last rows, past int32 offsets, equal the reference's."""
    rows, cols = 2**31 // 4096 + 3, 4096
    gen = torch.Generator(device="cuda").manual_seed(0)
    codes = torch.randint(0, 256, (rows, cols), device="cuda", dtype=torch.uint8, generator=gen)
    scale = torch.randint(100, 150, (rows, cols // 32), device="cuda", dtype=torch.uint8,
                          generator=gen)
    out = _triton("unpack_mxfp8").fn(codes.view(torch.float8_e4m3fn), scale,
                                      dtype=torch.bfloat16)
    tail = slice(rows - 5, rows)
    want = reference.unpack_mxfp8(codes[tail].cpu().view(torch.float8_e4m3fn), scale[tail].cpu(),
                                  dtype=torch.bfloat16)
    assert_same_bits(out[tail].cpu(), want)


@pytest.fixture
def tile_rows(monkeypatch):
    """Sets ``unpack_tiles.TILES`` for one test; plans kept under other rows are dropped on the
    way in and out (a plan's key is its arguments' description, not the rows)."""

    def use(rows: dict) -> None:
        monkeypatch.setattr(unpack_tiles, "TILES", rows)
        unpack_plan._CACHE.clear()

    yield use
    unpack_plan._CACHE.clear()


#: An input of each format of unpack_tiles.toml: (slot, arguments).
TABLE_INPUTS = {f"int{b}": lambda b=b: ("unpack_int_grouped", next(
    t for t in int_grouped_tables() if t[2] == b)) for b in (2, 4, 8)}
TABLE_INPUTS |= {"nvfp4": lambda: ("unpack_nvfp4", nvfp4_tables()[16]),
                 "mxfp4": lambda: ("unpack_mxfp4", mx_table("unpack_mxfp4")),
                 "mxfp8": lambda: ("unpack_mxfp8", mx_table("unpack_mxfp8"))}


def test_every_row_of_the_tiles_file_is_taken_by_its_format_and_dtype(tile_rows):
    """Each row of the shipped file, given a configuration no other row has, is the one the
    plan of its format and dtype carries, and the kernel run under it equals the reference."""
    shipped = unpack_tiles.TILES
    configs = [unpack_tiles.TileConfig(4096 << (i % 5), unpack_tiles.WARP_COUNTS[i // 5 % 5])
               for i in range(len(shipped))]
    assert len(set(configs)) == len(shipped)
    tile_rows(dict(zip(shipped, configs, strict=True)))
    taken = set()
    for (fmt, dtype_name), config in unpack_tiles.TILES.items():
        slot, args = TABLE_INPUTS[fmt]()
        dtype = getattr(torch, dtype_name)
        plan = _triton(slot).accepts(*_on_device(args), dtype=dtype)
        assert plan.work.config is config, (fmt, dtype_name, plan.work.config, config)
        assert_same_bits(_triton(slot).fn(*_on_device(args), dtype=dtype, prepared=plan).cpu(),
                         getattr(reference, slot)(*args, dtype=dtype))
        taken.add((fmt, dtype_name))
    assert taken == set(shipped)

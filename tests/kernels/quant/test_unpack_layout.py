"""The unpack kernel's stores are coalesced: compiled for an H200 (sm_90) on the CPU, without a
GPU, warp 0's first 16-byte stores cover one contiguous 512-byte span, and no tile goes through
shared memory; each at its ``unpack_tiles.toml`` row's warps. Its bfloat16 outputs are rounded by
``cvt.rn.bf16x2.f32`` where the plan says so (a silent fallback to the integer emulation would
pass every bit check and only cost time).

Why a test: Triton gives a store the thread layout its pointers' contiguity suggests and orders
dimensions of equal contiguity by their index. A tile laid out [rows, groups, vectors, vector]
had a warp's 32 lanes write 16 bytes each across 17-26 KB (rows and groups apart), which ran at
16-42% of a device copy on the H200 (benchmarks/NOTES.md, "bench_unpack.py v2"). The
benchmark's formats are checked at its 4096x4096 size.
"""

from __future__ import annotations

import re

import pytest
import torch

triton = pytest.importorskip("triton")

from triton.backends import backends  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from libreyolo.kernels.quant.execute import unpack_plan  # noqa: E402
from libreyolo.kernels.quant.execute.unpack_kernels import unpack_kernel  # noqa: E402
from libreyolo.kernels.quant.execute.unpack_plan import PLANNERS  # noqa: E402
from libreyolo.kernels.settings import interpreting  # noqa: E402
from libreyolo.quant import packing  # noqa: E402

# (slot, pack arguments after the weight): the formats of benchmarks/bench/bench_unpack.py
FORMATS = [("unpack_int_grouped", (4, 128)), ("unpack_int_grouped", (8, 128)),
           ("unpack_nvfp4", ()), ("unpack_mxfp4", ()), ("unpack_mxfp8", ())]
POINTER_TYPES = {torch.uint8: "*u8", torch.float32: "*fp32", torch.float16: "*fp16",
                 torch.bfloat16: "*bf16", torch.float8_e4m3fn: "*fp8e4nv"}
H200 = GPUTarget("cuda", 90, 32)
pytestmark = [
    pytest.mark.skipif("nvidia" not in backends, reason="triton without its CUDA backend"),
    pytest.mark.skipif(interpreting(), reason="under TRITON_INTERPRET=1 nothing is compiled"),
]


def _compiled(plan):
    """The kernel compiled for this plan as the launcher specializes it (16-byte aligned
    pointers, sizes divisible by 16 marked so, strides of 1 constant)."""
    work = plan.work
    tensor_scale = plan.tensor_scale if plan.tensor_scale is not None else plan.scale
    pointers = [plan.codes.dtype, plan.scale.dtype, tensor_scale.dtype, work.dtype]
    values = [*pointers, *work.kernel_args]
    signature, constexprs, attrs = {}, {}, {}
    for i, (name, value) in enumerate(zip(unpack_kernel.arg_names, values, strict=True)):
        if i in unpack_kernel.constexprs or (i >= 4 and value == 1):
            signature[name], constexprs[name] = "constexpr", value
        else:
            signature[name] = POINTER_TYPES[value] if i < 4 else "i32"
            if i < 4 or value % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    source = ASTSource(fn=unpack_kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    options = {"num_warps": work.config.num_warps, "enable_fp_fusion": False}
    return triton.compile(source, target=H200, options=options)


def _ttgir(plan) -> str:
    return _compiled(plan).asm["ttgir"]


def _store_layout(ttgir: str) -> tuple[list[int], ...]:
    """sizePerThread, threadsPerWarp, order and shape of the (one) store's pointer tile."""
    (store,) = [line for line in ttgir.splitlines() if "tt.store" in line]
    alias = re.search(r"(#blocked\d*)>", store).group(1)
    layout = re.search(rf"^{alias} = #ttg\.blocked<\{{(.*)\}}>", ttgir, re.M).group(1)

    def field(name):
        return [int(x) for x in re.search(rf"{name} = \[([^\]]*)\]", layout).group(1).split(",")]

    shape = [int(x) for x in re.search(r"tensor<([0-9x]+)x!tt\.ptr", store).group(1).split("x")]
    return field("sizePerThread"), field("threadsPerWarp"), field("order"), shape


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("slot, pack_args", FORMATS, ids=[f"{s}{a}" for s, a in FORMATS])
def test_a_warps_first_stores_cover_one_contiguous_512_byte_span(slot, pack_args, dtype):
    pack = getattr(packing, slot.replace("unpack_", "pack_"))
    plan = PLANNERS[slot](*pack(torch.zeros(4096, 4096), *pack_args), dtype=dtype)
    tiling = plan.work.tiling
    ttgir = _ttgir(plan)
    assert "ttg.local_alloc" not in ttgir, "a tile goes through shared memory"
    per_thread, lanes, order, shape = _store_layout(ttgir)
    word_bytes = tiling.fields * (4 if dtype == torch.float32 else 2)
    starts = []
    for lane in range(32):
        coordinate, rest = [0] * 4, lane
        for dim in order:
            coordinate[dim] = rest % lanes[dim] * per_thread[dim] % shape[dim]
            rest //= lanes[dim]
        vector, group, row, word = coordinate  # the kernel's [vectors, groups, rows, vector]
        offset = row * tiling.words + group * tiling.group_words + vector * tiling.vector + word
        starts.append(offset * word_bytes)
    chunk = per_thread[3] * word_bytes
    assert chunk == 16, (per_thread, word_bytes)
    assert sorted(starts) == list(range(min(starts), min(starts) + 32 * chunk, chunk)), starts


@pytest.fixture
def bf16_rounding(monkeypatch):
    """Sets ``unpack_plan.BF16_ROUNDING`` for one test; kept plans are dropped on the way in and
    out (the switch is read when a description is planned)."""

    def use(rounding: str) -> None:
        monkeypatch.setattr(unpack_plan, "BF16_ROUNDING", rounding)
        unpack_plan._CACHE.clear()

    yield use
    unpack_plan._CACHE.clear()


# (slot, pack arguments, conversions per output word): MXFP4 truncates (exact), MXFP8 and int8
# convert one output per word, the 4-bit formats two per 32-bit word, int2 four per 64-bit word
BF16_FORMATS = [("unpack_nvfp4", (), 1), ("unpack_int_grouped", (4, 128), 1),
                ("unpack_int_grouped", (8, 128), 1), ("unpack_int_grouped", (2, 128), 2),
                ("unpack_mxfp8", (), 1), ("unpack_mxfp4", (), 0)]


@pytest.mark.parametrize("rounding", unpack_plan.BF16_ROUNDINGS)
@pytest.mark.parametrize("slot, pack_args, per_word", BF16_FORMATS,
                         ids=[f"{s}{a}" for s, a, _ in BF16_FORMATS])
def test_bfloat16_outputs_are_rounded_by_cvt_rn_bf16x2_f32_where_the_plan_says_so(
        slot, pack_args, per_word, rounding, bf16_rounding):
    """The shipped plan (``hardware``) puts ``cvt.rn.bf16x2.f32`` in the PTX, once per output
    word of the program's tile; the ``integer`` one (the benchmark's comparison) has none."""
    bf16_rounding(rounding)
    pack = getattr(packing, slot.replace("unpack_", "pack_"))
    plan = PLANNERS[slot](*pack(torch.zeros(4096, 4096), *pack_args), dtype=torch.bfloat16)
    tiling, work = plan.work.tiling, plan.work
    assert work.kernel_args[-1] is (rounding == "hardware"), work.kernel_args
    ptx = _compiled(plan).asm["ptx"]
    words = tiling.block_r * tiling.block_g * tiling.group_words // (32 * work.config.num_warps)
    expected = words * per_word if rounding == "hardware" else 0
    assert ptx.count("cvt.rn.bf16x2.f32") == expected, (ptx.count("cvt.rn.bf16x2.f32"), expected)

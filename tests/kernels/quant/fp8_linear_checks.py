"""The fused FP8 linear (``fused_fp8_linear``) where its kernels run: under ``TRITON_INTERPRET=1``
on CPU tensors (CI: ``test_fp8_linear_interpreter.py``) or compiled on a CUDA device.

    TRITON_INTERPRET=1 .venv/bin/python -m pytest tests/kernels/quant/fp8_linear_checks.py
    .venv/bin/python -m pytest tests/kernels/quant/fp8_linear_checks.py     # on a CUDA machine

The path is judged as the GEMM slots are: its activation codes are the reference quantizer's (the
prologue is exact), and its output is within the bounded contract of the float64 product of the
dequantized operands.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from quant_check_device import DEVICE, INTERPRETING, MARKS

pytestmark = MARKS

from conformance.schema.bounds import bounded_limit  # noqa: E402
from libreyolo.kernels.quant.execute import fp8_gemm, fp8_launch  # noqa: E402
from libreyolo.kernels.quant.execute.fp8_gemm import GemmPlan  # noqa: E402
from libreyolo.kernels.quant.execute.fp8_linear import (  # noqa: E402
    FAST_ACCUMULATION_MAX_K,
    fused_fp8_linear,
    fused_fp8_mlp,
)
from libreyolo.kernels.quant.execute.fp8_plan import (  # noqa: E402
    plan_fp8_cast_dynamic,
    plan_fp8_cast_static,
)
from libreyolo.kernels.slots import GEMM_BOUND as GEMM_CONTRACT  # noqa: E402
from libreyolo.quant import fp8_execute as ref  # noqa: E402
from libreyolo.quant.packing import pack_fp8  # noqa: E402

SELECTED = ("fp8_cast_static=triton,fp8_cast_dynamic=triton,fp8_perchannel_epilogue=triton,"
            "fp8_gemm=scaled_mm")
ACT = {None: lambda y: y, "relu": F.relu, "gelu": F.gelu, "silu": F.silu}


@pytest.fixture(autouse=True)
def selected(monkeypatch):
    """The implementations await their parity records: select them by name."""
    monkeypatch.setenv("LIBREYOLO_KERNELS", SELECTED)


def layer(shape, n, gen, dtype=torch.bfloat16):
    k = shape[-1]
    x = (torch.randn(shape, generator=gen) * 2).to(dtype)
    w = torch.randn((n, k), generator=gen) / k ** 0.5
    packed = pack_fp8(w, w.abs().amax(1) / 448, axis=0)
    bias = (torch.randn(n, generator=gen) * 0.1).to(dtype)
    return x, packed.codes, packed.scale, bias


def expected(x, codes, scale, bias, input_scale, act):
    """(the portable path in x's dtype, the float64 oracle) from the reference's codes."""
    x2d = x.reshape(-1, x.shape[-1])
    if input_scale is None:
        a, sa = ref.fp8_cast_dynamic(x2d)
    else:
        a, sa = ref.fp8_cast_static(x2d, input_scale), input_scale.expand(x2d.shape[0], 1)
    portable = ref.fp8_gemm_portable(a, codes, sa, scale, bias, x.dtype)
    oracle = ref.fp8_gemm_portable(a.double(), codes.double(), sa.double(), scale.double(),
                                   bias.double())
    return ACT[act](portable.float()).to(x.dtype), ACT[act](oracle)


@pytest.mark.parametrize("shape, n, static, act, dtype", [
    ((33, 257), 40, False, None, torch.bfloat16),
    ((1, 256), 256, False, "gelu", torch.bfloat16),
    ((2, 150, 256), 1024, True, "relu", torch.bfloat16),
    ((64, 96), 91, False, "silu", torch.float16),
], ids=["ragged-k-and-n", "m-1-gelu", "3-d-static-relu", "float16-silu"])
def test_fused_linear_is_within_the_gemm_bound(shape, n, static, act, dtype):
    gen = torch.Generator().manual_seed(sum(shape) + n)
    x, codes, scale, bias = layer(shape, n, gen, dtype)
    input_scale = torch.tensor(0.02) if static else None
    got = fused_fp8_linear(x.to(DEVICE), codes.to(DEVICE), scale.to(DEVICE), bias.to(DEVICE),
                           input_scale=None if input_scale is None else input_scale.to(DEVICE),
                           activation=act)
    assert got is not None and got.shape == (*shape[:-1], n) and got.dtype == dtype
    portable, oracle = expected(x, codes, scale, bias, input_scale, act)
    oracle = oracle.reshape(got.shape)
    port_err = float((portable.reshape(got.shape).double() - oracle).abs().max())
    err = float((got.cpu().double() - oracle).abs().max())
    limit = bounded_limit(port_err, float(oracle.abs().max()), torch.finfo(dtype).eps,
                          GEMM_CONTRACT.k, GEMM_CONTRACT.floor)
    assert err <= limit, f"error {err} > bound {limit} (portable path's error {port_err})"


SHORT_K, LONG_K = FAST_ACCUMULATION_MAX_K // 2, 2 * FAST_ACCUMULATION_MAX_K


@pytest.mark.parametrize(("setting", "short_k_fast", "long_k_fast"), [
    (None, True, False), ("1", True, True), ("0", False, False)],
    ids=["by-k", "forced-fast", "forced-float32"])
def test_fast_accumulation_is_what_k_and_the_setting_ask_of_the_gemm(setting, short_k_fast,
                                                                      long_k_fast, monkeypatch):
    """Unset, the GEMM accumulates fast where K is at most ``FAST_ACCUMULATION_MAX_K`` and in
    float32 above it; ``LIBREYOLO_FP8_FAST_ACCUMULATION`` forces either. Checked where it
    reaches ``_scaled_mm`` (``use_fast_accum``), for a layer and for both of an MLP's GEMMs
    (fc1 over a short K, fc2 over a long one), and the output stays within the GEMM's bound."""
    if setting is None:
        monkeypatch.delenv("LIBREYOLO_FP8_FAST_ACCUMULATION", raising=False)
    else:
        monkeypatch.setenv("LIBREYOLO_FP8_FAST_ACCUMULATION", setting)
    seen = []
    scaled_mm = torch._scaled_mm

    def spy(*args, **kwargs):
        seen.append(kwargs.get("use_fast_accum", False))
        return scaled_mm(*args, **kwargs)

    monkeypatch.setattr(torch, "_scaled_mm", spy)
    gen = torch.Generator().manual_seed(11)
    x, codes, scale, bias = layer((48, SHORT_K), LONG_K, gen)
    got = fused_fp8_linear(x.to(DEVICE), codes.to(DEVICE), scale.to(DEVICE), bias.to(DEVICE))
    portable, oracle = expected(x, codes, scale, bias, None, None)
    err = float((got.cpu().double() - oracle).abs().max())
    port_err = float((portable.double() - oracle).abs().max())
    assert err <= bounded_limit(port_err, float(oracle.abs().max()),
                                torch.finfo(torch.bfloat16).eps, GEMM_CONTRACT.k,
                                GEMM_CONTRACT.floor)
    _, codes2, scale2, bias2 = layer((1, LONG_K), 64, gen)
    mlp = fused_fp8_mlp(x.to(DEVICE), (codes.to(DEVICE), scale.to(DEVICE), bias.to(DEVICE)),
                        (codes2.to(DEVICE), scale2.to(DEVICE), bias2.to(DEVICE)))
    assert mlp is not None and mlp.shape == (48, 64)
    # the layer, then the MLP's fc1 (K short) and fc2 (K long)
    assert seen == [short_k_fast, short_k_fast, long_k_fast]


@pytest.mark.skipif(INTERPRETING, reason="the tensor cores' accumulator is a CUDA matter")
@pytest.mark.parametrize("k", [FAST_ACCUMULATION_MAX_K, 4 * FAST_ACCUMULATION_MAX_K])
def test_the_default_accumulation_is_as_accurate_as_bf16_linear(k):
    """Why ``FAST_ACCUMULATION_MAX_K``: with the accumulation the default picks for K (fast at
    the threshold, float32 above it), the fused path's error against the float64 product is at
    most bf16 ``F.linear``'s on the same dequantized operands (the finalized module's
    dequantize-once path), in max and in RMS, so the default trades no accuracy against the bf16
    model it is faster than. Fast accumulation at 4K fails it (benchmarks/NOTES.md)."""
    gen = torch.Generator().manual_seed(k)
    x, codes, scale, bias = layer((4096, k), 1024, gen)
    a, sa = ref.fp8_cast_dynamic(x)
    operands = (a.double().cuda() * sa.double().cuda(),
                codes.double().cuda() * scale.double().cuda()[:, None])
    oracle = F.linear(*operands, bias.double().cuda())
    got = fused_fp8_linear(x.cuda(), codes.cuda(), scale.cuda(), bias.cuda()).double() - oracle
    bf16 = F.linear(*(t.to(torch.bfloat16) for t in operands), bias.cuda()).double() - oracle
    assert got.abs().max() <= bf16.abs().max() and got.square().mean() <= bf16.square().mean(), (
        f"fused max {float(got.abs().max()):.4g}, rms {float(got.square().mean().sqrt()):.4g}; "
        f"bf16 max {float(bf16.abs().max()):.4g}, rms {float(bf16.square().mean().sqrt()):.4g}")


def test_float32_activations_take_the_callers_path():
    """The FP8 tensor cores accumulate with ~14 bits (found on the H200: float32 outputs 1e-3
    off where float32's own bound was 9e-6): no float32 output is claimed."""
    gen = torch.Generator().manual_seed(5)
    x, codes, scale, bias = layer((17, 48), 32, gen, torch.float32)
    assert fused_fp8_linear(*(t.to(DEVICE) for t in (x, codes, scale, bias))) is None


def test_no_rows_give_an_empty_output_and_no_columns_the_callers_path():
    gen = torch.Generator().manual_seed(7)
    _, codes, scale, bias = layer((1, 32), 16, gen)
    args = [t.to(DEVICE) for t in (codes, scale, bias)]
    empty = fused_fp8_linear(torch.zeros((2, 0, 32), dtype=torch.bfloat16, device=DEVICE), *args)
    assert empty.shape == (2, 0, 16) and empty.dtype == torch.bfloat16
    no_k = torch.zeros((16, 0), dtype=torch.float8_e4m3fn, device=DEVICE)
    assert fused_fp8_linear(torch.zeros((3, 0), dtype=torch.bfloat16, device=DEVICE), no_k,
                            *args[1:]) is None


def test_an_empty_reduction_gives_the_bias_where_scaled_mm_drops_it(monkeypatch):
    """With K = 0 the GEMM's output is the bias alone. torch 2.11's CUDA ``_scaled_mm`` returns
    zeros there, bias or not (it returns before its bias epilogue), so the rowwise bfloat16 path,
    which hands ``_scaled_mm`` the bias, must not take K = 0: its ``_scaled_mm`` is made to drop
    the bias here on every device, as CUDA's does."""
    scaled_mm = torch._scaled_mm

    def drops_bias_without_k(a, b, **kwargs):
        if a.shape[1] == 0:
            return torch.zeros((a.shape[0], b.shape[1]), dtype=kwargs["out_dtype"],
                               device=a.device)
        return scaled_mm(a, b, **kwargs)

    monkeypatch.setattr(torch, "_scaled_mm", drops_bias_without_k)
    gen = torch.Generator().manual_seed(5)
    m, n = 8, 24
    a = torch.zeros((m, 0), dtype=torch.float8_e4m3fn)
    b = torch.zeros((n, 0), dtype=torch.float8_e4m3fn)
    scale_a, scale_b = torch.rand((m, 1), generator=gen), torch.rand(n, generator=gen)
    bias = torch.randn(n, generator=gen).to(torch.bfloat16)
    plan = GemmPlan(*(t.to(DEVICE) for t in (a, b, scale_a, scale_b, bias)), torch.bfloat16, True)
    got = fp8_gemm.run(plan)
    want = ref.fp8_gemm_portable(a, b, scale_a, scale_b, bias, torch.bfloat16)
    assert torch.equal(want, bias.expand(m, n))
    assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("fma_division", [True, False], ids=["fma-division", "div-rn"])
def test_the_prologue_is_exact_on_every_bfloat16_pattern_under_dynamic_scales(fma_division,
                                                                               monkeypatch):
    """Every bfloat16 bit pattern (NaN, inf, subnormals, signed zeros) under scales the dynamic
    mode gives bfloat16 rows (``amax / 448``, amax drawn over every binade, so divisors inside
    and outside the FMA division's [2^-64, 2^64]), with either division; the interpreter
    always divides with ``tl.div_rn`` (its ``tl.fma`` rounds twice). The H200's run of the full
    space (every amax, bf16 and fp16): ``benchmarks/sweeps/sweep_fp8_prologue.py``."""
    if INTERPRETING and fma_division:
        pytest.skip("the interpreter has no exact fma: its launches divide with tl.div_rn")
    monkeypatch.setattr(fp8_launch, "FMA_DIVISION", fma_division)
    gen = torch.Generator().manual_seed(8)
    x = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    x = x.reshape(1, -1)
    amax = torch.randint(1, 0x7F80, (8 if INTERPRETING else 512,), generator=gen)
    scales = amax.to(torch.int16).view(torch.bfloat16).float() / torch.tensor(448.0)
    for scale in scales:
        want = ref.fp8_cast_static(x, scale).view(torch.uint8)
        got, _ = fp8_launch.cast(plan_fp8_cast_static(x.to(DEVICE), scale.to(DEVICE)))
        assert torch.equal(got.cpu().view(torch.uint8), want), f"scale {scale.item()!r}"


def special_values() -> torch.Tensor:
    """float32 values where an E4M3 conversion can go wrong, each with both signs: zeros, float32
    subnormals, E4M3's subnormal grid (k 2^-9) and the midpoints between its points (ties, to
    even both ways), its rounding threshold 2^-10 and its neighbours, normal ties, the largest
    value 448 and the values around the clamp (the tie 464 with 512), overflow, inf, NaNs
    (quiet, signalling, payloads)."""
    grid = torch.arange(0, 17, dtype=torch.float64) * 2.0 ** -10          # subnormals and ties
    ties = torch.tensor([1.0625, 1.1875, 3.25, 3.75, 13.0, 15.0, 208.0, 240.0, 416.0, 432.0],
                        dtype=torch.float64)                               # normal midpoints
    edges = torch.tensor([2.0 ** -10, 2.0 ** -6, 448.0, 464.0, 480.0, 512.0, 1e30],
                         dtype=torch.float64)
    near = torch.cat([edges.float().nextafter(torch.tensor(0.0)),
                      edges.float().nextafter(torch.tensor(float("inf")))])
    finite = torch.cat([grid.float(), ties.float(), edges.float(), near,
                        torch.tensor([1e-45, 1.1754942e-38, 1.1754944e-38, 3.4028235e38])])
    specials = torch.tensor([0x7F800000, 0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0x7FA00000],
                            dtype=torch.int32).view(torch.float32)
    positive = torch.cat([finite, specials])
    return torch.cat([positive, -positive])


@pytest.mark.parametrize("hardware", [True, False], ids=["hardware-e4m3", "software-e4m3"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_both_e4m3_conversions_give_the_reference_codes_on_special_values(dtype, hardware,
                                                                          monkeypatch):
    """On sm_89+ the prologue rounds with ``cvt.rn.satfinite.e4m3x2.f32``, elsewhere (and with
    ``HARDWARE_E4M3 = False``) in software: both give the reference's codes, so they agree bit
    for bit, on the special values under scales 1, an odd one, one outside the FMA division's
    range and zero, and in the dynamic mode. Rows 0-63 hold no inf or NaN (the hardware path
    skips its NaN select in such tiles) and rows 64-127 hold them: separate tiles."""
    if hardware and (INTERPRETING or torch.cuda.get_device_capability() < (8, 9)):
        pytest.skip("the E4M3 conversion instruction needs sm_89+ (and no interpreter)")
    monkeypatch.setattr(fp8_launch, "HARDWARE_E4M3", hardware)
    assert fp8_launch.hardware_e4m3(torch.device(DEVICE)) == hardware
    values = special_values().to(dtype)
    finite = values[values.isfinite()]
    gen = torch.Generator().manual_seed(10)
    rows = [finite[torch.randperm(finite.numel(), generator=gen)][:64] for _ in range(64)]
    rows += [values[torch.randperm(values.numel(), generator=gen)][:64] for _ in range(64)]
    x = torch.stack(rows)
    assert x.shape == (128, 64) and x[:64].isfinite().all() and not x[64:].isfinite().all()
    for scale in [torch.tensor(s) for s in (1.0, 0.3712, 2.0 ** -70, 0.0)]:
        got, _ = fp8_launch.cast(plan_fp8_cast_static(x.to(DEVICE), scale.to(DEVICE)))
        want = ref.fp8_cast_static(x, scale).view(torch.uint8)
        assert torch.equal(got.cpu().view(torch.uint8), want), f"scale {scale.item()!r}"
    codes, row_scale = fp8_launch.cast(plan_fp8_cast_dynamic(x.to(DEVICE)))
    want_codes, want_scale = ref.fp8_cast_dynamic(x)
    assert torch.equal(codes.cpu().view(torch.uint8), want_codes.view(torch.uint8))
    assert torch.equal(row_scale.cpu(), want_scale)


def test_the_padded_prologue_writes_the_reference_codes_and_zeros_in_the_pad():
    gen = torch.Generator().manual_seed(3)
    x = (torch.randn((5, 37), generator=gen) * 5).to(torch.bfloat16)
    codes, scale = fp8_launch.cast(plan_fp8_cast_dynamic(x.to(DEVICE)), pad_to=16)
    want_codes, want_scale = ref.fp8_cast_dynamic(x)
    raw = codes.cpu().view(torch.uint8)
    assert raw.shape == (5, 48)
    assert torch.equal(raw[:, :37], want_codes.view(torch.uint8))
    assert not raw[:, 37:].any()
    assert torch.equal(scale.cpu(), want_scale)


#: The GELU fold's relative error, with margin: its tail Phi(-|x|) is within 4e-6 of float64
#: (``fp8_kernels._gelu``), plus the device's exp2 (2 ulps) and the products' roundings.
GELU_FOLD_TOLERANCE = 1e-5
#: Below this the fold returns -0.0, as float32 ``F.gelu`` does from about -5.5 on.
GELU_FOLD_FLUSH = -6.0


def exact_gelu(x: torch.Tensor) -> torch.Tensor:
    """float64 GELU = x * Phi(x) (``ndtr``, no cancellation on either side), with the fold's
    documented flush below ``GELU_FOLD_FLUSH``; inf -> inf, -inf and NaN -> NaN."""
    x = x.double()
    return torch.where((x < GELU_FOLD_FLUSH) & x.isfinite(), -0.0, x * torch.special.ndtr(x))


def e4m3_bytes(quotient: torch.Tensor) -> torch.Tensor:
    """E4M3 bytes of float64 quotients (clamped to +-448, NaN -> 0x7F as the prologue writes)."""
    codes = quotient.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    return torch.where(quotient.isnan(), 0x7F, codes)


def test_the_gelu_fold_is_within_its_tolerance_of_exact_gelu_on_every_bfloat16_pattern():
    """``fused_fp8_mlp``'s fold quantizes GELU(x) with its own row scales: each scale is within
    the tolerance of the exact one (finite amax of the exact GELU / 448), and each code is the
    exact GELU's under that scale, or its neighbour where the exact quotient lies within the
    tolerance of a rounding boundary. Rows of 4096 consecutive patterns put the tails in rows of
    their own, where the row scale is small enough for every tail code to count."""
    x = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    x = x.reshape(16, 4096)
    codes, row_scale = fp8_launch.cast(plan_fp8_cast_dynamic(x.to(DEVICE)), gelu=True)
    codes, row_scale = codes.cpu().view(torch.uint8), row_scale.cpu().double()
    exact = exact_gelu(x)
    amax = torch.where(exact.isfinite(), exact.abs(), 0.0).amax(dim=1, keepdim=True)
    exact_scale = torch.where(amax > 0, amax / 448.0, 1.0)
    assert ((row_scale - exact_scale).abs() <= GELU_FOLD_TOLERANCE * exact_scale).all()
    low = e4m3_bytes(exact * (1 - GELU_FOLD_TOLERANCE) / row_scale)
    high = e4m3_bytes(exact * (1 + GELU_FOLD_TOLERANCE) / row_scale)
    wrong = (codes != low) & (codes != high)
    assert not wrong.any(), (f"{int(wrong.sum())} codes, first at x = "
                             f"{x[wrong][0].item()!r}: {codes[wrong][0].item():#04x} where "
                             f"{low[wrong][0].item():#04x}..{high[wrong][0].item():#04x}")


def test_selecting_the_reference_prologue_by_name_keeps_the_rest_of_the_path(monkeypatch):
    """The prologue is exact, so the reference prologue gives the same output bits; with no
    GEMM implementation selected the path declines (None) instead of dropping a piece."""
    gen = torch.Generator().manual_seed(4)
    args = [t.to(DEVICE) for t in layer((40, 100), 70, gen)]
    fused = fused_fp8_linear(*args)
    monkeypatch.setenv("LIBREYOLO_KERNELS", SELECTED.replace("fp8_cast_dynamic=triton",
                                                             "fp8_cast_dynamic=reference"))
    assert torch.equal(fused_fp8_linear(*args).view(torch.int16), fused.view(torch.int16))
    monkeypatch.setenv("LIBREYOLO_KERNELS", "fp8_cast_dynamic=triton,fp8_gemm=reference")
    assert fused_fp8_linear(*args) is None


@pytest.mark.skipif(INTERPRETING, reason="CUDA graphs need a CUDA device")
def test_the_fused_path_replays_in_a_cuda_graph_with_its_eager_bits():
    gen = torch.Generator().manual_seed(5)
    args = [t.cuda() for t in layer((300, 257), 255, gen)]
    eager = fused_fp8_linear(*args, activation="relu")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fused_fp8_linear(*args, activation="relu")
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fused_fp8_linear(*args, activation="relu")
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.int16), eager.view(torch.int16))


@pytest.mark.skipif(INTERPRETING, reason="host syncs are a CUDA matter")
def test_the_fused_path_does_not_synchronize_in_steady_state():
    """After a warm-up (compiling, padding the weight once, reading a static scale once),
    neither the dynamic nor the static path synchronizes with the device."""
    gen = torch.Generator().manual_seed(6)
    args = [t.cuda() for t in layer((64, 200), 90, gen)]
    input_scale = torch.tensor(0.02, device="cuda")
    for scale in (None, input_scale):
        fused_fp8_linear(*args, input_scale=scale, activation="gelu")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for scale in (None, input_scale):
            fused_fp8_linear(*args, input_scale=scale, activation="gelu")
    finally:
        torch.cuda.set_sync_debug_mode(0)

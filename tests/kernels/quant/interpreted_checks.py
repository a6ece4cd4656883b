"""The Triton fake-quant kernels equal the reference bit for bit, run by the Triton interpreter.

``test_triton_fake_quant_interpreter.py`` runs this file in a child pytest with
``TRITON_INTERPRET=1`` (it must be set before any kernel module is imported). By hand:

    TRITON_INTERPRET=1 .venv/bin/python -m pytest tests/kernels/quant/interpreted_checks.py -n 2

Cases and inputs are data (``triton_fq_cases.toml``, ``triton_fq_inputs.py``). Cases marked
``tile = "gpu"`` run the registered implementation exactly as the GPU does (same block size);
the others run the same kernel with large tiles so the interpreter stays fast.
"""

from __future__ import annotations

import pytest
import torch

from tests.interpreter_marks import INTERPRETER_ONLY

pytest.importorskip("triton")
pytestmark = INTERPRETER_ONLY

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton_fq_inputs import (  # noqa: E402
    CASES,
    DTYPES,
    ERRORS,
    bits,
    gapped,
    make_arguments,
    upstream_gradient,
)

from libreyolo.kernels import active, explain, ops, registered  # noqa: E402
from libreyolo.kernels.quant.simulate import kernels  # noqa: E402
from libreyolo.kernels.quant.simulate.plan import GPU_TILE, PLANNERS  # noqa: E402
from libreyolo.quant import fake_quant as reference  # noqa: E402

LARGE_TILE = 65536
LAYOUTS = {"contiguous": lambda x: x, "gapped": gapped}


def _launch():
    from libreyolo.kernels.quant.simulate import launch  # imports triton kernels

    return launch


def _triton(case: dict, *args, **kwargs) -> torch.Tensor:
    """The GPU path (the registered implementation) for GPU-tile cases, large tiles otherwise."""
    slot = case["slot"]
    if case.get("tile") == "gpu":
        (impl,) = [i for i in registered(slot) if i.name == "triton"]
        return impl.fn(*args, **kwargs)
    return _launch().run(PLANNERS[slot](*args, **kwargs), tile=LARGE_TILE)


def _with_x(args: tuple, x: torch.Tensor) -> tuple:
    return (x,) + args[1:]


def _assert_same_bits(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    differ = bits(got) != bits(want)
    if differ.any():
        where = tuple(int(i) for i in differ.nonzero()[0])
        pytest.fail(f"{what}: {int(differ.sum())} elements differ, first at {where}: "
                    f"got {got[where].item()!r}, reference {want[where].item()!r}")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case_id", CASES)
def test_forward_equals_reference_bit_for_bit(case_id, dtype, layout):
    case = CASES[case_id]
    args, kwargs = make_arguments(case, dtype)
    args = _with_x(args, LAYOUTS[layout](args[0]))
    want = getattr(reference, case["slot"])(*args, **kwargs)
    _assert_same_bits(_triton(case, *args, **kwargs), want, f"{case_id} forward")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case_id", CASES)
def test_backward_is_the_reference_straight_through_mask(case_id, dtype):
    case = CASES[case_id]
    args, kwargs = make_arguments(case, dtype)
    g = upstream_gradient(args[0], torch.Generator().manual_seed(1))
    grads = []
    for run in (lambda *a, **k: getattr(reference, case["slot"])(*a, **k),
                lambda *a, **k: _triton(case, *a, **k)):
        x = args[0].clone().requires_grad_(True)
        run(*_with_x(args, x), **kwargs).backward(g)
        grads.append(x.grad)
    _assert_same_bits(grads[1], grads[0], f"{case_id} gradient")


@pytest.mark.parametrize("case_id", [c for c in CASES if CASES[c].get("tile") == "gpu"])
def test_gpu_block_size_cases_span_three_programs_with_a_ragged_last_one(case_id):
    case = CASES[case_id]
    args, kwargs = make_arguments(case, torch.float32)
    plan = PLANNERS[case["slot"]](*args, **kwargs)
    t = _launch().tiling(plan.layout, GPU_TILE)
    first_unit_of_last = (t.programs - 1) * t.block_units
    last_program_elements = sum(
        min(t.unit, plan.layout.cols - (u % t.units_per_row) * t.unit)
        for u in range(first_unit_of_last, t.n_units)
    )
    assert t.programs >= 3
    assert last_program_elements < t.block_units * t.unit_pad, "the last program is not ragged"


@pytest.mark.parametrize("chunk", [16, 64])
def test_amax_partials_cover_every_chunk_when_programs_loop(chunk):
    """More chunks than MAX_PARTIALS: each program loops, and no chunk is skipped or repeated."""
    x = torch.randn(3, 9001)
    x[1, 9000] = 1e6  # in the ragged last chunk of row 1
    x[2, 5] = float("inf")  # not finite: ignored
    partials = _launch().amax_partials(x, 3, 9001, chunk)
    assert partials.shape[1] < 9001 // chunk  # looping happened
    want = torch.where(torch.isfinite(x), x.abs(), 0).amax(dim=1)
    assert torch.equal(partials.amax(dim=1), want)


def test_every_fake_quant_slot_dispatches_to_triton_here():
    assert {slot: active()[slot] for slot in PLANNERS} == dict.fromkeys(PLANNERS, "triton")


@pytest.mark.parametrize("error_id", ERRORS)
def test_bad_input_raises_what_the_reference_raises(error_id):
    case = ERRORS[error_id]
    args, kwargs = make_arguments(case, torch.float32)
    with pytest.raises((TypeError, ValueError)) as expected:
        getattr(reference, case["slot"])(*args, **kwargs)
    with pytest.raises(expected.type) as got:
        getattr(ops, case["slot"])(*args, **kwargs)
    assert str(got.value) == str(expected.value)


def test_a_tensor_off_the_interpreters_device_is_declined_with_a_reason():
    x = torch.empty(4, 32, device="meta")
    reasons = {impl.name: reason for impl, reason in explain("fake_quant_mxfp8_dynamic", x)}
    assert reasons["triton"] == \
        "declared unsupported (device meta not in declared devices cpu, cuda)"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_zero_scale_gives_positive_zero_and_no_gradient(dtype):
    """docs/quantization.md rule 7, for a scale of -0.0 too (a valid, non-negative scale)."""
    x = torch.tensor([-3.0, -0.0, 2.5, float("-inf"), float("nan")], dtype=dtype)
    for scale in (torch.tensor(0.0), torch.tensor(-0.0)):
        x_ = x.clone().requires_grad_(True)
        out = ops.fake_quant_fp8(x_, scale)
        out.backward(torch.ones_like(out))
        assert bits(out[:4]).eq(0).all() and torch.isnan(out[4])
        assert bits(x_.grad).eq(0).all()


class _QuantizeActivations(torch.nn.Module):
    def forward(self, x):
        return ops.fake_quant_fp8(x) * 2


def test_exported_graphs_keep_the_portable_path(monkeypatch):
    """torch.jit.trace and torch.export see the reference (the kernel declines while a graph is
    captured). ONNX export is not tried here: the reference itself does not convert yet."""
    launch = _launch()
    calls = []
    real_run = launch.run
    monkeypatch.setattr(launch, "run", lambda *a, **k: calls.append(1) or real_run(*a, **k))
    module, x = _QuantizeActivations(), torch.randn(4, 64)
    module(x)
    assert calls, "eager calls should take the triton kernel"
    calls.clear()
    traced = torch.jit.trace(module, (x,), check_trace=False)
    exported = torch.export.export(module, (x,))
    assert not calls
    for graph in (str(traced.graph), str(exported.graph)):
        assert "libreyolo.kernels.quant" not in graph
    assert torch.equal(bits(traced(x)), bits(module(x)))


@pytest.mark.parametrize("slot", ["fake_quant_mxfp4_weight", "fake_quant_mxfp8_weight"])
def test_mx_scale_extremes_divide_exactly(slot):
    """E8M0 scales are applied as an exact multiply by 2^-e: blocks at both ends of the scale
    range (clamped to 2^-127, and from amax near float32 max) and subnormal quotients."""
    tiny = torch.tensor(2.0**-149)
    rows = [
        torch.full((32,), 0.0).index_fill_(0, torch.tensor([3]), tiny),  # scale clamps at 2^-127
        torch.linspace(-1.0, 1.0, 32) * 2.0**-140,  # subnormal inputs, subnormal scale
        torch.linspace(-1.0, 1.0, 32) * 3.0e38,  # the largest scales
        torch.linspace(-1.0, 1.0, 32) * 2.0**-100,  # quotients below every grid step
        torch.tensor([1.0, 1e-38, -3e-39, 2.0**-126] * 8),  # a normal amax, subnormal elements
        torch.zeros(32),  # amax 0: scale 1
    ]
    x = torch.stack(rows).repeat(1, 3)
    x[5, 40] = float("nan")
    x[5, 70] = float("-inf")
    _assert_same_bits(_launch().run(PLANNERS[slot](x), tile=4096), getattr(reference, slot)(x),
                      f"{slot} extremes")


def test_tensor_amax_pass_uses_more_partials_and_covers_every_chunk():
    """The single-row (tensor amax) pass spreads over up to TENSOR_PARTIALS programs."""
    launch = _launch()
    x = torch.randn(100_003)
    x[100_002] = -1e6  # in the ragged last chunk
    x[7] = float("inf")
    partials = launch.amax_partials(x, 1, x.numel(), 16, launch.TENSOR_PARTIALS)
    assert partials.shape[1] > launch.MAX_PARTIALS
    assert partials.shape[1] <= launch.TENSOR_PARTIALS
    want = torch.where(torch.isfinite(x), x.abs(), 0).amax()
    assert torch.equal(partials.amax(), want)


INLINE_LIMIT_CASES = {"gpu-nvfp4-weight-inline-limit": 1, "gpu-nvfp4-dynamic-inline-limit": 1,
                      "gpu-nvfp4-weight-past-inline-limit": 2}


def _kernels_launched(monkeypatch) -> list[str]:
    """The names of the kernels launched from now on (recorded, then launched)."""
    from libreyolo.kernels import triton_launch

    names, real = [], triton_launch.Launcher.__call__

    def recorded(self, *tensors):
        names.append(self._kernel.fn.__name__)
        return real(self, *tensors)

    monkeypatch.setattr(triton_launch.Launcher, "__call__", recorded)
    return names


@pytest.mark.parametrize("case_id", INLINE_LIMIT_CASES)
def test_nvfp4_takes_one_launch_up_to_the_inline_limit_and_two_past_it(case_id, monkeypatch):
    """At INLINE_AMAX_TILES programs the quantizing pass finds the tensor amax itself; one more
    program and the amax pass runs first (both exact: the forward and backward tests)."""
    case = CASES[case_id]
    args, kwargs = make_arguments(case, torch.float32)
    plan = PLANNERS[case["slot"]](*args, **kwargs)
    programs = _launch().tiling(plan.layout, GPU_TILE).programs
    assert programs == (16 if INLINE_LIMIT_CASES[case_id] == 1 else 17)
    launched = _kernels_launched(monkeypatch)
    _triton(case, *args, **kwargs)
    assert len(launched) == INLINE_LIMIT_CASES[case_id], launched
    assert launched[-1] == "fake_quant_kernel"


@triton.jit
def _amax_of_own_tile_only(x_ptr, base, length, first, step, IN_KIND: tl.constexpr,
                           CHUNK: tl.constexpr, ITERATIONS: tl.constexpr):
    """Broken on purpose: each program's 'tensor' amax is the amax of its own tile."""
    tile = tl.num_programs(0) - 1 - tl.program_id(0)
    col = tile.to(tl.int64) * CHUNK + tl.arange(0, CHUNK)
    valid = col < length
    x = kernels._load_float32(x_ptr, base + col, valid, IN_KIND)
    return tl.max(kernels._finite_abs(x, valid), axis=0)


@pytest.mark.parametrize("case_id", ["gpu-nvfp4-weight-inline-limit",
                                     "gpu-nvfp4-dynamic-inline-limit"])
def test_an_inline_amax_over_each_programs_own_tile_is_caught(case_id, monkeypatch):
    """Negative control: the inline tensor amax taken over the program's tile only gives
    other bits than the reference on the limit cases (the check above would fail)."""
    case = CASES[case_id]
    args, kwargs = make_arguments(case, torch.float32)
    want = getattr(reference, case["slot"])(*args, **kwargs)
    _assert_same_bits(_triton(case, *args, **kwargs), want, f"{case_id} forward")
    monkeypatch.setattr(kernels, "_finite_amax", _amax_of_own_tile_only)
    with pytest.raises(pytest.fail.Exception, match="elements differ"):
        _assert_same_bits(_triton(case, *args, **kwargs), want, f"{case_id} broken forward")


def test_backward_after_the_input_changed_in_place_is_refused_like_the_reference():
    """The mask must be the forward's: autograd refuses a backward through a mutated input."""
    (impl,) = [i for i in registered("fake_quant_fp8") if i.name == "triton"]
    leaf = torch.randn(4, 64, requires_grad=True)
    x = leaf * 1.0
    out = impl.fn(x)
    x.add_(1000.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


@pytest.mark.parametrize("slot", ["fake_quant_int8_per_channel", "fake_quant_nvfp4_weight"])
def test_a_kept_layout_gives_the_reference_bits_on_new_data(slot):
    """The second and third calls of a description run from its kept layout and launches
    (``plan_cache``), on new data each time (the scale tensor is the same one, re-filled in
    place, so it is validated again but the layout is kept only while it is unchanged)."""
    from libreyolo.kernels.quant.simulate import plan as fq

    planned = []
    real = fq.PLANNERS[slot]
    fq.PLANNERS[slot] = lambda *a, **k: planned.append(1) or real(*a, **k)
    scale = torch.rand(8) + 0.01
    try:
        for round_ in range(3):
            x = torch.randn(8, 64) * (round_ + 1)
            args = (x, scale, 0) if slot.endswith("per_channel") else (x,)
            got = getattr(ops, slot)(*args)
            _assert_same_bits(got, getattr(reference, slot)(*args), f"{slot} round {round_}")
    finally:
        fq.PLANNERS[slot] = real
    assert len(planned) <= 1, "a kept layout was planned again"

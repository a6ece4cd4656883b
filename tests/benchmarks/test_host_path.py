"""The Python of the slot call path, timed on the CPU commit to commit (pytest-benchmark).

    .venv/bin/python -m pytest tests/benchmarks/test_host_path.py -p no:xdist --benchmark-only \
        --benchmark-autosave
    # later, on another commit: the same with --benchmark-compare (the last saved run)

Saved runs go to pytest-benchmark's default storage, ``.benchmarks/`` (git-ignored): they are
this machine's numbers, comparable only with runs on the same machine.

On the H200 a small call's host time is most of its cost (``docs/performance.md``, "Host time per
call"), and a GPU is not always at hand. These time, on any machine, what of that host time is
this repository's Python and torch's allocations: each call runs the real registry, validation,
plan cache and launch planning, with the kernels' launches replaced by a no-op
(``triton_launch.Launcher.__call__``, the ``launches_stubbed`` fixture of this folder's
``conftest.py``), so neither Triton's launcher nor the device is measured
(``benchmarks/bench/bench_host.py`` times those, on the GPU). The providers take CPU tensors under
``TRITON_INTERPRET=1``, which the fixture sets; an interpreted launch never runs.

The numbers are this machine's (the 2-core CI machine's, or a laptop's); compare runs made on the
same machine only. Under ``pytest -n auto`` (the README's test command) pytest-benchmark disables
timing and each case runs once, which keeps the cases working. The calls are data:
``host_calls.toml`` (the fake-quant calls of ``bench_host.py``) and the decoder-sized
deformable-attention call below.
"""

from __future__ import annotations

import tomllib

import pytest
import torch

pytest.importorskip("triton")
pytest.importorskip("pytest_benchmark")

from benchmarks.bench.bench_host import CALLS_FILE, arguments, noop_call, which_ran  # noqa: E402
from libreyolo.kernels import dispatch, ops, register, registry, unregister  # noqa: E402

CALLS = tomllib.loads(CALLS_FILE.read_text())["call"]
#: Deformable DETR's decoder layout (8 heads of 32 channels, 4 levels x 4 points: the
#: configuration whose eager forward+backward still loses on the H200) at a tenth of its queries
#: and small levels. The host path is the same for any size, while the CPU's allocations are not:
#: past glibc's mmap threshold (128 KiB) each fresh buffer is page-faulted in, and the zero fills
#: (asynchronous launches on the GPU) would be most of the row.
DECODER = {"levels": [(8, 13), (4, 7), (2, 4), (1, 2)], "queries": 30, "heads": 8,
           "channels": 32, "points": 4}


def _assert_triton_runs(slot: str, args: tuple, kwargs: dict) -> None:
    """The benchmark times the Triton path, or says why the registry would not take it."""
    assert which_ran(slot, args, kwargs) == "triton", {
        impl.name: reason for impl, reason in registry.explain(slot, *args, **kwargs)}


@pytest.mark.parametrize("call", CALLS, ids=lambda c: c["label"].replace(" ", "-"))
def test_fake_quant_call(benchmark, launches_stubbed, call):
    args, kwargs = arguments(call, torch.Generator().manual_seed(0))
    slot_call = getattr(ops, call["slot"])
    _assert_triton_runs(call["slot"], args, kwargs)
    slot_call(*args, **kwargs)  # the first call plans; steady state is what is timed
    benchmark(slot_call, *args, **kwargs)


def _decoder_inputs(requires_grad: bool) -> tuple:
    d, gen = DECODER, torch.Generator().manual_seed(0)
    len_in = sum(h * w for h, w in d["levels"])
    n_levels = len(d["levels"])
    value = torch.randn(1, len_in, d["heads"], d["channels"], generator=gen)
    locations = torch.rand(1, d["queries"], d["heads"], n_levels, d["points"], 2, generator=gen)
    weights = torch.rand(1, d["queries"], d["heads"], n_levels, d["points"], generator=gen)
    shapes = torch.tensor(d["levels"], dtype=torch.int64)
    tensors = [t.requires_grad_(requires_grad) for t in (value, locations, weights)]
    return tensors[0], shapes, tensors[1], tensors[2]


def test_ms_deform_attn_decoder_forward(benchmark, launches_stubbed):
    from libreyolo.kernels.attention.ms_deform_attn import maybe_ms_deform_attn

    inputs = _decoder_inputs(requires_grad=False)
    _assert_triton_runs("ms_deform_attn", inputs, {})
    maybe_ms_deform_attn(*inputs)
    benchmark(maybe_ms_deform_attn, *inputs)


def test_ms_deform_attn_decoder_forward_backward(benchmark, launches_stubbed):
    """Autograd's own work included (the engine, the Function's two Python methods)."""
    from libreyolo.kernels.attention.ms_deform_attn import maybe_ms_deform_attn

    inputs = _decoder_inputs(requires_grad=True)
    grad = torch.ones(1, DECODER["queries"], DECODER["heads"] * DECODER["channels"])

    def step():
        value, _, locations, weights = inputs
        value.grad = locations.grad = weights.grad = None
        maybe_ms_deform_attn(*inputs).backward(grad)

    step()
    benchmark(step)


@pytest.mark.parametrize("with_accepts", [False, True], ids=["no-accepts", "accepts"])
def test_registry_dispatch_to_a_no_op(benchmark, with_accepts):
    """The registry's own cost (issue #12: <= 5 µs on the H200 host): dispatch to a no-op,
    registered first, on a slot that has one; the no-op returns the slot's declared output
    (allocated once), which the registry judges."""
    args, out = noop_call()

    def noop(*args, **kwargs):
        return out

    def takes(*args, **kwargs):
        return None

    register("ms_deform_attn", noop, name="bench-noop", accepts=takes if with_accepts else None)
    try:
        assert dispatch("ms_deform_attn", *args) is out
        benchmark(dispatch, "ms_deform_attn", *args)
    finally:
        unregister("ms_deform_attn", "bench-noop")

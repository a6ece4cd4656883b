"""The Hub implementation on the H200 with a real compiled kernel: Deformable DETR's op built
locally from ``huggingface/kernels-community``'s source (benchmarks/hub/build_msda.py) and served
offline from a Hugging Face cache under a test lock. It loads and engages (spied), keeps the
bounded contract, replays in a CUDA graph; a tampered file or another revision is refused; a
refused kernel is disabled once, with one warning, and the fallback is bit-identical to having no
Hub kernel.

Runs with ``LIBREYOLO_HUB_LOCAL_BUILD`` naming the build folder and ``HF_HUB_OFFLINE=1``,
``HF_HUB_CACHE=$LIBREYOLO_HUB_LOCAL_BUILD/hf-cache`` set before the process starts (the
``hub`` stage of benchmarks/gpu_run.sh); skipped otherwise.
"""

import os
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from conformance.inputs.ms_deform_attn_cases import load_cases, make_inputs
from conformance.running.ms_deform_attn_parity import bounded_check
from libreyolo.kernels import KernelDisabledWarning, registry, settings
from libreyolo.kernels.attention.ms_deform_attn import hub_provider, maybe_ms_deform_attn
from libreyolo.kernels.hub import HubKernelRefused, lock

BUILD = os.environ.get("LIBREYOLO_HUB_LOCAL_BUILD")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(not BUILD, reason="LIBREYOLO_HUB_LOCAL_BUILD names no local build"),
    pytest.mark.skipif(os.environ.get("HF_HUB_OFFLINE") != "1", reason="runs offline only"),
]
kernels = pytest.importorskip("kernels")
constants = pytest.importorskip("huggingface_hub.constants")
CASES = [c for c in load_cases() if c.size in ("small", "medium")]


@pytest.fixture(autouse=True)
def local_lock(monkeypatch):
    """The build's test lock, the hub implementation asked for by name, a fresh registry."""
    monkeypatch.setattr(lock, "LOCK_FILE", Path(BUILD) / "lock.toml")
    for variable in (settings.HUB_KERNELS, settings.HUB_UNAUDITED, "LOCAL_KERNELS"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv(settings.KERNELS, "ms_deform_attn=hub")
    monkeypatch.setattr(registry, "_failures", {})
    monkeypatch.setattr(registry, "_warned", set())
    hub_provider.kernel.cache_clear()
    registry.clear_cache()
    yield
    hub_provider.kernel.cache_clear()
    registry.clear_cache()


@pytest.fixture
def tampered_cache(tmp_path, monkeypatch):
    """A copy of the build's cache with one byte of the compiled library flipped."""
    cache = tmp_path / "hf-cache"
    shutil.copytree(Path(BUILD) / "hf-cache", cache, symlinks=True)
    library = next(cache.rglob("*.so"))
    blob = library.resolve()
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def inputs(name="detr_4level_mini", seed=0):
    case = next(c for c in load_cases() if c.name == name)
    return case, make_inputs(case, device="cuda", seed=seed)


def test_the_compiled_kernel_loads_from_a_verified_copy_and_engages(monkeypatch):
    module = hub_provider.kernel()
    assert Path(BUILD).resolve() not in Path(module.__file__).resolve().parents
    assert "deformable-detr" in {str(k.metadata.name) for k in kernels.get_loaded_kernels()}
    calls = []
    forward = module.ms_deform_attn_forward
    monkeypatch.setattr(module, "ms_deform_attn_forward",
                        lambda *args: calls.append(args[-1]) or forward(*args))
    _, (value, shapes, locations, weights) = inputs()
    out = maybe_ms_deform_attn(value, shapes, locations, weights)
    assert out is not None and len(calls) == 1 and value.shape[0] % calls[0] == 0


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bounded_contract_forward_and_backward(case):
    value, shapes, locations, weights = make_inputs(case, device="cuda", seed=5)
    for verdict in bounded_check(hub_provider.ms_deform_attn_hub, value, shapes, locations,
                                 weights):
        assert verdict.passed, f"{case.name}: {verdict}"


def test_a_tampered_library_is_refused(tampered_cache):
    with pytest.raises(HubKernelRefused, match="does not match its cache address"):
        hub_provider.kernel()


def test_another_revision_is_refused(tmp_path, monkeypatch):
    text = (Path(BUILD) / "lock.toml").read_text()
    pinned = lock.load_lock(Path(BUILD) / "lock.toml")["deformable-detr"].revision
    other = tmp_path / "lock.toml"
    other.write_text(text.replace(pinned, "0" * 40))
    monkeypatch.setattr(lock, "LOCK_FILE", other)
    with pytest.raises(HubKernelRefused, match="no build for this system in the cache"):
        hub_provider.kernel()


def test_a_refused_kernel_is_disabled_once_with_one_warning(tampered_cache):
    _, (value, shapes, locations, weights) = inputs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [maybe_ms_deform_attn(value, shapes, locations, weights) for _ in range(3)]
    assert results == [None] * 3  # named alone, its fallback is the caller's portable path
    disabled = [w for w in caught if w.category is KernelDisabledWarning]
    assert len(disabled) == 1 and "HubKernelRefused" in str(disabled[0].message)


def test_the_fallback_is_bit_identical_to_no_hub_kernel(tampered_cache, monkeypatch):
    """As it will run once it has its record (default selection, hub on top of triton): the
    refused kernel hands the input to triton, whose output equals that with the Hub off."""
    monkeypatch.delenv(settings.KERNELS)
    monkeypatch.setattr(registry, "awaiting_record", lambda: frozenset())
    registry.clear_cache()
    _, (value, shapes, locations, weights) = inputs()
    monkeypatch.setenv(settings.HUB_KERNELS, "0")
    without = maybe_ms_deform_attn(value, shapes, locations, weights)
    monkeypatch.delenv(settings.HUB_KERNELS)
    with pytest.warns(KernelDisabledWarning):
        fallback = maybe_ms_deform_attn(value, shapes, locations, weights)
    assert without is not None and torch.equal(fallback, without)


@pytest.mark.parametrize("case_name", ["detr_4level_mini", "rt_detr_pairs_mini"])
def test_forward_and_backward_replay_in_a_cuda_graph(case_name):
    case, (value, shapes, locations, weights) = inputs(case_name)
    leaves = [t.detach().clone().requires_grad_() for t in (value, locations, weights)]
    grad = torch.randn(case.batch, case.queries, case.heads * case.channels, device="cuda")

    def step():
        for leaf in leaves:
            leaf.grad = None
        out = maybe_ms_deform_attn(leaves[0], shapes, leaves[1], leaves[2])
        out.backward(grad)
        return out

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # warm-up: loads the kernel, copies level sizes
            eager = step().detach().clone()
    torch.cuda.current_stream().wait_stream(stream)
    eager_grads = [leaf.grad.clone() for leaf in leaves]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = step()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)  # the forward writes each output once: deterministic
    for got, want in zip((leaf.grad for leaf in leaves), eager_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)  # atomics: order varies

"""The ``hub`` implementation of ``ms_deform_attn`` through the registry, on the stand-in
artifact (CPU, offline, the real ``kernels`` package): engaged only when asked for and allowed,
adapting the slot's arguments to the compiled op's, and disabled once, with one warning, when its
kernel is refused, the fallback then giving exactly what no Hub kernel gives."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from conformance.inputs.ms_deform_attn_cases import load_cases, make_inputs
from libreyolo.kernels import KernelDisabledWarning, decline_reason, registered, settings
from libreyolo.kernels.attention.ms_deform_attn import hub_provider, maybe_ms_deform_attn
from libreyolo.kernels.attention.ms_deform_attn.portable import ms_deform_attn_portable
from libreyolo.kernels.hub import HubKernelRefused, lock
from libreyolo.kernels.registry import answer

SLOT = "ms_deform_attn"


def case_inputs(name="deformable-detr-decoder-small"):
    case = next(c for c in load_cases() if c.size == "small" and len(c.levels) > 1)
    return make_inputs(case, dtype=torch.float32, device="cpu", seed=0)


def calls():
    return hub_provider.kernel().CALLS


def portable_with_grads(value, shapes, locations, weights, grad):
    leaves = [t.detach().clone().requires_grad_() for t in (value, locations, weights)]
    out = ms_deform_attn_portable(leaves[0], shapes, leaves[1], leaves[2])
    out.backward(grad)
    return out.detach(), [leaf.grad for leaf in leaves]


def test_im2col_step_is_the_largest_divisor_of_the_batch_up_to_64():
    for batch in range(0, 200):
        step = hub_provider.im2col_step(batch)
        assert batch % step == 0 and step <= 64
        assert not any(batch % s == 0 for s in range(step + 1, min(batch, 64) + 1))


def test_the_level_start_index_is_each_levels_first_row():
    shapes = torch.tensor([[4, 5], [2, 3], [1, 1]])
    assert hub_provider.level_start_index(shapes).tolist() == [0, 20, 26]


def test_engaged_by_name_it_computes_the_slot_forward_and_backward(on_cpu):
    value, shapes, locations, weights = case_inputs()
    grad = torch.randn(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3])
    leaves = [t.detach().clone().requires_grad_() for t in (value, locations, weights)]
    out = maybe_ms_deform_attn(leaves[0], shapes, leaves[1], leaves[2])
    assert out is not None
    out.backward(grad)
    assert [kind for kind, _ in calls()] == ["forward", "backward"]
    assert all(value.shape[0] % step == 0 for _, step in calls())
    want, want_grads = portable_with_grads(value, shapes, locations, weights, grad)
    torch.testing.assert_close(out.detach(), want, rtol=1e-5, atol=1e-5)
    for got, expected in zip((leaf.grad for leaf in leaves), want_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_it_awaits_its_record_so_the_extra_alone_does_not_engage_it(on_cpu, monkeypatch):
    monkeypatch.delenv(settings.KERNELS)
    reason = decline_reason(SLOT, "hub")  # by name: its own checks pass
    assert reason is None
    from libreyolo.kernels import explain

    reasons = {impl.name: why for impl, why in explain(SLOT)}
    assert reasons["hub"].startswith("awaiting a green CUDA parity record")


def test_the_off_setting_takes_effect_on_the_next_call_without_loading(on_cpu, monkeypatch):
    value, shapes, locations, weights = case_inputs()
    monkeypatch.setenv(settings.HUB_KERNELS, "0")
    assert maybe_ms_deform_attn(value, shapes, locations, weights) is None
    assert hub_provider.kernel.cache_info().currsize == 0  # nothing loaded
    monkeypatch.setenv(settings.HUB_KERNELS, "1")
    assert maybe_ms_deform_attn(value, shapes, locations, weights) is not None
    assert [kind for kind, _ in calls()] == ["forward"]


def test_it_declines_what_the_compiled_op_is_not_taken_for(on_cpu):
    value, shapes, locations, weights = case_inputs()
    half = [t.half() for t in (value, locations, weights)]
    (impl,) = [i for i in registered("ms_deform_attn") if i.name == "hub"]
    assert "dtype float16 not in declared dtypes float32" in answer(
        impl, (half[0], shapes, half[1], half[2]))


def test_an_empty_input_gives_zeros_without_calling_the_op(on_cpu):
    """The compiled op's launch fails on zero queries (H200): sum over nothing is zeros."""
    value, shapes, locations, weights = case_inputs()
    leaves = [t.detach().clone().requires_grad_() for t in (value, locations[:, :0],
                                                            weights[:, :0])]
    out = maybe_ms_deform_attn(leaves[0], shapes, leaves[1], leaves[2])
    assert out.shape == (value.shape[0], 0, value.shape[2] * value.shape[3])
    out.sum().backward()
    assert torch.count_nonzero(leaves[0].grad) == 0
    assert calls() == []


# ONNX export is set as the dynamo exporter sets it: libreyolo.capture reads torch's flag itself
# (tests/registry/test_capture.py holds it to torch.onnx.is_in_onnx_export)
@pytest.mark.parametrize("check, flag", [
    ("torch.jit.is_tracing", lambda: True), ("torch.compiler.is_compiling", lambda: True),
    ("torch.compiler.is_exporting", lambda: True),
    ("torch.onnx._internal.exporter._flags._is_onnx_exporting", True)],
    ids=["tracing", "compiling", "exporting", "onnx-export"])
def test_it_declines_while_a_graph_is_captured(on_cpu, monkeypatch, check, flag):
    monkeypatch.setattr(check, flag)
    value, shapes, locations, weights = case_inputs()
    (impl,) = [i for i in registered("ms_deform_attn") if i.name == "hub"]
    assert "graph is being captured" in answer(impl, (value, shapes, locations, weights))
    assert hub_provider.kernel.cache_info().currsize == 0


def test_a_refused_kernel_is_disabled_once_with_one_warning_and_the_fallback_is_unchanged(
        on_cpu, monkeypatch):
    value, shapes, locations, weights = case_inputs()
    monkeypatch.setenv(settings.HUB_KERNELS, "0")
    assert maybe_ms_deform_attn(value, shapes, locations, weights) is None
    without_hub = ms_deform_attn_portable(value, shapes, locations, weights)
    monkeypatch.setenv(settings.HUB_KERNELS, "1")
    blob = (on_cpu.folder / "deformable_detr" / "__init__.py").resolve()
    blob.write_bytes(blob.read_bytes() + b"\n# changed\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [maybe_ms_deform_attn(value, shapes, locations, weights) for _ in range(3)]
    disabled = [w for w in caught if w.category is KernelDisabledWarning]
    assert len(disabled) == 1 and "HubKernelRefused" in str(disabled[0].message)
    assert results == [None, None, None]  # the caller's portable path runs
    assert torch.equal(ms_deform_attn_portable(value, shapes, locations, weights), without_hub)
    assert decline_reason(SLOT, "hub").startswith("disabled after a failure")


def test_a_direct_call_on_a_refused_kernel_raises_the_refusal(on_cpu):
    on_cpu.pin(revision="e" * 40)
    value, shapes, locations, weights = case_inputs()
    with pytest.raises(HubKernelRefused):
        hub_provider.ms_deform_attn_hub(value, shapes, locations, weights)


CHILD_GUARD = """
import socket, sys
def refuse(*args, **kwargs):
    print("SOCKET", args, file=sys.stderr); raise SystemExit(3)
class Refused(socket.socket):
    def __init__(self, *args, **kwargs): refuse(*args)
socket.socket, socket.create_connection = Refused, refuse
"""


def run_child(script: str, env: dict) -> subprocess.CompletedProcess:
    from conformance.evidence import provenance

    done = subprocess.run([sys.executable, "-c", CHILD_GUARD + textwrap.dedent(script)],
                          cwd=provenance.ROOT, capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "", **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_offline_from_a_fresh_process_the_stand_in_engages(hub):
    """HF_HUB_OFFLINE and HF_HUB_CACHE set before anything is imported, as on the GPU machine."""
    done = run_child(f"""
        from pathlib import Path
        import torch
        from libreyolo.kernels.hub import lock
        from libreyolo.kernels.attention.ms_deform_attn import hub_provider, maybe_ms_deform_attn
        lock.LOCK_FILE = Path({str(lock.LOCK_FILE)!r})
        hub_provider.DEVICE = "cpu"
        value = torch.randn(2, 6, 2, 4)
        locations, weights = torch.rand(2, 3, 2, 2, 2, 2), torch.rand(2, 3, 2, 2, 2)
        out = maybe_ms_deform_attn(value, [(2, 2), (1, 2)], locations, weights)
        print(out is not None, hub_provider.kernel().CALLS)
    """, {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(hub.cache),
          "LIBREYOLO_KERNELS": "ms_deform_attn=hub"})
    assert done.stdout.split("\n")[0] == "True [('forward', 2)]"


def test_the_registry_cli_and_predicates_never_import_the_kernels_package():
    done = run_child("""
        import sys
        from libreyolo.kernels import active, explain, registered
        from libreyolo.kernels.cli import main
        registered("ms_deform_attn"); active(); explain("ms_deform_attn")
        try:
            main(["--json"])
        except SystemExit:
            pass
        print("IMPORTED", sorted(m for m in ("kernels", "huggingface_hub") if m in sys.modules))
    """, {})
    assert "IMPORTED []" in done.stdout


def test_without_the_package_the_hub_implementation_says_why_and_stays_out():
    """A process where `kernels` cannot be found: the hub implementation is ineligible and says
    why, without a socket."""
    done = run_child("""
        import importlib.util
        find_spec = importlib.util.find_spec
        importlib.util.find_spec = lambda name, *args: (
            None if name.split(".")[0] == "kernels" else find_spec(name, *args))
        from libreyolo.kernels import explain
        print(dict((i.name, why) for i, why in explain("ms_deform_attn"))["hub"])
    """, {})
    assert "the kernels package is not installed" in done.stdout


def test_a_folder_named_kernels_on_the_path_is_not_the_package(tmp_path):
    """A project's (or a test tree's) own ``kernels`` folder imports as a namespace package; the
    hub implementation must not take it for the installed ``kernels`` distribution."""
    (tmp_path / "kernels").mkdir()
    done = run_child(f"""
        import importlib.metadata, importlib.util, sys
        def not_installed(name):
            if name == "kernels":
                raise importlib.metadata.PackageNotFoundError(name)
            return distribution(name)
        distribution = importlib.metadata.distribution
        importlib.metadata.distribution = not_installed
        sys.path.insert(0, {str(tmp_path)!r})
        assert importlib.util.find_spec("kernels") is not None  # the folder passes for it
        from libreyolo.kernels import explain
        print(dict((i.name, why) for i, why in explain("ms_deform_attn"))["hub"])
    """, {})
    assert "the kernels package is not installed" in done.stdout


def test_forcing_the_references_never_imports_the_hub_provider():
    done = run_child("""
        import sys, torch
        from libreyolo.kernels.attention.ms_deform_attn import maybe_ms_deform_attn
        out = maybe_ms_deform_attn(torch.randn(1, 4, 1, 2), [(2, 2)], torch.rand(1, 3, 1, 1, 2, 2),
                                   torch.rand(1, 3, 1, 1, 2))
        print(out, sorted(m for m in sys.modules if m.startswith("libreyolo.kernels.hub")
                          or m.endswith("hub_provider") or m in ("kernels", "huggingface_hub")))
    """, {"LIBREYOLO_KERNELS": "off"})
    assert done.stdout.strip() == "None []"

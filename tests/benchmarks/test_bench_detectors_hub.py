"""bench_detectors' Hub column (``--hub-build``) on CPU: a stand-in for the local build of
kernels-community's deformable-detr, in build_msda.py's layout, served through the real ``kernels``
package to ``kernelize`` (which maps a layer on device "cpu" as on "cuda"). What makes a Hub time
worth reading: the classic families' sites really run the Hub layer, a family without that layer
gets no column, a mode kernelize would not offer is said so, a wrong kernel is caught by the output
check, and a forward kernelize left stock is refused rather than timed as "hub"
(docs/detectors.md, "Speed")."""

from __future__ import annotations

import functools
import hashlib
import json
import sys
import types

import pytest

pytest.importorskip("transformers")
kernels = pytest.importorskip("kernels", reason="the hub-kernels extra is not installed")
constants = pytest.importorskip("huggingface_hub.constants")

from benchmarks.bench import bench_detectors  # noqa: E402
from conformance.evidence.hub_cache import local_revision, write_variant  # noqa: E402
from tests.integrations.detectors import FAMILIES, build, inputs  # noqa: E402

CLASSIC = [name for name, family in FAMILIES.items()
           if family.core.endswith(":MultiScaleDeformableAttention")]
PER_LEVEL_POINTS = [name for name in FAMILIES if name not in CLASSIC]

# The stand-in's layer: transformers' own classic core, run on the sampling locations that
# ``{locations}`` gives (``sampling_locations``: the same numbers; ``.flip(-1)``: x and y swapped,
# a kernel reading the wrong axis). It records each call, so a test sees it ran.
LAYERS = '''
from torch import nn
from transformers.models.deformable_detr.modeling_deformable_detr import (
    MultiScaleDeformableAttention as Stock)

CALLS = []


class MultiScaleDeformableAttention(nn.Module):
{declares}
    def forward(self, value, value_spatial_shapes, value_spatial_shapes_list, level_start_index,
                sampling_locations, attention_weights, im2col_step):
        CALLS.append(tuple(value.shape))
        return Stock.forward(self, value, value_spatial_shapes, value_spatial_shapes_list,
                             level_start_index, {locations}, attention_weights, im2col_step)
'''


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Nothing of these tests may reach the Hub."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


def stand_in(out, locations="sampling_locations", declares=""):
    """build_msda.py's OUT folder holding the stand-in (``hf-cache/.../snapshots/<rev>/build/``,
    a noarch variant): returns ``out``. Its module name is unique to ``out`` (kernels imports it
    under that name)."""
    module = "_msda_stand_in_" + hashlib.sha1(str(out).encode()).hexdigest()[:12]
    metadata = {"id": module, "name": "deformable-detr", "version": 1, "license": "Apache-2.0",
                "python-depends": [], "backend": {"type": "cpu"}}
    body = "\n".join(f"    {line}" for line in declares.splitlines()) or "    pass"
    files = {"metadata.json": json.dumps(metadata).encode(),
             "deformable_detr/__init__.py": b"from . import layers  # noqa: F401\n",
             "deformable_detr/layers.py": LAYERS.format(declares=body + "\n",
                                                        locations=locations).encode()}
    write_variant(out / "hf-cache", "kernels-community/deformable-detr",
                  local_revision(files, "bench stand-in"), "torch-universal", files)
    return out


def calls(out):
    """The calls the stand-in built into ``out`` has run."""
    module = "_msda_stand_in_" + hashlib.sha1(str(out).encode()).hexdigest()[:12]
    return sys.modules[f"{module}.layers"].CALLS


def hub_copy(name, out, mode="eager-infer"):
    """The bench's hub copy of family ``name``'s small model, from the stand-in in ``out``."""
    model, arguments = build(FAMILIES[name])
    repository = bench_detectors.hub_build_folder(str(out))
    return model, arguments, *bench_detectors.hub_copy(
        model, FAMILIES[name], mode, "fp32", arguments, repository, device="cpu")


def test_the_option_takes_the_build_folder_or_its_snapshot(tmp_path, capsys):
    out = stand_in(tmp_path / "out")
    snapshot = bench_detectors.hub_build_folder(str(out))
    assert (snapshot / "build" / "torch-universal" / "metadata.json").is_file()
    assert bench_detectors.hub_build_folder(str(snapshot)) == snapshot
    with pytest.raises(SystemExit):
        bench_detectors.main([str(tmp_path / "x.json"), "--hub-build", str(tmp_path)])
    error = capsys.readouterr().err
    assert "argument --hub-build: expected build_msda.py's OUT folder" in error, error


@pytest.mark.parametrize("name", CLASSIC)
def test_every_classic_site_runs_the_hub_layer(name, tmp_path):
    out = stand_in(tmp_path)
    classes = {type(module) for module in build(FAMILIES[name])[0].modules()
               if type(module).__name__ == "MultiScaleDeformableAttention"}
    marked = {cls: hasattr(cls, "kernel_layer_name") for cls in classes}
    model, arguments, hub, fields = hub_copy(name, out)
    assert fields["hub"] == "timed" and fields["hub_sites"] == FAMILIES[name].sites, fields
    assert fields["hub_max_abs_logits_diff"] == 0.0, fields  # the same core, the same numbers
    before = len(calls(out))
    hub(**arguments)
    assert len(calls(out)) - before == FAMILIES[name].sites
    # the stock model, and transformers' classes, are as they were
    assert not any("forward" in vars(module) for module in model.modules())
    assert {cls: hasattr(cls, "kernel_layer_name") for cls in classes} == marked


@pytest.mark.parametrize("name", PER_LEVEL_POINTS)
def test_a_family_without_the_mapped_layer_gets_no_hub_column(name, tmp_path):
    with pytest.raises(bench_detectors.HubNotTimed, match="^no Hub kernel: its sites call "
                       "multi_scale_deformable_attention_v2, which no kernel mapping names$"):
        hub_copy(name, stand_in(tmp_path))


@pytest.mark.parametrize("name", ["rt_detr", "deformable_detr"])
def test_a_wrong_kernel_is_caught_by_the_output_check(name, tmp_path):
    out = stand_in(tmp_path, locations="sampling_locations.flip(-1)")
    with pytest.raises(bench_detectors.HubNotTimed, match="^refused: its logits differ"):
        hub_copy(name, out)
    assert calls(out), "the wrong kernel did run: the output check, not the wiring, caught it"


def test_a_forward_kernelize_left_stock_is_refused(tmp_path, monkeypatch):
    # DISABLE_KERNEL_MAPPING=1 makes kernelize keep every stock forward, silently
    monkeypatch.setattr(kernels.layer.layer, "_DISABLE_KERNEL_MAPPING", True)
    out = stand_in(tmp_path)
    with pytest.raises(bench_detectors.HubNotTimed,
                       match="^refused: kernelize left 2 of 2 sites' forward not the Hub"):
        hub_copy("rt_detr", out)
    assert not calls(out)


@pytest.mark.parametrize("declares, mode, verdict", [
    ("", "eager-train", None),
    ("has_backward = False", "eager-train", "Mode.TRAINING (the layer declares has_backward=False"),
    ("", "compiled", "Mode.INFERENCE|TORCH_COMPILE (the layer declares has_backward=True, "
                     "can_torch_compile=False)"),
    ("", "compiled-ro", "Mode.INFERENCE|TORCH_COMPILE"),
    ("", "compiled-train", "Mode.TRAINING|TORCH_COMPILE"),
    ("can_torch_compile = True", "compiled", None),
], ids=["train", "train-no-backward", "compiled", "compiled-ro", "compiled-train",
        "compiled-declared"])
def test_a_mode_is_offered_only_where_the_layer_declares_it(declares, mode, verdict, tmp_path):
    out = stand_in(tmp_path, declares=declares)
    if verdict is None:
        _, _, _, fields = hub_copy("rt_detr", out, mode)
        assert fields["hub"] == "timed", fields
        return
    with pytest.raises(bench_detectors.HubNotTimed) as refusal:
        hub_copy("rt_detr", out, mode)
    assert str(refusal.value).startswith(
        "not offered: kernelize: Available kernel does not support mode: "), refusal.value
    assert verdict in str(refusal.value), refusal.value


ROW = {"family": "rt_detr", "mode": "eager-infer", "batch": 1, "dtype": "fp32", "stock_ms": 10.0,
       "ours_ms": 8.0, "speedup": 1.25, "spread": [1.2, 1.3]}


def test_the_table_gains_the_hub_columns_only_with_the_option():
    timed = ROW | {"hub": "timed", "hub_ms": 9.0, "stock_over_hub": 1.11,
                   "stock_over_hub_spread": [1.05, 1.2], "hub_over_ours": 1.12,
                   "hub_over_ours_spread": [1.1, 1.15]}
    served = bench_detectors.table([timed, ROW | {"hub": "no Hub kernel: its sites call v2"}])
    header, rule, *rows = served.splitlines()
    assert header.endswith("| verdict | hub ms | stock/hub (spread) | hub/ours (spread) |")
    assert rule == "|" + "---|" * 16
    assert rows[0].endswith("| faster | 9.00 | 1.11x (1.05-1.20) | 1.12x (1.10-1.15) |")
    assert rows[1].endswith("| faster | no Hub kernel: its sites call v2 | | |")
    plain = bench_detectors.table([ROW]).splitlines()
    assert plain[0].endswith("| verdict |") and plain[1] == "|" + "---|" * 13


def test_the_ratios_are_the_median_of_the_rounds():
    times = {"stock": [10.0, 12.0, 9.0], "hub": [5.0, 4.0, 4.5]}
    assert bench_detectors.round_ratios(times, "stock", "hub") == (2.0, [2.0, 3.0])



@pytest.fixture
def cpu_rows(monkeypatch):
    """measure_row on CPU: the small families, their inputs on CPU, the Hub layer mapped on
    "cpu", and rounds that record which steps took turns (stock 10 ms, ours 8, hub 9)."""
    monkeypatch.setattr(bench_detectors, "DETECTOR_FAMILIES", FAMILIES)
    monkeypatch.setattr(bench_detectors, "inputs", lambda family, batch, device, seed:
                        inputs(family, batch, "cpu", seed))
    monkeypatch.setattr(bench_detectors, "hub_copy",
                        functools.partial(bench_detectors.hub_copy, device="cpu"))
    turns = []

    def interleaved_ms(steps, rounds, iters, warmup):
        turns.append(list(steps))
        return {name: [{"stock": 10.0, "ours": 8.0, "hub": 9.0}[name]] * rounds
                for name in steps}

    monkeypatch.setattr(bench_detectors, "interleaved_ms", interleaved_ms)

    def row(name, hub_build, mode="eager-infer"):
        args = types.SimpleNamespace(hub_build=hub_build, rounds=3, iters=1, warmup=0,
                                     profile=False)
        model, _ = build(FAMILIES[name])
        return bench_detectors.measure_row(model, name, mode, 1, "fp32", args), turns
    return row


def test_the_hub_copy_takes_its_turn_in_the_same_rounds(cpu_rows, tmp_path):
    row, turns = cpu_rows("rt_detr", bench_detectors.hub_build_folder(str(stand_in(tmp_path))))
    assert turns == [["stock", "ours", "hub"]]
    assert row["hub"] == "timed" and row["hub_ms"] == 9.0, row
    assert row["stock_over_hub"] == pytest.approx(10 / 9) and row["hub_over_ours"] == 9 / 8


@pytest.mark.parametrize("name, layers, verdict", [
    ("d_fine", None, "no Hub kernel: "),
    ("rt_detr", "raise ImportError('no such op')", "failed: ImportError: no such op"),
], ids=["no-hub-kernel", "failed"])
def test_a_row_the_hub_kernel_does_not_serve_still_times_stock_and_ours(
        cpu_rows, tmp_path, name, layers, verdict):
    out = stand_in(tmp_path)
    if layers is not None:
        for path in out.rglob("layers.py"):
            path.resolve().write_text(layers)
    row, turns = cpu_rows(name, bench_detectors.hub_build_folder(str(out)))
    assert turns == [["stock", "ours"]]
    assert row["hub"].startswith(verdict), row
    assert row["speedup"] == 10 / 8 and "hub_ms" not in row, row


def test_without_the_option_a_row_has_no_hub_field(cpu_rows):
    row, turns = cpu_rows("rt_detr", None)
    assert turns == [["stock", "ours"]]
    assert not [key for key in row if key.startswith("hub")], row

"""Checkpoints of a quantized model at each stage (prepared, calibrated, finalized): a fresh float
model loads them and computes the same bits; a finalized one loads and runs in a process where
triton cannot be imported, no GPU is visible and the kernels are off."""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import safetensors.torch
import torch

from libreyolo.nn.finalized import FinalizedConv2d, FinalizedLinear
from libreyolo.nn.quantized import (
    QuantConv2d,
    QuantLinear,
    calibrate,
    convert,
    describe,
    load,
    prepare,
    restore,
    save,
)

from .quantized_cases import RECIPES_32, assert_same_bits, inputs, mixed, prepared

ROOT = Path(__file__).resolve().parents[2]


def _out(model, x):
    with torch.no_grad():
        return model(x)


def test_a_prepared_checkpoint_loads_uncalibrated(tmp_path):
    model = prepared("w8a8_int8", calibrated=False)
    save(model, tmp_path / "prepared.safetensors")
    fresh = load(mixed(seed=3), tmp_path / "prepared.safetensors")
    assert isinstance(fresh.conv, QuantConv2d) and not fresh.conv.calibrated
    assert math.isnan(fresh.head.input_scale.item())
    assert torch.equal(fresh.conv.weight, model.conv.weight)
    calibrate(fresh, inputs(2, seed=7), progress=False)  # it calibrates as the original would
    calibrate(model, inputs(2, seed=7), progress=False)
    x = inputs(1, seed=9)[0]
    assert_same_bits(_out(fresh, x), _out(model, x))


@pytest.mark.parametrize("recipe", ["w8a8_int8", "fp8_static", "w4a16", "nvfp4"])
def test_a_calibrated_checkpoint_computes_the_same_bits(recipe, tmp_path):
    model = prepared(recipe)
    save(model, tmp_path / "calibrated.safetensors")
    fresh = load(mixed(seed=3), tmp_path / "calibrated.safetensors")
    assert fresh.head.recipe == model.head.recipe and fresh.head.calibrated
    if model.head.recipe.static:
        assert fresh.head._zero_point == model.head._zero_point
    x = inputs(1, seed=9)[0]
    assert_same_bits(_out(fresh, x), _out(model, x))


@pytest.mark.parametrize("recipe", RECIPES_32)
def test_a_finalized_checkpoint_computes_the_same_bits(recipe, tmp_path):
    model = prepared(recipe)
    convert(model)
    save(model, tmp_path / "finalized.safetensors")
    fresh = load(mixed(seed=3), tmp_path / "finalized.safetensors")
    assert isinstance(fresh.attn.qkv, FinalizedLinear)
    assert isinstance(fresh.grouped, FinalizedConv2d)
    assert fresh.grouped.weight_format == RECIPES_32[recipe].weight
    x = inputs(1, seed=9)[0]
    assert_same_bits(_out(fresh, x), _out(model, x))


def test_describe_and_restore_serve_any_container(tmp_path):
    model = prepared("fp8_static")  # calibrated, not finalized
    buffer = io.BytesIO()
    torch.save({"state": model.state_dict(), "quantized": describe(model)}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    fresh = restore(mixed(seed=3), saved["quantized"])
    fresh.load_state_dict(saved["state"])
    x = inputs(1, seed=9)[0]
    assert_same_bits(_out(fresh, x), _out(model, x))


def test_a_partly_prepared_model_records_its_skips():
    model = mixed()
    prepare(model, "mxfp8", skip=["attn"])
    description = describe(model)
    assert "attn.qkv" not in description["layers"]
    fresh = restore(mixed(), json.loads(json.dumps(description)))
    assert type(fresh.attn.qkv) is torch.nn.Linear and isinstance(fresh.head, QuantLinear)


def test_a_checkpoint_that_does_not_fit_the_model_changes_nothing(tmp_path):
    model = prepared("mxfp8")
    save(model, tmp_path / "c.safetensors")
    other = torch.nn.Sequential(torch.nn.Linear(64, 10))
    with pytest.raises(ValueError, match=r"^the checkpoint does not fit this model; nothing was "
                                         r"changed:\n  'conv': the checkpoint has a conv2d here, "
                                         r"the model nothing"):
        load(other, tmp_path / "c.safetensors")
    assert type(other[0]) is torch.nn.Linear


def test_a_plain_safetensors_file_is_refused(tmp_path):
    safetensors.torch.save_file({"w": torch.zeros(2)}, tmp_path / "plain.safetensors")
    with pytest.raises(ValueError, match="was not written by libreyolo.nn.quantized.save"):
        load(mixed(), tmp_path / "plain.safetensors")


CHILD = textwrap.dedent(
    """
    import sys


    class NoTriton:  # `import triton` fails, as where it is not installed
        def find_spec(self, name, path=None, target=None):
            if name == "triton" or name.startswith("triton."):
                raise ModuleNotFoundError(f"No module named {name!r}")


    sys.meta_path.insert(0, NoTriton())
    import json
    import safetensors.torch
    import torch
    from libreyolo.nn.quantized import load
    from tests.nn.quantized_cases import inputs, mixed

    folder, recipes = sys.argv[1], sys.argv[3].split(",")
    torch.set_num_threads(int(sys.argv[2]))  # the CPU convolution's algorithm follows it
    for recipe in recipes:
        model = load(mixed(seed=3), f"{folder}/{recipe}.safetensors")
        with torch.no_grad():
            out = model(inputs(1, seed=9)[0])
        safetensors.torch.save_file({"y": out}, f"{folder}/{recipe}.out.safetensors")
    print(json.dumps({"cuda": torch.cuda.is_available(), "triton": "triton" in sys.modules}))
    """
)


def test_a_finalized_checkpoint_loads_and_runs_without_triton_or_cuda(tmp_path):
    expected = {}
    for recipe in RECIPES_32:
        model = prepared(recipe)
        convert(model)
        save(model, tmp_path / f"{recipe}.safetensors")
        expected[recipe] = _out(model, inputs(1, seed=9)[0])
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "",
           "LIBREYOLO_KERNELS": "off"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path),
                           str(torch.get_num_threads()), ",".join(RECIPES_32)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"cuda": False, "triton": False}
    for recipe, want in expected.items():
        got = safetensors.torch.load_file(tmp_path / f"{recipe}.out.safetensors")["y"]
        assert_same_bits(got, want)

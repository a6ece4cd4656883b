"""A finalized checkpoint loads and runs with neither triton nor CUDA.

Every format's layer is saved here as safetensors; a fresh interpreter where ``import triton``
fails (as when it is not installed) and no CUDA device is visible builds empty layers, loads the
files and runs them. Its outputs must be this process's bits, and it must never have imported
triton.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import safetensors.torch
import torch

from .finalized_cases import FORMATS, LAYERS, finalize

ROOT = Path(__file__).resolve().parents[2]
CHILD = textwrap.dedent(
    """
    import sys
    sys.modules["triton"] = None  # how an absent package looks to importers
    import json
    import safetensors.torch
    import torch
    from tests.nn.finalized_cases import FORMATS, LAYERS

    folder = sys.argv[1]
    torch.set_num_threads(int(sys.argv[2]))  # the CPU convolution's algorithm follows it
    seen = {"cuda": torch.cuda.is_available()}
    for fmt, spec in FORMATS.items():
        for name, layer in LAYERS.items():
            fresh = layer.finalized_class(
                layer.in_, layer.out, *(() if layer.kind == "linear" else (
                    layer.kernel, layer.stride, layer.padding, layer.dilation, layer.groups)),
                bias=layer.bias, weight=spec.weight, activation=spec.activation,
                bits=spec.bits, group_size=spec.group_size)
            fresh.load_state_dict(safetensors.torch.load_file(f"{folder}/{fmt}-{name}.st"))
            with torch.no_grad():
                out = fresh(layer.x())
            safetensors.torch.save_file({"y": out}, f"{folder}/{fmt}-{name}.out.st")
    seen["triton"] = "triton" in sys.modules and sys.modules["triton"] is not None
    print(json.dumps(seen))
    """
)


def test_a_checkpoint_loads_and_runs_without_triton_or_cuda(tmp_path):
    expected = {}
    for fmt, spec in FORMATS.items():
        for name, layer in LAYERS.items():
            _, finalized = finalize(spec, layer)
            safetensors.torch.save_file(finalized.state_dict(), tmp_path / f"{fmt}-{name}.st")
            with torch.no_grad():
                expected[f"{fmt}-{name}"] = finalized(layer.x())
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path),
                           str(torch.get_num_threads())], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"cuda": False, "triton": False}
    for key, want in expected.items():
        got = safetensors.torch.load_file(tmp_path / f"{key}.out.st")["y"]
        assert torch.equal(got.view(torch.int32), want.view(torch.int32)), key

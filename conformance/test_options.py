"""The suite's options fail clearly: no CUDA for --gpu, an unknown --impl, --record off GPU."""

import subprocess
import sys

import pytest
import torch

from conformance.outcomes import plugin_args


def collect(config, *options) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "pytest", "conformance/test_matrix.py", "--collect-only",
               "-q", "-p", "no:cacheprovider", *options, *plugin_args(config)]
    return subprocess.run(command, cwd=config.rootpath, capture_output=True, text=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_gpu_without_cuda_is_a_usage_error(request, whole_suite):
    result = collect(request.config, "--gpu")
    assert result.returncode == 4 and "--gpu: no CUDA device is available" in result.stderr


def test_an_unknown_impl_lists_the_registered_names(request, whole_suite):
    result = collect(request.config, "--impl", "no-such-backend")
    assert result.returncode == 4
    assert "no implementation is registered under 'no-such-backend'" in result.stderr
    assert "reference" in result.stderr


def test_record_needs_the_gpu(request, whole_suite):
    result = collect(request.config, "--record")
    assert result.returncode == 4 and "--record needs --gpu" in result.stderr

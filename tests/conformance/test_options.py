"""The suite's options fail clearly: no CUDA for --gpu, an unknown --impl or --slot, --record
off GPU; --slot restricts the matrix."""

import subprocess

import pytest
import torch

from conformance.running.child import run_pytest
from conformance.running.outcomes import plugin_args


def collect(config, *options) -> subprocess.CompletedProcess:
    return run_pytest(config.rootpath, "conformance/test_matrix.py", "--collect-only", "-q",
                      *options, *plugin_args(config))


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


def test_slot_restricts_the_matrix_to_the_named_slots(request, whole_suite):
    result = collect(request.config, "--slot", "fake_quant_fp8,ms_deform_attn")
    assert result.returncode == 0, result.stderr
    cells = [line for line in result.stdout.splitlines() if "test_cell[" in line]
    assert cells and {c.split("[")[1].split(":")[0] for c in cells} == {
        "fake_quant_fp8", "ms_deform_attn"}


def test_an_unknown_slot_lists_the_catalogued_ones(request, whole_suite):
    result = collect(request.config, "--slot", "fake_quant_fp9")
    assert result.returncode == 4
    assert "--slot: unknown slot(s) ['fake_quant_fp9']" in result.stderr
    assert "fake_quant_fp8" in result.stderr

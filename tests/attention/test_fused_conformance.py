"""The fused path of every flag family's call sites meets the bounded contract against its manual
path, and the contract rejects every broken SDPA (``fused_parity.CONTROLS``).

On CPU the sites run at the evidence sizes (``evidence.limited``) in float32 and bfloat16; on a
CUDA machine (marker ``gpu``, skipped without a device) they also run at their real sizes in
float32, float16 and bfloat16.
"""

from __future__ import annotations

import pytest
import torch

from conformance.reporting.attention_evidence import limited
from libreyolo.kernels.attention import families
from libreyolo.nn import attention as nn_attention

from .fused_parity import CONTROLS, bounded_check, oracle

SITES = families.sites()
CPU_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
CUDA_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
CONTROL_CASES = [pytest.param(site, fn, why, id=f"{name}-{site.id}")
                 for name, fn, applies, why in CONTROLS for site in SITES if applies(site)]

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="module")
def cpu_oracles():
    return {}


def cpu_oracle(cache, site):
    if site.id not in cache:
        cache[site.id] = oracle(limited(site), "cpu")
    return cache[site.id]


@pytest.mark.parametrize("dtype", CPU_DTYPES.values(), ids=CPU_DTYPES.keys())
@pytest.mark.parametrize("site", SITES, ids=lambda s: s.id)
def test_fused_path_meets_the_bounded_contract_on_cpu(site, dtype, cpu_oracles):
    verdict = bounded_check(limited(site), dtype, "cpu", cpu_oracle(cpu_oracles, site))
    assert verdict.passed, str(verdict)


@pytest.mark.parametrize(("site", "broken", "why"), CONTROL_CASES)
def test_every_broken_sdpa_is_rejected_on_cpu(site, broken, why, monkeypatch, cpu_oracles):
    expected = cpu_oracle(cpu_oracles, site)
    monkeypatch.setattr(nn_attention, "sdpa", broken)
    verdict = bounded_check(limited(site), torch.float32, "cpu", expected)
    assert not verdict.passed, f"{why}; yet {verdict}"


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("dtype", CUDA_DTYPES.values(), ids=CUDA_DTYPES.keys())
@pytest.mark.parametrize("site", SITES, ids=lambda s: s.id)
def test_fused_path_meets_the_bounded_contract_on_cuda(site, dtype):
    verdict = bounded_check(site, dtype, "cuda", oracle(site, "cuda"))
    assert verdict.passed, str(verdict)


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize(("site", "broken", "why"), CONTROL_CASES)
def test_every_broken_sdpa_is_rejected_on_cuda(site, broken, why, monkeypatch):
    expected = oracle(site, "cuda")
    monkeypatch.setattr(nn_attention, "sdpa", broken)
    verdict = bounded_check(site, torch.float16, "cuda", expected)
    assert not verdict.passed, f"{why}; yet {verdict}"

"""fp8_linear's engage decision (no kernel runs here: CPU tensors always get None)."""

import functools
import tomllib
from pathlib import Path

import pytest
import torch

from libreyolo.kernels.quant.execute import fp8_linear as module
from libreyolo.kernels.quant.execute.fp8_linear import engages, fp8_linear, fused_fp8_linear

CASES = tomllib.loads((Path(__file__).with_name("fp8_policy_cases.toml")).read_text())


@pytest.fixture
def policy_file(tmp_path, monkeypatch):
    def write(text):
        path = tmp_path / "policy.toml"
        path.write_text(text)
        monkeypatch.setattr(module, "POLICY_FILE", path)
        module.reload_policy()

    yield write
    module.reload_policy()


def test_cpu_activations_always_take_the_callers_path():
    x = torch.randn(4, 32, dtype=torch.bfloat16)
    weight = torch.zeros((16, 32), dtype=torch.float8_e4m3fn)
    assert fp8_linear(x, weight, torch.ones(16)) is None


def test_a_region_covers_its_m_from_its_minimum_and_exactly_its_n_and_k(policy_file):
    policy_file('[[device]]\nname = "H200"\n[[device.region]]\nmin_m = 8192\nmin_n = 256\n'
                "max_n = 256\nmin_k = 1024\nmax_k = 1024\n")
    assert engages("NVIDIA H200", 8192, 256, 1024) and engages("NVIDIA H200", 65536, 256, 1024)
    assert not engages("NVIDIA H200", 8191, 256, 1024)
    assert not engages("NVIDIA H200", 8192, 512, 1024)
    assert not engages("NVIDIA H200", 8192, 256, 512)


@pytest.mark.parametrize("text", ["", '[[device]]\nname = "H200"\n'])
def test_an_empty_policy_and_a_device_without_regions_never_engage(policy_file, text):
    policy_file(text)
    assert not engages("NVIDIA H200", 1 << 20, 4096, 4096)


def test_a_reloaded_policy_is_asked_again_which_regions_a_device_has(policy_file, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA H100 80GB HBM3")
    region = "[[device.region]]\nmin_m = 1\n"
    policy_file(f'[[device]]\nname = "H200"\n{region}')
    assert module._device_regions(0) == ()
    policy_file(f'[[device]]\nname = "NVIDIA H100 80GB HBM3"\n{region}')
    assert module._device_regions(0) == ({"min_m": 1},)


@pytest.mark.parametrize("case", CASES["engage"],
                         ids=lambda c: f"{c['device']}-{c['m']}x{c['shapes']}")
def test_the_shipped_policy_engages_each_device_where_it_was_measured_faster(monkeypatch, case):
    """Through the path a CUDA call takes (``_answer``, the device's name as torch gives it):
    each card gets its own regions; a card no entry names (an H100 PCIe or NVL is not the
    measured H100 80GB HBM3) gets none."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: case["device"])
    module.reload_policy()
    try:
        assert module._answer(0, case["m"], tuple(map(tuple, case["shapes"]))) is case["engages"]
    finally:
        monkeypatch.undo()
        module.reload_policy()


@pytest.mark.parametrize("case", CASES["malformed"], ids=lambda c: c["id"])
def test_a_malformed_policy_is_refused_when_read_naming_the_file_and_the_fault(policy_file,
                                                                               case):
    with pytest.raises(ValueError) as refused:
        policy_file(case["policy"])
        module.policy()
    assert str(module.POLICY_FILE) in str(refused.value)
    assert case["error"] in str(refused.value)


def test_an_unknown_activation_is_refused_naming_it():
    x = torch.randn(4, 32, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="activation"):
        fused_fp8_linear(x, torch.zeros((16, 32), dtype=torch.float8_e4m3fn), torch.ones(16),
                         activation="tanh")


def test_what_is_made_of_a_layers_tensor_is_kept_until_it_changes_in_place_or_goes():
    made = []

    def cast(t):
        made.append(t)
        return t.to(torch.bfloat16)

    bias = torch.randn(8)
    first = module._made_once(bias, torch.bfloat16, cast)
    assert module._made_once(bias, torch.bfloat16, cast) is first and len(made) == 1
    bias.add_(1)
    again = module._made_once(bias, torch.bfloat16, cast)
    assert len(made) == 2 and torch.equal(again, bias.to(torch.bfloat16))
    key = (id(bias), torch.bfloat16)
    del bias, made[:]
    assert key not in module._kept


def test_an_inference_tensor_is_made_again_on_every_call():
    """It has no version counter, so nothing could tell a kept copy is stale."""
    with torch.inference_mode():
        bias = torch.randn(8)
    made = []
    for _ in range(2):
        module._made_once(bias, torch.bfloat16, lambda t: made.append(t) or t.to(torch.bfloat16))
    assert len(made) == 2 and (id(bias), torch.bfloat16) not in module._kept


def test_prologue_plans_of_one_description_share_one_place_for_their_launches():
    from libreyolo.kernels.quant.execute.fp8_plan import (
        plan_fp8_cast_dynamic,
        plan_fp8_cast_static,
    )

    x = torch.randn(8, 32, dtype=torch.bfloat16)
    first = plan_fp8_cast_dynamic(x)
    assert plan_fp8_cast_dynamic(torch.randn(8, 32, dtype=torch.bfloat16)).launches \
        is first.launches  # another tensor, described alike: the launches made for it
    for other in (plan_fp8_cast_dynamic(torch.randn(32, 8, dtype=torch.bfloat16).t()),  # strides
                  plan_fp8_cast_dynamic(torch.randn(16, 32, dtype=torch.bfloat16)),  # shape
                  plan_fp8_cast_dynamic(x.half()),  # dtype
                  plan_fp8_cast_static(x, torch.tensor(0.5))):  # a static scale
        assert other.launches is not first.launches


def test_the_policys_answer_is_a_constant_of_a_compiled_graph(monkeypatch):
    """Dynamo calls ``_engages_on`` while tracing instead of tracing it: the device's name (here
    the policy file's read stands in for it) is nothing a graph can hold, and a full graph must
    compile."""
    monkeypatch.setattr(module, "_device_regions", functools.cache(
        lambda index: module.regions_of("NVIDIA H200")))
    module.reload_policy()
    shapes = ((4096, 1024),)

    def engaged(x):
        return x + int(module._engages_on(0, 16384, shapes))

    try:
        compiled = torch.compile(engaged, fullgraph=True, backend="eager")
        assert torch.equal(compiled(torch.zeros(2)), engaged(torch.zeros(2)))
    finally:
        module.reload_policy()

"""fp8_linear's engage decision (no kernel runs here: CPU tensors always get None)."""

import functools

import pytest
import torch

from libreyolo.kernels.quant.execute import fp8_linear as module
from libreyolo.kernels.quant.execute.fp8_linear import engages, fp8_linear, fused_fp8_linear


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
    policy_file('devices = ["H200"]\n[[region]]\nmin_m = 8192\nmin_n = 256\nmax_n = 256\n'
                "min_k = 1024\nmax_k = 1024\n")
    assert engages(8192, 256, 1024) and engages(65536, 256, 1024)
    assert not engages(8191, 256, 1024)
    assert not engages(8192, 512, 1024) and not engages(8192, 256, 512)


def test_an_empty_policy_never_engages(policy_file):
    policy_file("devices = []\nregion = []\n")
    assert not engages(1 << 20, 4096, 4096)


def test_a_reloaded_policy_is_asked_again_which_devices_it_lists(policy_file, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: "NVIDIA H100 80GB HBM3")
    policy_file('devices = ["H200"]\nregion = []\n')
    assert not module._measured_device(0)
    policy_file('devices = ["NVIDIA H100 80GB HBM3"]\nregion = []\n')
    assert module._measured_device(0)


def test_the_shipped_policy_has_well_formed_regions():
    module.reload_policy()
    table = module.policy()
    assert isinstance(table["devices"], list)
    for region in table["region"]:
        assert set(region) <= {f"{b}_{d}" for b in ("min", "max") for d in "mnk"}


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
    a file read standing in for it) is nothing a graph can hold, and a full graph must compile."""
    from pathlib import Path

    monkeypatch.setattr(module, "_measured_device", functools.cache(
        lambda index: "[[region]]" in Path(module.POLICY_FILE).read_text()))
    module.reload_policy()
    shapes = ((4096, 1024),)

    def engaged(x):
        return x + int(module._engages_on(0, 16384, shapes))

    try:
        compiled = torch.compile(engaged, fullgraph=True, backend="eager")
        assert torch.equal(compiled(torch.zeros(2)), engaged(torch.zeros(2)))
    finally:
        module.reload_policy()

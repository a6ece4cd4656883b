"""The tests run torch.compile without its on-disk caches (the root conftest's
``COMPILE_CACHES``): those key a graph by its ops' names, so a compiled test of an operator whose
fake kernel or autograd changed could be handed an earlier process's graph and pass stale
(pytorch/pytorch#144344; benchmarks/NOTES.md). Child processes inherit the setting."""

import os

import torch._functorch.config as functorch_config
import torch._inductor.config as inductor_config


def test_the_compile_caches_are_off_in_the_tests_and_their_children():
    assert inductor_config.fx_graph_cache is False
    assert functorch_config.enable_autograd_cache is False
    assert os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] == "0"
    assert os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] == "0"

"""Models and inputs for the quantized-module tests (``test_quantized_*.py``).

``Mixed`` holds every layer geometry the finalized tests check (a 3x3 convolution, a strided one
without bias, a 1x1, a dilated grouped ``"same"`` one, a Linear on (B, N, C) tokens) and an
attention block whose projections are ``nn.Linear`` children, with input dims that are multiples
of 32, so every recipe takes every layer (``RECIPES_32``: w4a16 with groups of 32). Weights of a
few magnitudes, so blocks and channels get different scales.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from libreyolo.nn import QKVAttention
from libreyolo.nn.quantized import RECIPES, calibrate, prepare

#: Every recipe, w4a16 with groups of 32 (the test models' input dims are multiples of 32).
RECIPES_32 = {name: (r.replace(group_size=32) if name == "w4a16" else r)
              for name, r in RECIPES.items()}


class Mixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(32, 64, 3, padding=1)
        self.down = nn.Conv2d(64, 64, 3, stride=2, padding=1, bias=False)
        self.point = nn.Conv2d(64, 64, 1)
        self.grouped = nn.Conv2d(64, 64, (2, 3), dilation=(2, 1), padding="same", groups=2)
        self.attn = QKVAttention(64, 4)
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        x = torch.relu(self.down(x))
        x = self.grouped(torch.relu(self.point(x))) + x
        tokens = x.flatten(2).transpose(1, 2)  # (B, N, C)
        tokens = tokens + self.attn(tokens)
        return self.head(tokens)


def mixed(seed: int = 0) -> Mixed:
    torch.manual_seed(seed)
    model = Mixed()
    generator = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(torch.exp2(torch.randint(-2, 2, p.shape, generator=generator).float()))
    return model.eval()


def inputs(n: int = 3, seed: int = 1, shape=(2, 32, 6, 5), dtype=torch.float32, device="cpu"):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(shape, generator=generator) *
             torch.exp2(torch.randint(-3, 3, shape, generator=generator))).to(dtype=dtype,
                                                                             device=device)
            for _ in range(n)]


def prepared(recipe, seed: int = 0, calibrated: bool = True, device="cpu"):
    """A ``Mixed`` model prepared with ``recipe`` (a name of RECIPES_32 or a Recipe), calibrated on
    two batches unless told otherwise."""
    model = mixed(seed).to(device)
    recipe = RECIPES_32.get(recipe, recipe)
    prepare(model, recipe)
    if calibrated:
        calibrate(model, inputs(2, seed=7, device=device), progress=False)
    return model


def copy_model(model):
    return copy.deepcopy(model)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({4: torch.int32, 2: torch.int16}[t.element_size()])


def assert_same_bits(actual, expected):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    differ = bits(actual) != bits(expected)
    assert not differ.any(), f"{int(differ.sum())} of {differ.numel()} elements differ"

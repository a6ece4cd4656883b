"""MSDeformAttn the way exported models hold it: level sizes fixed at export time."""

import torch
from torch import nn

from libreyolo.nn import MSDeformAttn

LEVELS = [(6, 8), (3, 4)]
D_MODEL, HEADS, POINTS = 32, 4, 3


class WithStaticShapes(nn.Module):
    """The level sizes are Python ints, so exported graphs have static splits and reshapes."""

    def __init__(self, levels=LEVELS):
        super().__init__()
        self.levels = [tuple(level) for level in levels]
        self.attn = MSDeformAttn(D_MODEL, len(levels), HEADS, POINTS)

    def forward(self, query, reference_points, value):
        return self.attn(query, reference_points, value, self.levels)


def example_inputs(batch=2, len_q=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    len_in = sum(h * w for h, w in LEVELS)
    return (torch.randn(batch, len_q, D_MODEL, generator=generator),
            torch.rand(batch, len_q, len(LEVELS), 2, generator=generator),
            torch.randn(batch, len_in, D_MODEL, generator=generator))

"""The detector-sized models of the QAT benchmark (bench_qat.py) and the GPU QAT tests, and the
kernel selection both run them under (``selection``).

- ``YoloLikeStack``: a YOLO-like convolution stack, channels 64-256 from 80x80 to 20x20 (a 3x3
  and a 1x1 at each scale, two stride-2 3x3 between them, a 1x1 head of 255 channels: 3 anchors
  x (80 classes + 5)), SiLU; input (B, 64, 80, 80), batch 16 in the benchmark.
- ``DetrLikeDecoder``: the transformer blocks of an RT-DETR-like decoder: 6 layers of
  self-attention over the queries, cross-attention to the encoder's memory and an FFN, d_model
  256, 8 heads, FFN 1024, 300 queries, post-norm; the memory is the 80x80 + 40x40 + 20x20 = 8400
  tokens of three feature levels. Cross-attention is plain multi-head attention (SDPA), not
  RT-DETR's deformable attention: its projections are the Linear layers a recipe quantizes, and
  deformable attention is bounded, not exact (docs/ms_deform_attn.md), so it stays out of the
  bit-exact QAT checks.

Every op has a deterministic CUDA backward (no adaptive pooling, no nll_loss), so the QAT tests
can run them under ``torch.use_deterministic_algorithms(True)``.
"""

from __future__ import annotations

import contextlib
import os

import torch
import torch.nn.functional as F
from torch import nn


class YoloLikeStack(nn.Module):
    def __init__(self):
        super().__init__()
        spec = [(64, 64, 3, 1), (64, 64, 1, 1),            # 80x80
                (64, 128, 3, 2), (128, 128, 3, 1), (128, 128, 1, 1),   # 40x40
                (128, 256, 3, 2), (256, 256, 3, 1), (256, 256, 1, 1)]  # 20x20
        self.convs = nn.ModuleList(nn.Conv2d(i, o, k, s, k // 2) for i, o, k, s in spec)
        self.head = nn.Conv2d(256, 255, 1)

    def forward(self, x):
        for conv in self.convs:
            x = F.silu(conv(x))
        return self.head(x)


def yolo_batch(batch: int, device, seed: int = 0):
    """(input, target) of the stack: (B, 64, 80, 80) and (B, 255, 20, 20)."""
    generator = torch.Generator(device=device).manual_seed(seed)
    return (torch.randn(batch, 64, 80, 80, device=device, generator=generator),
            torch.randn(batch, 255, 20, 20, device=device, generator=generator))


class Attention(nn.Module):
    """Multi-head attention with q, k, v and output projections as ``nn.Linear`` children."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.out = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, query, key, value):
        B, N, C = query.shape

        def split(t):
            return t.reshape(B, -1, self.heads, C // self.heads).transpose(1, 2)

        x = F.scaled_dot_product_attention(split(self.q(query)), split(self.k(key)),
                                           split(self.v(value)))
        return self.out(x.transpose(1, 2).reshape(B, N, C))


class DecoderLayer(nn.Module):
    def __init__(self, dim=256, heads=8, ffn=1024):
        super().__init__()
        self.self_attn = Attention(dim, heads)
        self.cross_attn = Attention(dim, heads)
        self.fc1, self.fc2 = nn.Linear(dim, ffn), nn.Linear(ffn, dim)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(dim) for _ in range(3))

    def forward(self, queries, memory, query_pos):
        q = queries + query_pos
        queries = self.norm1(queries + self.self_attn(q, q, queries))
        queries = self.norm2(queries + self.cross_attn(queries + query_pos, memory, memory))
        return self.norm3(queries + self.fc2(F.relu(self.fc1(queries))))


class DetrLikeDecoder(nn.Module):
    def __init__(self, layers=6, dim=256, heads=8, ffn=1024):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(dim, heads, ffn) for _ in range(layers))

    def forward(self, queries, memory, query_pos):
        for layer in self.layers:
            queries = layer(queries, memory, query_pos)
        return queries


def decoder_batch(batch: int, device, seed: int = 0, queries: int = 300, tokens: int = 8400,
                  dim: int = 256):
    """((queries, memory, query_pos), target)."""
    generator = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator)

    return (randn(batch, queries, dim), randn(batch, tokens, dim), randn(batch, queries, dim)), \
        randn(batch, queries, dim)


@contextlib.contextmanager
def selection(value: str | None):
    """``LIBREYOLO_KERNELS`` set to ``value`` (None: unset) for the duration, then restored (the
    registry reads its settings on every call)."""
    saved = os.environ.get("LIBREYOLO_KERNELS")
    if value is None:
        os.environ.pop("LIBREYOLO_KERNELS", None)
    else:
        os.environ["LIBREYOLO_KERNELS"] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("LIBREYOLO_KERNELS", None)
        else:
            os.environ["LIBREYOLO_KERNELS"] = saved

"""Shared test helpers for the quantization references: devices, bit comparison, edge inputs."""

from __future__ import annotations

import torch

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
FLOAT_DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# docs/quantization.md rule 5: sign 0, quiet bit set, payload 0.
CANONICAL_NAN_BITS = {torch.float32: 0x7FC00000, torch.float16: 0x7E00, torch.bfloat16: 0x7FC0}
_INT_OF = {
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
    torch.float8_e4m3fn: torch.uint8,
    torch.float8_e5m2: torch.uint8,
}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bit patterns of a float tensor (so NaN payloads and signed zeros compare)."""
    return t.detach().cpu().contiguous().view(_INT_OF[t.dtype]) if t.dtype in _INT_OF else t.cpu()


def canonical_nan(dtype: torch.dtype) -> torch.Tensor:
    """The canonical NaN of `dtype`, built from its literal bits."""
    return torch.tensor(CANONICAL_NAN_BITS[dtype], dtype=_INT_OF[dtype]).view(dtype)


def assert_same_bits(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    differ = bits(actual) != bits(expected)
    if differ.any():
        where = torch.nonzero(differ)[:5].tolist()
        raise AssertionError(
            f"{int(differ.sum())} of {differ.numel()} elements differ, first at {where}: "
            f"{actual.detach().cpu()[differ][:5].tolist()} != {expected.cpu()[differ][:5].tolist()}"
        )


def edge_values() -> list[float]:
    """Values every op must survive: zeros, subnormals, ties, near-max, over-max, NaN and inf."""
    return [
        0.0, -0.0, 1e-45, -1e-45, 1e-40, 2.0**-126, 2.0**-10, 2.0**-9, 0.25, 0.75, 1.25, -2.5,
        5.0, 6.0, 7.0, 127.5, -128.5, 447.9, 448.0, 464.0, 480.0, 57344.0, 61440.0, 65504.0,
        1e30, -3.4e38, float("nan"), float("inf"), float("-inf"),
    ]


def adversarial(shape: tuple[int, ...], seed: int, dtype=torch.float32, device="cpu"):
    """Seeded normal values with edge values sprinkled in and a few scaled-up elements."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=gen) * torch.exp2(torch.randint(-8, 8, shape, generator=gen))
    flat = x.view(-1)
    edges = torch.tensor(edge_values())
    where = torch.randperm(flat.numel(), generator=gen)[: min(flat.numel(), len(edges))]
    flat[where] = edges[: len(where)]
    return x.to(dtype).to(device)

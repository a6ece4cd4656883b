"""Calls that must give the same numbers on every path, where a memo, a size or a path gave
others (issue 35, classes 2, 4 and 6). ``build(device)`` gives ``(actual, expected)``, two
functions whose results must be equal: the call under test, and the same path given the input
as it now is, fresh."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from libreyolo.kernels import ops
from libreyolo.kernels.attention.ms_deform_attn import (
    ms_deform_attn_portable,
    ms_deform_attn_ragged,
)
from libreyolo.quant import packing

from .cases import tensor_device


@dataclass(frozen=True)
class Result:
    id: str
    classes: tuple[int, ...]
    build: Callable[[str], tuple[Callable[[], object], Callable[[], object]]]


def _slot_or_portable(*args):
    out = ops.ms_deform_attn(*args)
    return out if out is not None else ms_deform_attn_portable(*args)


def _module(value, spatial_shapes, locations, weights):
    """MSDeformAttn on the same levels (its slot call and its offset normalizer)."""
    from libreyolo.nn.ms_deform_attn import MSDeformAttn

    torch.manual_seed(0)
    module = MSDeformAttn(d_model=8, n_levels=1, n_heads=2, n_points=2).to(value.device)
    query = torch.randn(1, 3, 8, device=value.device)
    reference = torch.rand(1, 3, 1, 2, device=value.device)
    with torch.no_grad():
        return module(query, reference, value.flatten(2), spatial_shapes)


def _ragged(value, spatial_shapes, locations, weights):
    return ms_deform_attn_ragged(value, spatial_shapes, locations.flatten(3, 4),
                                 weights.flatten(3, 4), [2])


MSDA_PATHS = {"slot-or-portable": _slot_or_portable, "portable": ms_deform_attn_portable,
              "module": _module, "ragged": _ragged}


def _msda_inputs(on: str):
    gen = torch.Generator().manual_seed(1)
    value = torch.randn(1, 6, 2, 4, generator=gen).to(on)
    locations = torch.rand(1, 3, 2, 1, 2, 2, generator=gen).to(on)
    weights = torch.rand(1, 3, 2, 1, 2, generator=gen).to(on)
    return value, locations, weights


def _portrait_to_landscape(path, how: str):
    """The levels (2, 3) read once; then the same tensor holds (3, 2) (same H*W): in place
    under inference mode (no version counter), or by a ``.data`` swap (the version kept)."""

    def build(device):
        on = tensor_device(device)
        value, locations, weights = _msda_inputs(on)

        def actual():
            if how == "inference-in-place":
                with torch.inference_mode():
                    shapes = torch.tensor([[2, 3]], device=on)
                    path(value, shapes, locations, weights)
                    shapes[0, 0], shapes[0, 1] = 3, 2
                    return path(value, shapes, locations, weights).clone()
            shapes = torch.tensor([[2, 3]], device=on)
            path(value, shapes, locations, weights)
            shapes.data = torch.tensor([[3, 2]], device=on)
            return path(value, shapes, locations, weights)

        def expected():
            with torch.inference_mode(how == "inference-in-place"):
                return path(value, [(3, 2)], locations, weights).clone()

        return actual, expected

    return build


def _group_size(g):
    """A group longer than the row is one group a row: the same as group_size = the row."""

    def build(device):
        w = torch.randn(4, 40, generator=torch.Generator().manual_seed(2)).to(tensor_device(device))
        return (lambda: ops.fake_quant_int_grouped(w, 4, g),
                lambda: ops.fake_quant_int_grouped(w, 4, 40))

    return build


def _unpack_group_size(g):
    def build(device):
        w = torch.randn(4, 40, generator=torch.Generator().manual_seed(3)).to(tensor_device(device))
        packed, row = packing.pack_int_grouped(w, 4, g), packing.pack_int_grouped(w, 4, 40)
        return (lambda: ops.unpack_int_grouped(*packed, dtype=torch.bfloat16),
                lambda: ops.unpack_int_grouped(*row, dtype=torch.bfloat16))

    return build


RESULTS = [
    *(Result(f"{name}:{how}", (2,), _portrait_to_landscape(path, how))
      for name, path in MSDA_PATHS.items() for how in ("inference-in-place", "data-swap")),
    *(Result(f"fake_quant_int_grouped:group-size-{label}", (4, 6), _group_size(g))
      for label, g in (("41", 41), ("2**40", 2**40), ("2**70", 2**70))),
    *(Result(f"unpack_int_grouped:group-size-{label}", (4, 6), _unpack_group_size(g))
      for label, g in (("2**40", 2**40), ("2**70", 2**70))),
]


def check(r: Result, device: str) -> None:
    actual, expected = r.build(device)
    got, want = actual(), expected()
    assert isinstance(got, torch.Tensor) and got.shape == want.shape, (r.id, device)
    assert torch.equal(got, want), f"{r.id} on {device}: not the result of the input as it is"

"""From an unpack slot's arguments to the kernel's configuration (no triton here: cheap to import).

Each ``plan_<slot>`` runs the reference's own argument checks (``libreyolo.quant.packing``'s
``check_unpack_*``: the same TypeError and ValueError) and describes the work as an
``UnpackPlan``, which the provider's ``accepts`` hands to the call (``libreyolo.kernels.prepared``)
so an input is checked and planned once. Planning reads no tensor data and copies nothing: float8
tensors are reinterpreted as their bytes (``Tensor.view``, no copy), so the kernel reads bits and
never casts float8 (DESIGN.md: the interpreter's fp8 casts are wrong, and triton 3.6 miscompiles
some fp8 bitcasts).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import torch

from libreyolo.capture import capture_reason
from libreyolo.kernels.prepared import Prepared
from libreyolo.kernels.settings import interpreting
from libreyolo.quant import packing
from libreyolo.quant.formats import MX_BLOCK_SIZE, NVFP4_BLOCK_SIZE


class Format(IntEnum):
    """How the kernel decodes a code and its scale (docs/checkpoint_format.md)."""

    INT_GROUPED = 0  # two's complement int2/int4/int8 fields, float32 scale per group
    NVFP4 = 1  # E2M1 nibbles, E4M3 scale per 16 times a float32 tensor scale
    MXFP4 = 2  # E2M1 nibbles, E8M0 scale per 32
    MXFP8 = 3  # E4M3 bytes, E8M0 scale per 32


class OutKind(IntEnum):
    FLOAT32 = 0
    FLOAT16 = 1
    BFLOAT16 = 2

    @classmethod
    def of(cls, dtype: torch.dtype) -> OutKind:
        return {torch.float32: cls.FLOAT32, torch.float16: cls.FLOAT16}.get(dtype, cls.BFLOAT16)


@dataclass(frozen=True, slots=True)
class UnpackPlan(Prepared):
    """One unpack: ``rows x in_features`` outputs of ``dtype`` from ``bits``-wide fields of
    ``codes`` (uint8), one ``scale`` per ``group`` inputs of a row (uint8 for E4M3 / E8M0 scales,
    float32 otherwise) and, for NVFP4, the float32 ``tensor_scale``."""

    fmt: Format
    codes: torch.Tensor
    scale: torch.Tensor
    tensor_scale: torch.Tensor | None
    bits: int
    group: int
    rows: int
    in_features: int
    dtype: torch.dtype

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return tuple(t for t in (self.codes, self.scale, self.tensor_scale) if t is not None)


def plan_unpack_int_grouped(codes, scale, bits, group_size, in_features,
                            dtype=torch.float32) -> UnpackPlan:
    bits, group_size, in_features = packing.check_unpack_int_grouped(
        codes, scale, bits, group_size, in_features, dtype)
    return UnpackPlan(Format.INT_GROUPED, codes, scale, None, bits, group_size, codes.shape[0],
                      in_features, dtype)


def plan_unpack_nvfp4(codes, block_scale, tensor_scale, in_features,
                      dtype=torch.float32) -> UnpackPlan:
    in_features = packing.check_unpack_nvfp4(codes, block_scale, tensor_scale, in_features, dtype)
    return UnpackPlan(Format.NVFP4, codes, block_scale.view(torch.uint8), tensor_scale, 4,
                      NVFP4_BLOCK_SIZE, codes.shape[0], in_features, dtype)


def plan_unpack_mxfp4(codes, scale, in_features, dtype=torch.float32) -> UnpackPlan:
    in_features = packing.check_unpack_mxfp4(codes, scale, in_features, dtype)
    return UnpackPlan(Format.MXFP4, codes, scale, None, 4, MX_BLOCK_SIZE, codes.shape[0],
                      in_features, dtype)


def plan_unpack_mxfp8(codes, scale, dtype=torch.float32) -> UnpackPlan:
    in_features = packing.check_unpack_mxfp8(codes, scale, dtype)
    return UnpackPlan(Format.MXFP8, codes.view(torch.uint8), scale, None, 8, MX_BLOCK_SIZE,
                      codes.shape[0], in_features, dtype)


PLANNERS = {
    "unpack_int_grouped": plan_unpack_int_grouped,
    "unpack_nvfp4": plan_unpack_nvfp4,
    "unpack_mxfp4": plan_unpack_mxfp4,
    "unpack_mxfp8": plan_unpack_mxfp8,
}


def decline_reason(plan: UnpackPlan) -> str | None:
    """Why the kernel will not take this (already checked) input, or None."""
    captured = capture_reason()
    if captured is not None:
        return captured
    tensors = plan.tensors()
    sparse = next((t for t in tensors if t.layout != torch.strided), None)
    if sparse is not None:
        return f"a {sparse.layout} tensor: the kernel reads strided (dense) tensors"
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return "a scale requires grad: the kernel has no backward (the reference keeps autograd)"
    device = plan.codes.device
    if any(t.device != device for t in tensors):
        return "codes and scales are on different devices (the reference reports it)"
    if interpreting() and device.type != "cpu":
        return f"codes are on {device}: under TRITON_INTERPRET=1 the kernel runs on CPU tensors"
    if not interpreting() and device.type != "cuda":
        return f"codes are on {device}: the compiled kernel needs CUDA tensors"
    return None

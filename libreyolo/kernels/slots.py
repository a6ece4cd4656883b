"""The slot catalogue: every accelerated operation, declared once.

A slot is a named operation. Its reference (``"module:function"``) defines what the numbers mean
and is registered under the name ``reference`` when the registry loads; slots without one
(attention, GEMM) let callers keep their own portable path, and ``dispatch`` returns ``None`` when
no implementation takes an input. The conformance suite keeps each slot's parity contract and
test profile in ``conformance/catalogue/``, keyed by the same names.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Slot:
    name: str
    reference: str | None
    doc: str
    #: For a slot without a reference: a function of the slot's arguments that raises the
    #: slot's TypeError/ValueError for bad input (the registry's judge of a failing kernel).
    validator: str | None = None

    def load_reference(self) -> Callable | None:
        return _load(self.reference)

    def load_validator(self) -> Callable | None:
        return _load(self.validator)


def _load(target: str | None) -> Callable | None:
    """``"module:function"`` imported, or None."""
    if target is None:
        return None
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _fake_quant(name: str, doc: str) -> Slot:
    return Slot(name, f"libreyolo.quant.fake_quant:{name}", doc)


def _unpack(name: str, doc: str) -> Slot:
    return Slot(name, f"libreyolo.quant.packing:{name}", doc)


SLOTS: tuple[Slot, ...] = (
    _fake_quant("fake_quant_int8_per_channel", "symmetric int8 (±127), one scale per channel"),
    _fake_quant("fake_quant_int8_affine", "int8 [-128, 127] with per-tensor scale and zero point"),
    _fake_quant("fake_quant_fp8", "FP8 E4M3/E5M2: per-tensor, per-channel or dynamic per-row"),
    _fake_quant("fake_quant_int_grouped", "int2/int4/int8, one scale per group of inputs"),
    _fake_quant("fake_quant_nvfp4_weight", "NVFP4 weight: E2M1, 16-blocks, E4M3 + fp32 scales"),
    _fake_quant("fake_quant_nvfp4_dynamic", "NVFP4 activation, scales from the tensor itself"),
    _fake_quant("fake_quant_mxfp4_weight", "MXFP4 weight: E2M1, 32-blocks, E8M0 scales"),
    _fake_quant("fake_quant_mxfp4_dynamic", "MXFP4 activation, blocks along the last dim"),
    _fake_quant("fake_quant_mxfp8_weight", "MXFP8 weight: E4M3, 32-blocks, E8M0 scales"),
    _fake_quant("fake_quant_mxfp8_dynamic", "MXFP8 activation, blocks along the last dim"),
    _unpack("unpack_int_grouped", "packed grouped int2/int4/int8 codes to floats"),
    _unpack("unpack_nvfp4", "packed NVFP4 codes and scales to floats"),
    _unpack("unpack_mxfp4", "packed MXFP4 codes and scales to floats"),
    _unpack("unpack_mxfp8", "packed MXFP8 codes and scales to floats"),
    Slot("fp8_cast_static", "libreyolo.quant.fp8_execute:fp8_cast_static",
         "activations to E4M3 codes with a per-tensor scale (the FP8 GEMM's prologue)"),
    Slot("fp8_cast_dynamic", "libreyolo.quant.fp8_execute:fp8_cast_dynamic",
         "activations to E4M3 codes and per-row scales in one pass (dynamic prologue)"),
    Slot("fp8_perchannel_epilogue", "libreyolo.quant.fp8_execute:fp8_perchannel_epilogue",
         "float32 accumulator x row scale x column scale + bias, ReLU, cast"),
    Slot("fp8_gemm", None, "E4M3 GEMM, per-row x per-output-channel scales, bias, out dtype",
         validator="libreyolo.quant.fp8_execute:check_fp8_gemm"),
    Slot("fp8_gemm_tensorwise", None, "E4M3 GEMM with per-tensor scales, bias, out dtype",
         validator="libreyolo.quant.fp8_execute:check_fp8_gemm_tensorwise"),
    Slot("ms_deform_attn", None, "multi-scale deformable attention (Deformable-DETR layout)",
         validator="libreyolo.kernels.attention.ms_deform_attn.portable:validate_inputs"),
    Slot("ms_deform_attn_ragged", None,
         "deformable attention with a point count per level, bilinear or discrete (RT-DETRv2)"),
)

_BY_NAME = {slot.name: slot for slot in SLOTS}


def get_slot(name: str) -> Slot:
    """The declared slot called ``name``; a ValueError listing the slots otherwise."""
    try:
        return _BY_NAME[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"op: unknown slot {name!r}; declared slots are {', '.join(sorted(_BY_NAME))}"
        ) from None


def slot_names() -> tuple[str, ...]:
    return tuple(slot.name for slot in SLOTS)

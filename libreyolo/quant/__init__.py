"""Reference quantization numerics: formats, fake-quant ops with straight-through backward, packing.

This package defines what the numbers mean; `libreyolo.kernels` registers these references and
judges accelerated implementations against them (never the other way round).
"""

from libreyolo.quant.fake_quant import (
    FAKE_QUANT_OPS,
    fake_quant_fp8,
    fake_quant_int8_affine,
    fake_quant_int8_per_channel,
    fake_quant_int_grouped,
    fake_quant_mxfp4_dynamic,
    fake_quant_mxfp4_weight,
    fake_quant_mxfp8_dynamic,
    fake_quant_mxfp8_weight,
    fake_quant_nvfp4_dynamic,
    fake_quant_nvfp4_weight,
    ste_mask,
)

__all__ = [
    "FAKE_QUANT_OPS",
    "fake_quant_fp8",
    "fake_quant_int8_affine",
    "fake_quant_int8_per_channel",
    "fake_quant_int_grouped",
    "fake_quant_mxfp4_dynamic",
    "fake_quant_mxfp4_weight",
    "fake_quant_mxfp8_dynamic",
    "fake_quant_mxfp8_weight",
    "fake_quant_nvfp4_dynamic",
    "fake_quant_nvfp4_weight",
    "ste_mask",
]

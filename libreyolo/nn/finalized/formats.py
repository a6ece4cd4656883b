"""What a finalized layer can hold, as data: weight formats and activation quantizers.

A weight format names the packing NamedTuple of ``libreyolo.quant.packing`` whose tensor fields
become the layer's buffers, under the same names, so a layer's state dict *is* the packing
contract (docs/checkpoint_format.md); it packs a float weight with the packer and unpacks with
the unpack slot (or, for the formats without one, the packing reference). An activation format
names the buffers it adds and the fake-quant slot that quantizes a layer's input: the forward
values of docs/quantization.md, without a backward (finalized layers are for inference).

Two weight layouts (``per_channel``):
- per channel (``fp8``, ``int8``): the codes keep the float weight's shape, one float32 scale per
  output channel (axis 0);
- rows (``int_grouped``, ``nvfp4``, ``mxfp4``, ``mxfp8``): the 2-D ``(rows, in)`` matrix the
  packers block along its last dim. A Linear's is its weight; a Conv2d's is the weight with its
  input channels last, ``(out * kh * kw, in / groups)``, so blocks and groups run along input
  channels at one kernel position, the way a channels-last GEMM reads them (and a 1x1
  convolution's matrix is a Linear's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch

from libreyolo.quant import packing
from libreyolo.quant.formats import MX_BLOCK_SIZE, NVFP4_BLOCK_SIZE

Shape = tuple[int, ...]


def _ceil(n: int, d: int) -> int:
    return -(-n // d)


@dataclass(frozen=True)
class WeightFormat:
    """How a weight is stored: its packing NamedTuple, buffer shapes, packer and unpacker.

    ``layout(weight_shape, rows, cols, options)`` gives each tensor field's (shape, dtype), in
    the NamedTuple's field order; ``pack(w, options, weight_scale, global_amax)`` takes the float
    weight (per channel) or its matrix (rows); ``unpack(slots, buffers, cols, options, dtype)``
    returns the same, calling its unpack slot through ``slots`` (``libreyolo.kernels.ops``, or the
    layer's own call site, a ``libreyolo.nn.slot_sites.SlotSite``). ``activations`` lists the
    activation formats it pairs with (None: weight-only).
    """

    name: str
    packed: type[NamedTuple]
    per_channel: bool
    activations: tuple[str | None, ...]
    layout: Callable[[Shape, int, int, dict], dict[str, tuple[Shape, torch.dtype]]]
    pack: Callable[..., NamedTuple]
    unpack: Callable[[object, dict, int, dict, torch.dtype], torch.Tensor]
    options: tuple[str, ...] = ()

    @property
    def fields(self) -> tuple[str, ...]:
        """The packed tensor fields: the layer's weight buffers."""
        return tuple(f for f in self.packed._fields if f not in _PACKED_INTEGERS)

    def __reduce__(self):
        """Pickled by name (a layer holds its format; pickle cannot name the lambdas)."""
        return _weight_format, (self.name,)


# The packing NamedTuples' non-tensor fields, and what a layer's configuration says they are.
_PACKED_INTEGERS = ("axis", "bits", "group_size", "in_features")


def _per_channel(codes_dtype: torch.dtype):
    def layout(weight_shape, rows, cols, options):
        return {"codes": (weight_shape, codes_dtype), "scale": ((weight_shape[0],), torch.float32)}

    return layout


WEIGHT_FORMATS: dict[str, WeightFormat] = {f.name: f for f in (
    WeightFormat(
        "fp8", packing.PackedFP8, True, ("fp8_dynamic", "fp8_static"),
        _per_channel(torch.float8_e4m3fn),
        lambda w, o, scale, amax: packing.pack_fp8(w, scale, fmt="e4m3", axis=0),
        lambda slots, b, cols, o, dtype: packing.unpack_fp8(b["codes"], b["scale"], 0, dtype),
    ),
    WeightFormat(
        "int8", packing.PackedInt8, True, ("int8_affine",),
        _per_channel(torch.int8),
        lambda w, o, scale, amax: packing.pack_int8(w, scale, axis=0),
        lambda slots, b, cols, o, dtype: packing.unpack_int8(b["codes"], b["scale"], 0, dtype),
    ),
    WeightFormat(
        "int_grouped", packing.PackedIntGrouped, False, (None,),
        lambda shape, rows, cols, o: {
            "codes": ((rows, _ceil(cols * o["bits"], 8)), torch.uint8),
            "scale": ((rows, _ceil(cols, o["group_size"])), torch.float32)},
        lambda w, o, scale, amax: packing.pack_int_grouped(w, o["bits"], o["group_size"]),
        lambda slots, b, cols, o, dtype: slots.unpack_int_grouped(
            b["codes"], b["scale"], o["bits"], o["group_size"], cols, dtype),
        options=("bits", "group_size"),
    ),
    WeightFormat(
        "nvfp4", packing.PackedNVFP4, False, (None, "nvfp4_dynamic"),
        lambda shape, rows, cols, o: {
            "codes": ((rows, _ceil(cols, 2)), torch.uint8),
            "block_scale": ((rows, _ceil(cols, NVFP4_BLOCK_SIZE)), torch.float8_e4m3fn),
            "tensor_scale": ((), torch.float32)},
        lambda w, o, scale, amax: packing.pack_nvfp4(w, amax),
        lambda slots, b, cols, o, dtype: slots.unpack_nvfp4(
            b["codes"], b["block_scale"], b["tensor_scale"], cols, dtype),
    ),
    WeightFormat(
        "mxfp4", packing.PackedMXFP4, False, (None, "mxfp4_dynamic"),
        lambda shape, rows, cols, o: {
            "codes": ((rows, _ceil(cols, 2)), torch.uint8),
            "scale": ((rows, _ceil(cols, MX_BLOCK_SIZE)), torch.uint8)},
        lambda w, o, scale, amax: packing.pack_mxfp4(w),
        lambda slots, b, cols, o, dtype: slots.unpack_mxfp4(b["codes"], b["scale"], cols,
                                                            dtype),
    ),
    WeightFormat(
        "mxfp8", packing.PackedMXFP8, False, (None, "mxfp8_dynamic"),
        lambda shape, rows, cols, o: {
            "codes": ((rows, cols), torch.float8_e4m3fn),
            "scale": ((rows, _ceil(cols, MX_BLOCK_SIZE)), torch.uint8)},
        lambda w, o, scale, amax: packing.pack_mxfp8(w),
        lambda slots, b, cols, o, dtype: slots.unpack_mxfp8(b["codes"], b["scale"], dtype),
    ),
)}


@dataclass(frozen=True)
class ActivationFormat:
    """How a layer's input is quantized: ``quantize(slots, x, scale, zero_point)`` on x with its
    channels last, calling its slot through ``slots`` (as ``WeightFormat.unpack`` does).
    ``along_channels``: the scales are computed per row (or block) of channels, so a
    convolution's input is quantized with its channels moved last, one row per pixel; otherwise
    the scale is per tensor and the layout does not matter. ``buffers``: the calibrated values it
    adds to the state dict (``input_scale``, ``input_zero_point``)."""

    name: str
    along_channels: bool
    buffers: tuple[str, ...]
    quantize: Callable[[object, torch.Tensor, torch.Tensor | None, int | None], torch.Tensor]

    def __reduce__(self):
        """Pickled by name, as a ``WeightFormat``."""
        return _activation_format, (self.name,)


ACTIVATION_FORMATS: dict[str, ActivationFormat] = {f.name: f for f in (
    ActivationFormat("fp8_static", False, ("input_scale",),
                     lambda slots, x, scale, zp: slots.fake_quant_fp8(x, scale)),
    ActivationFormat("fp8_dynamic", True, (),
                     lambda slots, x, scale, zp: slots.fake_quant_fp8(x)),
    ActivationFormat("int8_affine", False, ("input_scale", "input_zero_point"),
                     lambda slots, x, scale, zp: slots.fake_quant_int8_affine(x, scale, zp)),
    ActivationFormat("nvfp4_dynamic", True, (),
                     lambda slots, x, scale, zp: slots.fake_quant_nvfp4_dynamic(x)),
    ActivationFormat("mxfp4_dynamic", True, (),
                     lambda slots, x, scale, zp: slots.fake_quant_mxfp4_dynamic(x)),
    ActivationFormat("mxfp8_dynamic", True, (),
                     lambda slots, x, scale, zp: slots.fake_quant_mxfp8_dynamic(x)),
)}


def _weight_format(name: str) -> WeightFormat:
    """What a pickled weight format loads as: the table's own."""
    return WEIGHT_FORMATS[name]


def _activation_format(name: str) -> ActivationFormat:
    """What a pickled activation format loads as: the table's own."""
    return ACTIVATION_FORMATS[name]

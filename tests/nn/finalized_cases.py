"""The finalized-layer cases of ``finalized_cases.toml`` and their oracle.

The oracle is built from the fake-quant references alone (``libreyolo.quant.fake_quant``), never
from the layer under test: ``F.linear(fake_quant(x), fake_quant(w), b)``, or ``F.conv2d`` with the
layout docs/finalized_models.md states (rows formats quantize a convolution's weight with its
input channels last, per-row activation formats each pixel's channels).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from libreyolo.nn.finalized import FinalizedConv2d, FinalizedLinear
from libreyolo.quant import fake_quant as fq

_DATA = tomllib.loads(Path(__file__).with_name("finalized_cases.toml").read_text())


@dataclass(frozen=True)
class Format:
    id: str
    weight: str
    activation: str | None = None
    weight_qmax: float | None = None
    input_scale: float | None = None
    input_zero_point: int | None = None
    bits: int | None = None
    group_size: int | None = None
    global_amax: float | None = None

    def from_float_kwargs(self, layer: nn.Module) -> dict:
        """What a calibration hands ``from_float`` for ``layer``."""
        kwargs = {"bits": self.bits, "group_size": self.group_size}
        w = layer.weight.detach()
        if self.weight_qmax is not None:
            amax = w.abs().amax(dim=tuple(range(1, w.dim())))
            kwargs["weight_scale"] = amax / torch.tensor(self.weight_qmax, device=w.device)
        if self.input_scale is not None:
            kwargs["input_scale"] = torch.tensor(self.input_scale, device=w.device)
        if self.input_zero_point is not None:
            kwargs["input_zero_point"] = self.input_zero_point
        if self.global_amax is not None:
            kwargs["global_amax"] = torch.tensor(self.global_amax, device=w.device)
        return kwargs


@dataclass(frozen=True)
class Layer:
    id: str
    kind: str
    in_: int
    out: int
    input: tuple[int, ...]
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] | str = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    bias: bool = True

    def float_layer(self, seed: int = 0) -> nn.Module:
        torch.manual_seed(seed)
        if self.kind == "linear":
            layer = nn.Linear(self.in_, self.out, bias=self.bias)
        else:
            layer = nn.Conv2d(self.in_, self.out, self.kernel, self.stride, self.padding,
                              self.dilation, self.groups, bias=self.bias)
        with torch.no_grad():  # weights of a few magnitudes, so blocks get different scales
            layer.weight.mul_(torch.exp2(torch.randint(-3, 3, layer.weight.shape).float()))
            if layer.bias is not None:
                layer.bias.uniform_(-1, 1)
        return layer.eval()

    @property
    def finalized_class(self):
        return FinalizedLinear if self.kind == "linear" else FinalizedConv2d

    def x(self, seed: int = 1, dtype=torch.float32, device="cpu") -> torch.Tensor:
        generator = torch.Generator().manual_seed(seed)
        x = torch.randn(self.input, generator=generator)
        x = x * torch.exp2(torch.randint(-4, 4, self.input, generator=generator))
        return x.to(dtype=dtype, device=device)


def _layer(entry: dict) -> Layer:
    fields = dict(entry, in_=entry.pop("in"))
    for name in ("input", "kernel", "stride", "dilation"):
        if name in fields:
            fields[name] = tuple(fields[name])
    if isinstance(fields.get("padding"), list):
        fields["padding"] = tuple(fields["padding"])
    return Layer(**fields)


FORMATS = {entry["id"]: Format(**entry) for entry in _DATA["format"]}
LAYERS = {entry["id"]: _layer(dict(entry)) for entry in _DATA["layer"]}


def finalize(fmt: Format, layer: Layer, seed: int = 0, device="cpu"):
    """(float layer, its finalized layer) for this format."""
    float_layer = layer.float_layer(seed).to(device)
    finalized = layer.finalized_class.from_float(
        float_layer, fmt.weight, fmt.activation, **fmt.from_float_kwargs(float_layer))
    return float_layer, finalized


def quantized_weight(fmt: Format, float_layer: nn.Module) -> torch.Tensor:
    """The weight as the fake-quant references quantize it (float32)."""
    w = float_layer.weight.detach()
    kwargs = fmt.from_float_kwargs(float_layer)
    if fmt.weight == "fp8":
        return fq.fake_quant_fp8(w, kwargs["weight_scale"], axis=0)
    if fmt.weight == "int8":
        return fq.fake_quant_int8_per_channel(w, kwargs["weight_scale"], 0)
    matrix = w if w.dim() == 2 else w.permute(0, 2, 3, 1).reshape(-1, w.shape[1])
    if fmt.weight == "int_grouped":
        q = fq.fake_quant_int_grouped(matrix, fmt.bits, fmt.group_size)
    elif fmt.weight == "nvfp4":
        q = fq.fake_quant_nvfp4_weight(matrix, kwargs.get("global_amax"))
    else:
        q = getattr(fq, f"fake_quant_{fmt.weight}_weight")(matrix)
    if w.dim() == 2:
        return q.contiguous()  # dense rows, as a layer's weight
    out, per_group, kh, kw = w.shape
    return q.reshape(out, kh, kw, per_group).permute(0, 3, 1, 2).clone(
        memory_format=torch.contiguous_format)  # an nn.Conv2d weight's strides


def quantized_input(fmt: Format, x: torch.Tensor, channels_last: bool) -> torch.Tensor:
    """The input as the activation format's fake-quant reference quantizes it."""
    if fmt.activation is None:
        return x
    scale = torch.tensor(fmt.input_scale or 0.0, device=x.device)
    if fmt.activation == "fp8_static":
        return fq.fake_quant_fp8(x, scale)
    if fmt.activation == "int8_affine":
        return fq.fake_quant_int8_affine(x, scale, fmt.input_zero_point)
    op = {"fp8_dynamic": fq.fake_quant_fp8}.get(
        fmt.activation, getattr(fq, f"fake_quant_{fmt.activation}", None))
    if channels_last:
        return op(x)
    channels = x.dim() - 3
    return op(x.movedim(channels, -1)).movedim(-1, channels).contiguous()


def oracle(fmt: Format, layer: Layer, float_layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """F.linear / F.conv2d of the fake-quantized input and weight, in x's dtype."""
    weight = quantized_weight(fmt, float_layer).to(x.dtype)
    bias = None if float_layer.bias is None else float_layer.bias.detach().to(x.dtype)
    xq = quantized_input(fmt, x, channels_last=layer.kind == "linear")
    if layer.kind == "linear":
        return F.linear(xq, weight, bias)
    return F.conv2d(xq, weight, bias, layer.stride, layer.padding, layer.dilation, layer.groups)


def magnitude(fmt: Format, layer: Layer, float_layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The layer applied to |quantized input| and |quantized weight|, plus |bias|: the sum of
    magnitudes that bounds how much a reordered float32 accumulation can differ."""
    weight = quantized_weight(fmt, float_layer).abs()
    bias = None if float_layer.bias is None else float_layer.bias.detach().abs()
    xq = quantized_input(fmt, x, channels_last=layer.kind == "linear").abs()
    if layer.kind == "linear":
        return F.linear(xq, weight, bias)
    return F.conv2d(xq, weight, bias, layer.stride, layer.padding, layer.dilation, layer.groups)


def reduction_length(layer: Layer) -> int:
    """Products summed into one output (plus one for the bias)."""
    if layer.kind == "linear":
        return layer.in_ + 1
    return layer.in_ // layer.groups * layer.kernel[0] * layer.kernel[1] + 1

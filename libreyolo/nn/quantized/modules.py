"""``QuantLinear`` and ``QuantConv2d``: fake-quantized layers for QAT and simulated PTQ.

Each is its float layer (a subclass of ``nn.Linear`` / ``nn.Conv2d``, holding the very same
``weight`` and ``bias`` parameters, so an optimizer made before ``prepare`` keeps training them)
whose forward fake-quantizes the weight and the input through the fake-quant slots (the Triton
kernels on CUDA, the references elsewhere, the same bits) per its recipe (``recipes.py``), and
then runs ``F.linear`` / ``F.conv2d``. That is, operation for operation and dtype for dtype,
what the finalized layer ``convert`` makes of it computes on its portable path
(``libreyolo.nn.finalized``), so the two give the same bits on the CPU. Gradients reach the
weight and the input through the slots' straight-through estimator. A slot is called as
``libreyolo.kernels.ops`` calls it, through the layer's own call site for the weight and for the
input (``libreyolo.nn.slot_sites``), which selects the implementation once per input description
instead of every step.

**Dtype policy.** The layer computes in one *compute dtype*: the input's, or, under autocast,
autocast's dtype for the input's device (the input is cast to it first, as autocast would cast
it for the layer op). The input is fake-quantized in that dtype (each slot computes in float32
and rounds once to it); the weight is fake-quantized from its float32 value
(``weight.float()``, the master weight of mixed-precision training) and rounded once to the
compute dtype; the bias is cast to it; the layer op runs in it. So, under autocast, a layer
gives the bits its finalized layer gives for the input cast to autocast's dtype outside
autocast. Scales and calibrated values are float32 whatever the module's dtype: module casts
(``.half()``) move ``input_scale`` and ``input_zero_point`` but keep their dtypes.

**State dict.** The float layer's (``weight``, ``bias``) plus, for a recipe with a calibrated
input scale, ``input_scale`` (float32, 0-dim; NaN until calibrated) and, for ``w8a8_int8``,
``input_zero_point`` (int8, 0-dim). The zero point reaches the forward as a Python int, read on
the host when it is calibrated or loaded, so the forward never reads device data.

**Calibration.** While ``calibrate`` runs, a layer with a calibrated input scale hands its
input to its observer and computes its float output (``torch.ao``'s convention); a layer whose
recipe computes every scale from the data has nothing to observe. Before calibration such a
layer's fake-quantized forward is a RuntimeError naming the layer.

Everything a forward decides in Python is configuration (the recipe, whether it is observing,
the zero point): one slot call per tensor, no data-dependent branch, no host read, so the
forward compiles whole once the slots are operators.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..conv_weight import conv_weight_as_matrix, matrix_as_conv_weight
from ..input_layout import quantize_input
from ..slot_sites import SlotSite
from .recipes import Recipe, get_recipe

# The calibrated buffers and their dtypes: a contract, kept through module casts (``_apply``).
_CALIBRATED_DTYPES = {"input_scale": torch.float32, "input_zero_point": torch.int8}


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype a quantized layer computes in for input ``x``: autocast's for x's device when
    autocast is on there, else x's own (see the module docstring)."""
    device_type = x.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return x.dtype


# -- weights -----------------------------------------------------------------------------------
# (slots, ...) -> the fake-quantized weight; ``slots``: the layer's weight call site (a
# ``SlotSite``), called as ``libreyolo.kernels.ops``. Per output channel (fp8, int8): the slot
# on the weight viewed as (out, -1), one row per channel. The rows formats: the slot on the
# finalized layers' matrix (``_matrix``).

def _per_channel_fp8(slots, rows: torch.Tensor, recipe: Recipe,
                     row_length: int) -> torch.Tensor:
    return slots.fake_quant_fp8(rows)  # dynamic per row: scale = finite row amax / 448


def _per_channel_int8(slots, rows: torch.Tensor, recipe: Recipe,
                      row_length: int) -> torch.Tensor:
    # one group per row: scale = finite row amax / 127; the length a Python int, not
    # ``rows.shape[1]``, which a TorchScript trace (ONNX export) hands over as a tensor
    return slots.fake_quant_int_grouped(rows, 8, row_length)


# The tables are read per call: a layer holds none of their functions, so it pickles
# (``torch.save(model)``; pickle cannot name a lambda).
_PER_CHANNEL = {"fp8": _per_channel_fp8, "int8": _per_channel_int8}
_ROWS = {
    "int_grouped": lambda slots, m, r: slots.fake_quant_int_grouped(m, r.bits, r.group_size),
    "nvfp4": lambda slots, m, r: slots.fake_quant_nvfp4_weight(m),
    "mxfp4": lambda slots, m, r: slots.fake_quant_mxfp4_weight(m),
    "mxfp8": lambda slots, m, r: slots.fake_quant_mxfp8_weight(m),
}

# -- inputs ------------------------------------------------------------------------------------
# (slots, x, layer) -> fake-quantized x, ``slots`` the layer's input call site; x has the
# channels last (a convolution moves them there for the per-row and per-block formats,
# ``_Quantized._quantize_input``).
_INPUTS = {
    None: None,
    "fp8_static": lambda slots, x, m: slots.fake_quant_fp8(x, m.input_scale),
    "fp8_dynamic": lambda slots, x, m: slots.fake_quant_fp8(x),
    "int8_affine": lambda slots, x, m: slots.fake_quant_int8_affine(x, m.input_scale,
                                                                     m._zero_point),
    "nvfp4_dynamic": lambda slots, x, m: slots.fake_quant_nvfp4_dynamic(x),
    "mxfp4_dynamic": lambda slots, x, m: slots.fake_quant_mxfp4_dynamic(x),
    "mxfp8_dynamic": lambda slots, x, m: slots.fake_quant_mxfp8_dynamic(x),
}
# per-tensor formats: the layout of the input does not matter
_PER_TENSOR_INPUTS = ("fp8_static", "int8_affine")


def _row_length(layer) -> int:
    """The length of a weight row per output channel: ``in_features`` or ``in / groups * kh *
    kw``, from the layer's configuration."""
    if isinstance(layer, nn.Linear):
        return layer.in_features
    return layer.in_channels // layer.groups * math.prod(layer.kernel_size)


class _Quantized:
    """What both layer kinds share (a mixin before ``nn.Linear`` / ``nn.Conv2d``)."""

    recipe: Recipe
    _channels_last: bool

    def _init_quantized(self, recipe: Recipe | str, device) -> None:
        recipe = get_recipe(recipe)
        self.recipe = recipe
        #: set by ``prepare``: the layer's qualified name in its model, for messages
        self.qualified_name: str | None = None
        self._observer = None
        self._zero_point = 0
        self._calibrated = not recipe.static
        self._input_per_row = recipe.activation not in (None, *_PER_TENSOR_INPUTS)
        # the layer's own call sites: each selects once per description (``slot_sites``)
        self._weight_slots, self._input_slots = SlotSite(), SlotSite()
        for name in recipe.calibrated:
            initial = math.nan if name == "input_scale" else 0
            self.register_buffer(name, torch.full((), initial, dtype=_CALIBRATED_DTYPES[name],
                                                  device=device))

    # -- the forward ---------------------------------------------------------------------------

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._observer is not None:  # calibrating: observe, compute the float layer
            self._observer.observe(x)
            return super().forward(x)
        if not self._calibrated:
            raise RuntimeError(
                f"{self._where()}: recipe {self.recipe.name!r} quantizes the input with a "
                f"calibrated scale, and this layer has none: run calibrate(model, batches) "
                f"first, or load a calibrated checkpoint")
        dtype = compute_dtype(x)
        x = x.to(dtype)
        weight = self.fake_quant_weight().to(dtype)
        bias = None if self.bias is None else self.bias.to(dtype)
        return self._layer(self._quantize_input(x), weight, bias)

    def fake_quant_weight(self) -> torch.Tensor:
        """The fake-quantized weight in float32, in the weight's shape (with its gradient)."""
        w, recipe = self.weight.float(), self.recipe
        if recipe.weight in _PER_CHANNEL:
            rows = w.reshape(w.shape[0], -1)
            return _PER_CHANNEL[recipe.weight](self._weight_slots, rows, recipe,
                                               _row_length(self)).reshape(w.shape)
        return self._weight_of_matrix(_ROWS[recipe.weight](
            self._weight_slots, self._matrix_of_weight(w), recipe))

    def _quantize_input(self, x: torch.Tensor) -> torch.Tensor:
        quantize = _INPUTS[self.recipe.activation]
        if quantize is None:
            return x
        # per-row and per-block formats quantize each pixel's channels (``input_layout``, the
        # finalized layer's ``_quantize_input`` too)
        return quantize_input(x, lambda view: quantize(self._input_slots, view, self),
                              per_pixel=self._input_per_row, channels_last=self._channels_last)

    def _where(self) -> str:
        return self.qualified_name or type(self).__name__

    # -- calibration and loading ---------------------------------------------------------------

    @property
    def calibrated(self) -> bool:
        """Whether the layer has every value its recipe calibrates (always, for dynamic ones)."""
        return self._calibrated

    def set_calibration(self, input_scale: torch.Tensor, input_zero_point: int | None) -> None:
        """Store what calibration found: a float32 0-dim scale, finite and positive, and for
        ``int8_affine`` the zero point as an int in [-128, 127]."""
        if not self.recipe.static:
            raise ValueError(f"{self._where()}: recipe {self.recipe.name!r} calibrates nothing")
        scale = input_scale.detach().to(torch.float32).reshape(())
        if not bool(torch.isfinite(scale)) or float(scale) <= 0:
            raise ValueError(f"{self._where()}: input_scale must be finite and positive, got "
                             f"{float(scale)}")
        with torch.no_grad():
            self.input_scale.copy_(scale)
            if "input_zero_point" in self.recipe.calibrated:
                if not isinstance(input_zero_point, int) or not -128 <= input_zero_point <= 127:
                    raise ValueError(f"{self._where()}: input_zero_point must be an int in "
                                     f"[-128, 127], got {input_zero_point!r}")
                self.input_zero_point.fill_(input_zero_point)
        self._read_calibration()

    def _read_calibration(self) -> None:
        """The host's copies of the calibrated values: read once, when they are set or loaded."""
        if not self.recipe.static:
            return
        self._calibrated = bool(torch.isfinite(self.input_scale))
        if "input_zero_point" in self.recipe.calibrated:
            self._zero_point = int(self.input_zero_point)

    def calibration(self) -> dict:
        """The calibrated values as ``FinalizedLinear.from_float`` takes them."""
        values = {}
        if self.recipe.static:
            values["input_scale"] = self.input_scale.detach().clone()
        if "input_zero_point" in self.recipe.calibrated:
            values["input_zero_point"] = self._zero_point
        return values

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        for name in self.recipe.calibrated:
            tensor = state_dict.get(prefix + name)
            dtype = _CALIBRATED_DTYPES[name]
            if isinstance(tensor, torch.Tensor) and tensor.dtype != dtype:
                error_msgs.append(f"{prefix + name} must be {str(dtype).removeprefix('torch.')}, "
                                  f"got {str(tensor.dtype).removeprefix('torch.')}")
                return
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)
        self._read_calibration()

    def _apply(self, fn, recurse=True):
        """Module casts move the calibrated buffers but keep their dtypes (the slots take a
        float32 scale)."""
        kept = {id(getattr(self, name)) for name in self.recipe.calibrated}

        def keeping_dtypes(t):
            if id(t) not in kept:
                return fn(t)
            moved = fn(t.new_empty(0))
            return fn(t) if moved.dtype == t.dtype else t.to(moved.device)

        return super()._apply(keeping_dtypes, recurse)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, recipe={self.recipe.name!r}"


class QuantLinear(_Quantized, nn.Linear):
    """``nn.Linear`` whose weight and input are fake-quantized per ``recipe`` (module docstring).

    ``QuantLinear(in_features, out_features, bias=True, device=None, dtype=None, *, recipe)``;
    ``QuantLinear.from_float(linear, recipe)`` shares the float layer's parameters.
    """

    _channels_last = True

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None, *, recipe: Recipe | str):
        super().__init__(in_features, out_features, bias, device, dtype)
        self._init_quantized(recipe, device)

    @classmethod
    def from_float(cls, module: nn.Linear, recipe: Recipe | str) -> QuantLinear:
        layer = cls(module.in_features, module.out_features, module.bias is not None,
                    device="meta", recipe=recipe)
        return _sharing_parameters(layer, module)

    @staticmethod
    def _matrix_of_weight(w: torch.Tensor) -> torch.Tensor:
        return w

    @staticmethod
    def _weight_of_matrix(matrix: torch.Tensor) -> torch.Tensor:
        return matrix.contiguous()  # as FinalizedLinear's

    def _layer(self, x, weight, bias):
        return F.linear(x, weight, bias)


class QuantConv2d(_Quantized, nn.Conv2d):
    """``nn.Conv2d`` (zero padding) whose weight and input are fake-quantized per ``recipe``.

    The constructor is ``nn.Conv2d``'s plus ``recipe``; ``QuantConv2d.from_float(conv, recipe)``
    shares the float layer's parameters. The rows formats quantize the weight as the finalized
    layer stores it, input channels last: ``(out * kh * kw, in / groups)``; per-row and per-block
    input formats quantize each pixel's channels, per-tensor ones the whole input.
    """

    _channels_last = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, padding_mode: str = "zeros",
                 device=None, dtype=None, *, recipe: Recipe | str):
        if padding_mode != "zeros":
            raise ValueError(f"padding_mode must be 'zeros' (the finalized layers pad with "
                             f"zeros), got {padding_mode!r}")
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, device, dtype)
        self._init_quantized(recipe, device)

    @classmethod
    def from_float(cls, module: nn.Conv2d, recipe: Recipe | str) -> QuantConv2d:
        layer = cls(module.in_channels, module.out_channels, module.kernel_size, module.stride,
                    module.padding, module.dilation, module.groups, module.bias is not None,
                    module.padding_mode, device="meta", recipe=recipe)
        return _sharing_parameters(layer, module)

    @staticmethod
    def _matrix_of_weight(w: torch.Tensor) -> torch.Tensor:
        return conv_weight_as_matrix(w)

    def _weight_of_matrix(self, matrix: torch.Tensor) -> torch.Tensor:
        return matrix_as_conv_weight(matrix, self.out_channels, self.kernel_size)

    def _layer(self, x, weight, bias):
        return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, self.groups)


def _sharing_parameters(layer, module):
    """``layer`` (built on the meta device) with ``module``'s own parameters, its calibrated
    buffers on their device, and its training mode."""
    layer.weight = module.weight
    layer.bias = module.bias
    device = module.weight.device
    for name in layer.recipe.calibrated:
        initial = math.nan if name == "input_scale" else 0
        setattr(layer, name, torch.full((), initial, dtype=_CALIBRATED_DTYPES[name],
                                        device=device))
    layer.train(module.training)
    return layer

"""``FinalizedLinear`` and ``FinalizedConv2d``: a layer whose weight is stored packed.

One mechanism for every format (``formats.py``). The buffers are the packing contract's
tensors, so ``state_dict()`` holds exactly what docs/checkpoint_format.md describes, plus
``bias`` and the activation format's calibrated ``input_scale`` / ``input_zero_point``.

The forward is inference only (no backward through the quantizers; use it under
``torch.no_grad()`` or ``torch.inference_mode()``):
- the portable path: unpack and dequantize the weight in the input's dtype, quantize the input
  with the fake-quant slot of its activation format, then ``F.linear`` / ``F.conv2d``. It is the
  parity oracle, what runs on the CPU, and all a graph capture (ONNX export, ``torch.jit.trace``,
  ``torch.export``, ``torch.compile``) ever sees: no triton and no CUDA needed;
- eager on CUDA: for weight 'fp8' on a Linear or a 1x1 Conv2d, the fused FP8 GEMM where its
  measured policy engages it (``_fused``), else the same math with the weight dequantized once
  per dtype and kept with the cast bias (``_dequantized``) until a buffer changes, which costs
  the dense weight's memory in that dtype on top of the packed bytes.

The unpack slot and the input's fake-quant slot are called through the layer's own call sites
(``libreyolo.nn.slot_sites``): each selects its implementation once per input description.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from libreyolo.capture import EXPORT, graph_capture, is_capturing
from libreyolo.quant import validation as v
from libreyolo.quant.formats import E4M3, int_qmax
from libreyolo.quant.numerics import finite_amax, scale_from_amax

from ..conv_weight import conv_weight_as_matrix, matrix_as_conv_weight
from ..input_layout import quantize_input
from ..slot_sites import SlotSite
from .formats import _PACKED_INTEGERS, ACTIVATION_FORMATS, WEIGHT_FORMATS

# The per-channel weight scale from_float computes when none is given: the channel's finite
# amax over the format's max (docs/quantization.md, rule 6's rule for computed scales).
_PER_CHANNEL_QMAX = {"fp8": E4M3.max_value, "int8": float(int_qmax(8))}
# The activation formats' calibrated buffers and their dtypes, part of the contract as the packed
# tensors are (module casts never convert them, see `_apply`).
_ACTIVATION_DTYPES = {"input_scale": torch.float32, "input_zero_point": torch.int8}


class _Finalized(nn.Module):
    """Buffers, checks, the dequantize-once cache and the forward shared by both layer kinds.

    A subclass gives the weight's shape, its matrix (rows, cols) for the row formats, how the
    matrix becomes the weight (``_weight_of_matrix``), and the layer's op (``_layer``).
    """

    def __init__(self, weight_shape, rows, cols, out_features, bias, weight, activation, bits,
                 group_size, device):
        super().__init__()
        if not isinstance(weight, str):
            raise TypeError(f"weight must be a string, one of {tuple(WEIGHT_FORMATS)}, got "
                            f"{weight!r}")
        if weight not in WEIGHT_FORMATS:
            raise ValueError(f"weight must be one of {tuple(WEIGHT_FORMATS)}, got {weight!r}")
        self._format = WEIGHT_FORMATS[weight]
        if activation not in self._format.activations:
            raise ValueError(f"activation must be one of {self._format.activations} for "
                             f"weight={weight!r}, got {activation!r}")
        self._activation = ACTIVATION_FORMATS.get(activation)
        self._options = self._checked_options(bits, group_size)
        if not isinstance(bias, bool):
            raise TypeError(f"bias must be a bool, got {type(bias).__name__}")
        self.weight_format, self.activation_format = weight, activation
        self._cols = cols
        self._layout = self._format.layout(tuple(weight_shape), rows, cols, self._options)
        for name, (shape, dtype) in self._layout.items():
            self.register_buffer(name, torch.zeros(shape, dtype=dtype, device=device))
        self.register_buffer("bias", torch.zeros(out_features, device=device) if bias else None)
        for name in self._activation.buffers if self._activation else ():
            self.register_buffer(name, torch.zeros((), dtype=_ACTIVATION_DTYPES[name],
                                                   device=device))
        self._zero_point = 0  # the host's copy of input_zero_point (read when it is loaded)
        self._cache = None
        # the layer's own call sites: each selects once per description (``slot_sites``)
        self._unpack_slots, self._input_slots = SlotSite(), SlotSite()

    def _checked_options(self, bits, group_size) -> dict:
        given = {"bits": bits, "group_size": group_size}
        for name, value in given.items():
            if name not in self._format.options and value is not None:
                raise ValueError(f"{name}: only weight='int_grouped' takes it, got {value!r} for "
                                 f"weight={self._format.name!r}")
        if not self._format.options:
            return {}
        return {"bits": v.check_bits("bits", bits),
                "group_size": v.check_positive_int("group_size", group_size)}

    # -- loading -----------------------------------------------------------------------------

    def load_packed(self, packed, bias=None, *, input_scale=None, input_zero_point=None):
        """Fill the layer from packed weights (a ``libreyolo.quant.packing`` NamedTuple of this
        layer's format), the float ``bias`` and the activation format's calibrated values.
        Every tensor's dtype and shape is checked exactly; returns the layer."""
        if not isinstance(packed, self._format.packed):
            raise TypeError(f"packed must be a {self._format.packed.__name__} for weight="
                            f"{self._format.name!r}, got {type(packed).__name__}")
        expected = {"axis": 0, "in_features": self._cols, **self._options}
        for name in _PACKED_INTEGERS:
            if name in packed._fields and getattr(packed, name) != expected[name]:
                raise ValueError(f"packed.{name} must be {expected[name]} for this layer, got "
                                 f"{getattr(packed, name)!r}")
        tensors = {name: getattr(packed, name) for name in self._format.fields}
        for name, tensor in tensors.items():
            self._check_tensor(f"packed.{name}", tensor, *self._layout[name])
        if (bias is None) != (self.bias is None):
            raise ValueError(f"bias: this layer was built with bias={self.bias is not None}, got "
                             f"{'None' if bias is None else 'a tensor'}")
        if bias is not None:
            v.check_float_tensor("bias", bias)
            if tuple(bias.shape) != tuple(self.bias.shape):
                raise ValueError(f"bias must have shape {tuple(self.bias.shape)}, got "
                                 f"{tuple(bias.shape)}")
            tensors["bias"] = bias
        tensors.update(self._activation_values(input_scale, input_zero_point))
        with torch.no_grad():
            for name, tensor in tensors.items():
                getattr(self, name).copy_(tensor.detach())
        self._zero_point = self._read_zero_point()
        return self

    def _activation_values(self, input_scale, input_zero_point) -> dict[str, torch.Tensor]:
        wanted = self._activation.buffers if self._activation else ()
        given = {"input_scale": input_scale, "input_zero_point": input_zero_point}
        values = {}
        for name, value in given.items():
            if name not in wanted:
                if value is not None:
                    raise ValueError(f"{name}: activation={self.activation_format!r} takes none, "
                                     f"got {value!r}")
                continue
            if value is None:
                raise ValueError(f"{name} is required for activation={self.activation_format!r}")
            if name == "input_scale":
                values[name] = v.check_scale(name, value, (), getattr(value, "device", None))
            else:
                zero_point = v.check_zero_point(name, value)
                values[name] = torch.tensor(zero_point, dtype=torch.int8)
        return values

    def _check_tensor(self, name, tensor, shape, dtype) -> None:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dtype != dtype or tuple(tensor.shape) != tuple(shape):
            raise ValueError(f"{name} must be {str(dtype).removeprefix('torch.')} of shape "
                             f"{tuple(shape)}, got {str(tensor.dtype).removeprefix('torch.')} "
                             f"of shape {tuple(tensor.shape)}")

    def _contract_dtypes(self) -> dict[str, torch.dtype]:
        """Buffers whose dtype is the packing contract's (not the bias)."""
        names = self._activation.buffers if self._activation else ()
        return {**{n: dtype for n, (_, dtype) in self._layout.items()},
                **{n: _ACTIVATION_DTYPES[n] for n in names}}

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        """A checkpoint's tensors must have the contract's dtypes exactly: ``copy_`` would
        silently convert, say, float32 codes into float8 ones."""
        for name, dtype in self._contract_dtypes().items():
            tensor = state_dict.get(prefix + name)
            if isinstance(tensor, torch.Tensor) and tensor.dtype != dtype:
                error_msgs.append(f"{prefix + name} must be {str(dtype).removeprefix('torch.')}, "
                                  f"got {str(tensor.dtype).removeprefix('torch.')}")
                return
        scale = state_dict.get(prefix + "input_scale")
        if "input_scale" in self._contract_dtypes() and isinstance(scale, torch.Tensor) and \
                scale.shape == () and not scale.is_meta:
            try:  # the value load_packed checks: a NaN scale would quantize every input to NaN
                v.check_scale(prefix + "input_scale", scale, (), scale.device)
            except ValueError as exc:
                error_msgs.append(str(exc))
                return
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)
        self._zero_point = self._read_zero_point()
        self._cache = None

    def _read_zero_point(self) -> int:
        """The zero point as a Python int, read on the host once per load: a tensor zero point
        cannot be read inside a graph capture, and the forward must never sync for it."""
        if getattr(self, "input_zero_point", None) is None:
            return 0
        return int(self.input_zero_point)

    def _apply(self, fn, recurse=True):
        contract = {id(getattr(self, name)) for name in self._contract_dtypes()}

        def keeping_contract_dtypes(t):
            if id(t) not in contract:
                return fn(t)
            moved = fn(t.new_empty(0))  # where, and as what, fn sends a tensor of t's dtype
            return fn(t) if moved.dtype == t.dtype else t.to(moved.device)

        self._cache = None
        return super()._apply(keeping_contract_dtypes, recurse)

    # -- forward -----------------------------------------------------------------------------

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        capture = graph_capture()
        if x.is_cuda and capture != EXPORT:  # under torch.compile: the fused operator
            fused = self._fused(x)
            if fused is not None:
                return fused
        if x.is_cuda and capture is None:
            weight, bias = self._dequantized(x.dtype)
        else:
            weight, bias = self._dequantize(x.dtype), self._bias_as(x.dtype)
        return self._layer(self._quantize_input(x), weight, bias)

    def _fused(self, x: torch.Tensor) -> torch.Tensor | None:
        """The fused FP8 GEMM (``fp8_linear``: prologue, tensor-core GEMM, epilogue) for weight
        'fp8' on the input's channels-last rows; None where it does not engage (its measured
        policy, docs/fp8_execute.md), and the forward dequantizes once instead. Its output is
        within the GEMM's bound of the portable forward, not bit-equal to it."""
        if self.weight_format != "fp8":
            return None
        as_rows = self._as_rows(x)
        if as_rows is None:
            return None
        rows, back = as_rows
        static = self.activation_format == "fp8_static"
        out = _fp8_linear()(rows, self._codes_matrix(), self.scale, self.bias,
                            input_scale=self.input_scale if static else None)
        return None if out is None else back(out)

    def _codes_matrix(self) -> torch.Tensor:
        """The (out, in) codes: the buffer itself, or one view of a 1x1 kernel's kept while the
        buffer is the same tensor (``fp8_linear`` keeps its padded weight per weight object)."""
        codes = self.codes
        if codes.dim() == 2:
            return codes
        if is_capturing():  # a traced graph keeps no view of this process's
            return codes.reshape(codes.shape[0], -1)
        kept = self.__dict__.get("_codes_view")
        if kept is None or kept[0] is not codes:
            kept = self.__dict__["_codes_view"] = (codes, codes.reshape(codes.shape[0], -1))
        return kept[1]

    def _check_input(self, x) -> None:
        v.check_float_tensor("x", x)
        if x.device != self.codes.device:
            raise ValueError(f"x is on {x.device}, the layer's buffers on {self.codes.device}")

    def _quantize_input(self, x: torch.Tensor) -> torch.Tensor:
        if self._activation is None:
            return x
        scale, quantize = getattr(self, "input_scale", None), self._activation.quantize
        return quantize_input(x, lambda view: quantize(self._input_slots, view, scale,
                                                       self._zero_point),
                              per_pixel=self._activation.along_channels,
                              channels_last=self._channels_last)

    def _dequantize(self, dtype: torch.dtype) -> torch.Tensor:
        """The weight in ``dtype``: unpack and dequantize (the portable path)."""
        buffers = {name: getattr(self, name) for name in self._layout}
        unpacked = self._format.unpack(self._unpack_slots, buffers, self._cols, self._options,
                                       dtype)
        return unpacked if self._format.per_channel else self._weight_of_matrix(unpacked)

    def _bias_as(self, dtype: torch.dtype) -> torch.Tensor | None:
        return None if self.bias is None else self.bias.to(dtype)

    def _dequantized(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(weight, bias)`` in ``dtype``: ``_dequantize(dtype)`` and the cast bias, kept until a
        buffer changes (in place, by loading or replacing it) or the layer moves; the check reads
        no device data. The bias is kept with the weight because casting it on every call was a
        kernel launch of its own, a large share of a small layer's time (``benchmarks/NOTES.md``,
        "bench_finalized.py: first H200 runs"). Inference tensors have no version counter and
        a weight first seen inside a CUDA graph capture must not be kept (its memory is the
        graph's), so those are made on every call."""
        buffers = self._buffers
        tensors = tuple(buffers[name] for name in self._layout)
        if buffers["bias"] is not None:
            tensors += (buffers["bias"],)
        try:
            # the storage address too: a ``.data =`` swap keeps the version counter
            versions = tuple((t._version, t.data_ptr()) for t in tensors)
        except RuntimeError:  # an inference tensor: no version counter
            return self._dequantize(dtype), self._bias_as(dtype)
        cached = self._cache
        if cached is not None and cached[0] == dtype and cached[2] == versions and all(
                a is b for a, b in zip(cached[1], tensors, strict=True)):
            return cached[3]
        made = self._dequantize(dtype), self._bias_as(dtype)
        if not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
            self._cache = (dtype, tensors, versions, made)
        return made

    def extra_repr(self) -> str:
        options = "".join(f", {k}={val}" for k, val in self._options.items())
        return (f"{self._geometry_repr()}, bias={self.bias is not None}, "
                f"weight={self.weight_format!r}, activation={self.activation_format!r}{options}")

    # -- from a calibrated float layer --------------------------------------------------------

    def _load_float(self, module, weight_scale, global_amax, input_scale, input_zero_point):
        """Pack ``module``'s weight in this layer's format and load it with the calibration."""
        w = v.check_float_tensor("module.weight", module.weight.detach())
        v.check_all_finite("module.weight", w)
        weight = self.weight_format
        if weight_scale is not None and not self._format.per_channel:
            raise ValueError(f"weight_scale: only weight='fp8' or 'int8' takes a per-channel "
                             f"scale, got one for weight={weight!r}")
        if global_amax is not None and weight != "nvfp4":
            raise ValueError(f"global_amax: only weight='nvfp4' takes it, got one for "
                             f"weight={weight!r}")
        if self._format.per_channel:
            if weight_scale is None:
                amax = finite_amax(w.float(), tuple(range(1, w.dim()))).reshape(-1)
                weight_scale = scale_from_amax(amax, _PER_CHANNEL_QMAX[weight])
            v.check_scale("weight_scale", weight_scale, (w.shape[0],), w.device)
            packed = self._format.pack(w, self._options, weight_scale, None)
        else:
            packed = self._format.pack(self._matrix_of_weight(w), self._options, None, global_amax)
        return self.load_packed(packed, module.bias, input_scale=input_scale,
                                input_zero_point=input_zero_point)


@functools.cache
def _fp8_linear():
    """The fused FP8 linear, imported on the first eager CUDA call (loading a finalized layer
    needs neither triton nor CUDA)."""
    from libreyolo.kernels.quant.execute.fp8_linear import fp8_linear

    return fp8_linear


def _int_pair(name: str, value, *, minimum: int) -> tuple[int, int]:
    """An int or a pair of ints, each at least ``minimum``, as ``nn.Conv2d`` takes them; refused
    here, at construction, with the argument's name (``F.conv2d`` would refuse a 1-tuple, a
    3-tuple, a float or a negative padding only at the first forward)."""
    pair = (value, value) if isinstance(value, int) else value
    if not isinstance(pair, (tuple, list)) or len(pair) != 2:
        raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
    for n in pair:
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"{name} must be an int or a pair of ints, got {value!r}")
        if n < minimum:
            kind = "a positive int" if minimum == 1 else "a non-negative int"
            raise ValueError(f"{name} must be {kind} (or a pair of them), got {value!r}")
    return tuple(pair)


def _check_module(module, module_type) -> None:
    if not isinstance(module, module_type):
        raise TypeError(f"module must be a torch.nn.{module_type.__name__}, got "
                        f"{type(module).__name__}")


class FinalizedLinear(_Finalized):
    """``nn.Linear`` with a packed weight; ``forward(x)`` takes ``(..., in_features)``.

    ``FinalizedLinear(in_features, out_features, bias=True, *, weight, activation=None,
    bits=None, group_size=None, device=None)`` builds an empty layer to ``load_state_dict`` or
    ``load_packed`` into; ``from_float`` quantizes a calibrated ``nn.Linear``.
    ``weight``: ``fp8``, ``int8``, ``int_grouped`` (with ``bits`` 2, 4 or 8 and ``group_size``),
    ``nvfp4``, ``mxfp4``, ``mxfp8``; ``activation``: see ``formats.WEIGHT_FORMATS`` (docs/
    finalized_models.md has the table).
    """

    _channels_last = True  # the input's channels are its last dim

    @staticmethod
    def _as_rows(x):
        return x, lambda out: out

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, weight: str,
                 activation: str | None = None, bits: int | None = None,
                 group_size: int | None = None, device=None):
        v.check_positive_int("in_features", in_features)
        v.check_positive_int("out_features", out_features)
        self.in_features, self.out_features = in_features, out_features
        super().__init__((out_features, in_features), out_features, in_features, out_features,
                         bias, weight, activation, bits, group_size, device)

    @classmethod
    def from_float(cls, module: nn.Linear, weight: str, activation: str | None = None, *,
                   bits: int | None = None, group_size: int | None = None,
                   weight_scale: torch.Tensor | None = None,
                   global_amax: torch.Tensor | None = None,
                   input_scale: torch.Tensor | None = None,
                   input_zero_point: int | torch.Tensor | None = None) -> FinalizedLinear:
        """Quantize a calibrated ``nn.Linear``: ``weight_scale`` (fp8, int8: float32
        ``(out_features,)``; default the channel's amax over 448 or 127), ``global_amax``
        (nvfp4, optional), ``input_scale`` (float32 0-dim: fp8_static, int8_affine) and
        ``input_zero_point`` (int8_affine) are what calibration found."""
        _check_module(module, nn.Linear)
        layer = cls(module.in_features, module.out_features, module.bias is not None,
                    weight=weight, activation=activation, bits=bits, group_size=group_size,
                    device=module.weight.device)
        return layer._load_float(module, weight_scale, global_amax, input_scale, input_zero_point)

    @staticmethod
    def _matrix_of_weight(w: torch.Tensor) -> torch.Tensor:
        return w

    @staticmethod
    def _weight_of_matrix(matrix: torch.Tensor) -> torch.Tensor:
        """Contiguous: the reference unpack returns a ragged row's padded stride, the kernel a
        dense one, and a GEMM may pick its algorithm (so its bits) by the leading dimension."""
        return matrix.contiguous()

    def _check_input(self, x) -> None:
        super()._check_input(x)
        if x.dim() < 1 or x.shape[-1] != self.in_features:
            raise ValueError(f"x must have shape (..., in_features={self.in_features}), got "
                             f"{tuple(x.shape)}")

    def _layer(self, x, weight, bias):
        return F.linear(x, weight, bias)

    def _geometry_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}"


class FinalizedConv2d(_Finalized):
    """``nn.Conv2d`` (any kernel size, stride, padding, dilation, groups; zero padding) with a
    packed weight; ``forward(x)`` takes ``(N, C, H, W)`` or ``(C, H, W)``.

    The constructor mirrors ``nn.Conv2d``'s plus the format arguments of ``FinalizedLinear``.
    Activation formats with per-row or per-block scales quantize each pixel's channels as one
    row (the channels-last GEMM's rows); per-tensor ones the whole input.
    """

    _channels_last = False

    def _as_rows(self, x):
        """A 1x1, stride-1, unpadded, ungrouped convolution is a linear layer on each pixel's
        channels: its rows, and the way back; None for any other geometry (dequantized once)."""
        if (self.kernel_size, self.stride, self.groups) != ((1, 1), (1, 1), 1) or \
                self.padding not in ((0, 0), "valid", "same"):
            return None
        channels, last = x.dim() - 3, x.dim() - 1
        return x.movedim(channels, last), lambda out: out.movedim(last, channels)

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, *, weight: str,
                 activation: str | None = None, bits: int | None = None,
                 group_size: int | None = None, device=None):
        for name, n in (("in_channels", in_channels), ("out_channels", out_channels),
                        ("groups", groups)):
            v.check_positive_int(name, n)
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"in_channels ({in_channels}) and out_channels ({out_channels}) "
                             f"must be divisible by groups ({groups})")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride, self.dilation = (
            _int_pair(name, value, minimum=1) for name, value in
            (("kernel_size", kernel_size), ("stride", stride), ("dilation", dilation)))
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"padding must be 'same', 'valid' or ints, got {padding!r}")
            self.padding = padding
        else:
            self.padding = _int_pair("padding", padding, minimum=0)
        if padding == "same" and self.stride != (1, 1):
            raise ValueError(f"padding='same' needs stride 1 (as nn.Conv2d), got {self.stride}")
        kh, kw = self.kernel_size
        per_group = in_channels // groups
        super().__init__((out_channels, per_group, kh, kw), out_channels * kh * kw, per_group,
                         out_channels, bias, weight, activation, bits, group_size, device)

    @classmethod
    def from_float(cls, module: nn.Conv2d, weight: str, activation: str | None = None, *,
                   bits: int | None = None, group_size: int | None = None,
                   weight_scale: torch.Tensor | None = None,
                   global_amax: torch.Tensor | None = None,
                   input_scale: torch.Tensor | None = None,
                   input_zero_point: int | torch.Tensor | None = None) -> FinalizedConv2d:
        """Quantize a calibrated ``nn.Conv2d`` (zero padding); arguments as
        ``FinalizedLinear.from_float``."""
        _check_module(module, nn.Conv2d)
        if module.padding_mode != "zeros":
            raise ValueError(f"module.padding_mode must be 'zeros', got {module.padding_mode!r}")
        layer = cls(module.in_channels, module.out_channels, module.kernel_size, module.stride,
                    module.padding, module.dilation, module.groups, module.bias is not None,
                    weight=weight, activation=activation, bits=bits, group_size=group_size,
                    device=module.weight.device)
        return layer._load_float(module, weight_scale, global_amax, input_scale, input_zero_point)

    @staticmethod
    def _matrix_of_weight(w: torch.Tensor) -> torch.Tensor:
        return conv_weight_as_matrix(w)

    def _weight_of_matrix(self, matrix: torch.Tensor) -> torch.Tensor:
        return matrix_as_conv_weight(matrix, self.out_channels, self.kernel_size)

    def _check_input(self, x) -> None:
        super()._check_input(x)
        if x.dim() not in (3, 4) or x.shape[-3] != self.in_channels:
            raise ValueError(f"x must have shape (N, in_channels={self.in_channels}, H, W) or "
                             f"(in_channels, H, W), got {tuple(x.shape)}")

    def _layer(self, x, weight, bias):
        return F.conv2d(x, weight, bias, self.stride, self.padding, self.dilation, self.groups)

    def _geometry_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, dilation={self.dilation}, "
                f"groups={self.groups}")

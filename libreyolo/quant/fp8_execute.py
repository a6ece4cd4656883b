"""What the FP8 execute slots compute: the definitions their kernels are judged against.

A finalized FP8 linear runs ``y = act((x_q @ w_q^T) * s_x * s_w + bias)`` on E4M3 codes. Its
pieces, each a slot (docs/fp8_execute.md):

- ``fp8_cast_static`` / ``fp8_cast_dynamic``: activations to E4M3 codes. They are the quantizer
  of ``libreyolo.quant.quantizers.fp8`` (per-tensor, or dynamic per-row) with its codes stored as
  ``float8_e4m3fn``: no second copy of the math. A code on the E4M3 grid within +-448 casts
  exactly; NaN (which the quantizer passes through) is stored as ``0x7F`` whatever its sign, so the
  bytes do not depend on how a device casts NaN.
- ``fp8_perchannel_epilogue``: a float32 accumulator to the output, in this float32 order:
  ``((acc * row_scale) * col_scale) + bias``, then the activation, then one round-to-nearest-even
  cast, NaN written as the output dtype's canonical quiet NaN.
- ``fp8_gemm`` / ``fp8_gemm_tensorwise``: no reference (the bits depend on the accumulation order);
  ``fp8_gemm_portable`` is the caller's portable path and the bounded contract's yardstick, and
  ``check_fp8_gemm`` is the slot's judge of bad input.
"""

from __future__ import annotations

import torch

from libreyolo.quant import quantizers
from libreyolo.quant import validation as v
from libreyolo.quant.numerics import canonical_nan_like

E4M3_CODES = torch.float8_e4m3fn
#: The activations an epilogue applies after the bias, by name.
EPILOGUE_ACTIVATIONS = (None, "relu")


def _e4m3(codes: torch.Tensor) -> torch.Tensor:
    """Quantizer codes (float32 on the E4M3 grid, |code| <= 448, or NaN) stored as E4M3 bytes."""
    positive_nan = torch.full((), float("nan"), dtype=torch.float32, device=codes.device)
    return torch.where(torch.isnan(codes), positive_nan, codes).to(E4M3_CODES)


def fp8_cast_static(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """E4M3 codes of ``x`` (rank >= 1) with one float32 0-dim ``scale``: the per-tensor
    quantizer's ``clamp(round_e4m3(x / scale), -448, 448)``, +0 everywhere when the scale is 0."""
    v.check_float_tensor("x", x)
    v.check_min_rank("x", x, 1)
    v.check_scale("scale", scale, (), x.device)
    return _e4m3(quantizers.fp8(x, scale, fmt="e4m3").codes)


def fp8_cast_dynamic(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """E4M3 codes of ``x`` (rank >= 1) and its float32 per-row scales ``(..., 1)``: the dynamic
    per-row quantizer, scale = finite row amax / 448 (1 for a row whose finite amax is 0)."""
    result = quantizers.fp8(x, None, fmt="e4m3")
    return _e4m3(result.codes), result.scales["scale"]


def check_epilogue(acc, row_scale, col_scale, bias, activation, out_dtype) -> None:
    """``fp8_perchannel_epilogue``'s arguments, each error naming its argument."""
    if not isinstance(acc, torch.Tensor) or acc.dtype != torch.float32:
        raise TypeError(f"acc must be a float32 tensor, got {_described(acc)}")
    v.check_dense("acc", acc)
    v.check_rank("acc", acc, 2)
    rows, cols = acc.shape
    _check_float32("row_scale", row_scale, (rows, 1), acc.device)
    _check_float32("col_scale", col_scale, (cols,), acc.device)
    _check_out_dtype(out_dtype)
    _check_bias(bias, cols, out_dtype, acc.device)
    if activation not in EPILOGUE_ACTIVATIONS:
        raise ValueError(f"activation must be one of {EPILOGUE_ACTIVATIONS}, got {activation!r}")


def fp8_perchannel_epilogue(acc, row_scale, col_scale, bias=None, activation=None,
                            out_dtype=torch.bfloat16) -> torch.Tensor:
    """``act(((acc * row_scale) * col_scale) + bias)`` in float32, one cast to ``out_dtype``.

    ``acc``: float32 (M, N); ``row_scale``: float32 (M, 1); ``col_scale``: float32 (N,);
    ``bias``: (N,) of ``out_dtype`` or None; ``activation``: None or ``"relu"``
    (``where(y < 0, +0, y)``: NaN and -0.0 pass). NaN outputs are the canonical quiet NaN.
    """
    check_epilogue(acc, row_scale, col_scale, bias, activation, out_dtype)
    y = acc * row_scale
    y = y * col_scale
    if bias is not None:
        y = y + bias.float()
    if activation == "relu":
        y = torch.where(y < 0, 0.0, y)
    out = y.to(out_dtype)
    return torch.where(torch.isnan(y), canonical_nan_like(out_dtype, y.device), out)


def check_fp8_gemm(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16, *,
                   rowwise: bool = True) -> None:
    """The GEMM slots' arguments: ``a`` (M, K) and ``b`` (N, K) E4M3 codes (``b`` is the weight as
    stored, output channels first), float32 scales (rowwise: ``scale_a`` (M, 1) and ``scale_b``
    (N,); tensorwise: both 0-dim), ``bias`` (N,) of ``out_dtype`` or None."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor) or t.dtype != E4M3_CODES:
            raise TypeError(f"{name} must be a float8_e4m3fn tensor, got {_described(t)}")
        v.check_dense(name, t)
        v.check_rank(name, t, 2)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"b must have a's K = {a.shape[1]} columns, got shape {tuple(b.shape)}")
    if b.device != a.device:
        raise ValueError(f"b must be on {a.device} (a's device), got {b.device}")
    rows, cols = a.shape[0], b.shape[0]
    _check_float32("scale_a", scale_a, (rows, 1) if rowwise else (), a.device)
    _check_float32("scale_b", scale_b, (cols,) if rowwise else (), a.device)
    _check_out_dtype(out_dtype)
    _check_bias(bias, cols, out_dtype, a.device)


def check_fp8_gemm_tensorwise(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16):
    check_fp8_gemm(a, b, scale_a, scale_b, bias, out_dtype, rowwise=False)


def fp8_gemm_portable(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16):
    """``(a @ b^T) * scale_a * scale_b + bias`` from the codes, accumulated in float32 (exact code
    products, one rounding per addition), cast to ``out_dtype``. Given float64 operands (the
    bounded contract's oracle: the same codes and scales widened) it computes and returns float64.
    Either scale mode: rowwise scales broadcast as (M, 1) and (N,), tensorwise ones are 0-dim."""
    wide = torch.float64 if scale_a.dtype == torch.float64 else torch.float32
    y = (a.to(wide) @ b.to(wide).T) * scale_a.to(wide) * scale_b.to(wide)
    if bias is not None:
        y = y + bias.to(wide)
    return y if wide == torch.float64 else y.to(out_dtype)


def _check_float32(name, t, shape, device) -> None:
    if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
        raise TypeError(f"{name} must be a float32 tensor, got {_described(t)}")
    v.check_dense(name, t)
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} must be on {device}, got {t.device}")


def _check_out_dtype(out_dtype) -> None:
    if out_dtype not in v.FLOAT_DTYPES:
        raise TypeError(f"out_dtype must be float32, float16 or bfloat16, got {out_dtype!r}")


def _check_bias(bias, cols, out_dtype, device) -> None:
    if bias is None:
        return
    if not isinstance(bias, torch.Tensor) or bias.dtype != out_dtype:
        raise TypeError(f"bias must be a {out_dtype} tensor or None, got {_described(bias)}")
    v.check_dense("bias", bias)
    if tuple(bias.shape) != (cols,):
        raise ValueError(f"bias must have shape ({cols},), got {tuple(bias.shape)}")
    if bias.device != device:
        raise ValueError(f"bias must be on {device}, got {bias.device}")


def _described(t) -> str:
    if isinstance(t, torch.Tensor):
        return f"a {str(t.dtype).removeprefix('torch.')} tensor"
    return type(t).__name__

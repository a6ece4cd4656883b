"""FP8 execute profiles (docs/fp8_execute.md): the prologue and epilogue exact against their
references, the GEMMs bounded against the same codes multiplied in float64. Kinds in `PROFILES`:
the cast (static or dynamic scale), the epilogue and the GEMM (rowwise or tensorwise scales).

Shapes come from real detector layers (`conformance/shapes/fp8_*.toml`); each GEMM case is an
(M, N, K) of a linear or 1x1 convolution. The GEMM inputs are what a finalized layer feeds it: the
activation's dynamic per-row codes and scales and the weight's per-channel codes and scales (or
one scale each, tensorwise), both made by the references' quantizer from seeded Gaussians.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from hypothesis import strategies as st

from conformance.inputs import generators as gen_
from conformance.inputs import strategies as layouts_st
from conformance.inputs.layouts import apply_layout
from conformance.inputs.numerics import E4M3
from conformance.schema.spec import (
    TRITON_EXPECTATION,
    Case,
    Expectation,
    Inputs,
    SlotSpec,
    error_input,
    tensor,
)

GEMM_EXPECTS = {"scaled_mm": Expectation(modes=frozenset({"cpu", "cuda", "cuda-graph"}))}
EXPECTS = {"triton": TRITON_EXPECTATION}
SPECIALS = (float("nan"), -0.0, 0.0, 3.0e38, -3.0e38, 1.0e-40)


def _shape(case: Case) -> tuple[int, ...]:
    return tuple(case.params["shape"])


def _cast_static(case, dtype, layout, gen):
    """A power-of-two scale, or the case's own ``scale`` (0: every code +0, signs and NaN
    included: the quantizer's documented edge)."""
    scale = gen_.powers_of_two((), gen) if "scale" not in case.params else \
        torch.tensor(float(case.params["scale"]))
    x = gen_.grid_values(_shape(case), E4M3, gen, over_max=True) * scale
    return Inputs((gen_.finish(x, dtype, layout), scale), grad_args=())


def _cast_dynamic(case, dtype, layout, gen):
    shape = _shape(case)
    x = gen_.blocked_values(shape, E4M3, gen, dim=-1, size=max(shape[-1], 1))
    return Inputs((gen_.finish(x, dtype, layout),), grad_args=())


def _with_specials(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A few elements replaced by NaN, signed zeros, values that overflow 16-bit outputs and a
    float32 subnormal (none under `plain_values`)."""
    if t.numel() == 0 or gen_._PLAIN.get():
        return t
    flat = t.reshape(-1)
    picks = torch.randint(0, flat.numel(), (len(SPECIALS),), generator=gen)
    flat[picks] = torch.tensor(SPECIALS)
    return flat.reshape(t.shape)


def _epilogue(case, dtype, layout, gen):
    m, n = _shape(case)
    acc = _with_specials(torch.randn((m, n), generator=gen) * 300.0, gen)
    row_scale = torch.rand((m, 1), generator=gen) * 0.02
    col_scale = gen_.channel_scales(n, gen)
    bias = (torch.randn(n, generator=gen) * 4.0).to(dtype) if case.params.get("bias", True) \
        else None
    activation = case.params.get("activation")
    return Inputs((apply_layout(acc, layout), row_scale, col_scale, bias, activation, dtype),
                  grad_args=())


def _quantized(rows: int, cols: int, std: float, gen: torch.Generator, rowwise: bool):
    """E4M3 codes of a seeded Gaussian and their float32 scales: per row (rows, 1) or 0-dim."""
    from libreyolo.quant import quantizers

    x = torch.randn((rows, cols), generator=gen) * std
    result = quantizers.fp8(x, None if rowwise else _tensor_scale(x))
    codes = result.codes.to(torch.float8_e4m3fn)
    return codes, result.scales["scale"]


def _tensor_scale(x: torch.Tensor) -> torch.Tensor:
    amax = x.abs().max() if x.numel() else torch.tensor(0.0)
    return torch.where(amax == 0, 1.0, amax / 448.0).float()


def _gemm(rowwise: bool):
    def make(case, dtype, layout, gen):
        m, n, k = case.params["m"], case.params["n"], case.params["k"]
        a, scale_a = _quantized(m, k, 1.0, gen, rowwise)
        b, scale_b = _quantized(n, k, 1.0 / math.sqrt(max(k, 1)), gen, rowwise)
        if rowwise:
            scale_b = scale_b.reshape(n)
        bias = (torch.randn(n, generator=gen) * 0.5).to(dtype) if case.params.get("bias", True) \
            else None
        return Inputs((apply_layout(a, layout), apply_layout(b, layout), scale_a, scale_b, bias,
                       dtype), grad_args=())

    return make


def _case(params: dict) -> Case:
    return Case(name="hypothesis", source="hypothesis", size="small", params=params)


def _rows_strategy():
    return layouts_st.shapes(min_dims=1, max_dims=3).map(lambda s: _case({"shape": list(s)}))


def _epilogue_strategy():
    return st.builds(lambda m, n, bias, act: _case({"shape": [m, n], "bias": bias,
                                                    "activation": act}),
                     layouts_st.sides(), layouts_st.sides(), st.booleans(),
                     st.sampled_from([None, "relu"]))


def _gemm_strategy():
    return st.builds(lambda m, n, k, bias: _case({"m": m, "n": n, "k": k, "bias": bias}),
                     layouts_st.sides(), layouts_st.sides(), layouts_st.sides(), st.booleans())


# Error inputs: docs/fp8_execute.md, "Bad input", worded as libreyolo/quant/fp8_execute.py and
# libreyolo/quant/validation.py word them. One defect per input on a valid small call.
RULE_CAST = "docs/fp8_execute.md: the prologue takes float tensors and a float32 0-dim scale"
RULE_EPILOGUE = "docs/fp8_execute.md: the epilogue's argument types and shapes"
RULE_GEMM = "docs/fp8_execute.md: the GEMM's operands, scales, bias and output dtype"
X = tensor()
SCALE = tensor((), values=0.5)
CAST_STATIC_ERRORS = (
    error_input("int32-x", TypeError, "x", RULE_CAST, tensor(dtype=torch.int32), SCALE),
    error_input("0-d-x", ValueError, "x", RULE_CAST, tensor(()), SCALE),
    error_input("no-scale", TypeError, "scale", RULE_CAST, X, None),
    error_input("1-d-scale", ValueError, "scale", RULE_CAST, X, tensor((4,), values=[0.5] * 4)),
    error_input("negative-scale", ValueError, "scale", RULE_CAST, X, tensor((), values=-0.5)),
    error_input("float16-scale", TypeError, "scale", RULE_CAST, X,
                tensor((), torch.float16, values=0.5)),
)
CAST_DYNAMIC_ERRORS = (
    error_input("int32-x", TypeError, "x", RULE_CAST, tensor(dtype=torch.int32)),
    error_input("float64-x", TypeError, "x", RULE_CAST, tensor(dtype=torch.float64)),
    error_input("0-d-x", ValueError, "x", RULE_CAST, tensor(())),
)
_ACC, _ROWS, _COLS = tensor((4, 6)), tensor((4, 1), values=[0.5] * 4), \
    tensor((6,), values=[0.25] * 6)
EPILOGUE_ERRORS = (
    error_input("float16-acc", TypeError, "acc", RULE_EPILOGUE, tensor((4, 6), torch.float16),
                _ROWS, _COLS),
    error_input("1-d-row-scale", ValueError, "row_scale", RULE_EPILOGUE, _ACC,
                tensor((4,), values=[0.5] * 4), _COLS),
    error_input("short-col-scale", ValueError, "col_scale", RULE_EPILOGUE, _ACC, _ROWS,
                tensor((5,), values=[0.25] * 5)),
    error_input("float32-bias-for-bfloat16", TypeError, "bias", RULE_EPILOGUE, _ACC, _ROWS, _COLS,
                tensor((6,))),
    error_input("gelu", ValueError, "activation", RULE_EPILOGUE, _ACC, _ROWS, _COLS, None,
                "gelu"),
    error_input("float64-out", TypeError, "out_dtype", RULE_EPILOGUE, _ACC, _ROWS, _COLS, None,
                None, torch.float64),
)
_A, _B = tensor((4, 32), torch.float8_e4m3fn), tensor((6, 32), torch.float8_e4m3fn)


def _gemm_errors(rowwise: bool) -> tuple:
    sa = tensor((4, 1), values=[0.5] * 4) if rowwise else SCALE
    sb_shape, sb_values = ((6,), [0.25] * 6) if rowwise else ((), 0.25)
    sb = tensor(sb_shape, values=sb_values)
    return (
        error_input("bfloat16-a", TypeError, "a", RULE_GEMM, tensor((4, 32), torch.bfloat16),
                    _B, sa, sb),
        error_input("b-of-another-k", ValueError, "b", RULE_GEMM, _A,
                    tensor((6, 48), torch.float8_e4m3fn), sa, sb),
        error_input("scale-a-of-wrong-shape", ValueError, "scale_a", RULE_GEMM, _A, _B,
                    tensor((4, 2), values=[0.5] * 8), sb),
        error_input("float16-scale-b", TypeError, "scale_b", RULE_GEMM, _A, _B, sa,
                    tensor(sb_shape, torch.float16, values=sb_values)),
        error_input("bias-of-wrong-length", ValueError, "bias", RULE_GEMM, _A, _B, sa, sb,
                    tensor((5,), torch.bfloat16)),
        error_input("int8-out", TypeError, "out_dtype", RULE_GEMM, _A, _B, sa, sb, None,
                    torch.int8),
    )


def cast(slot: str, *, scale: Literal["static", "dynamic"]) -> SlotSpec:
    """The prologue: activations (..., K) to E4M3 codes with a given per-tensor scale (static) or
    one per row from its amax (dynamic); cases: `shape` (and a static one's own `scale`)."""
    static = scale == "static"
    return SlotSpec(name=slot, make_inputs=_cast_static if static else _cast_dynamic,
                    strategy=_rows_strategy, expects=EXPECTS,
                    error_inputs=CAST_STATIC_ERRORS if static else CAST_DYNAMIC_ERRORS)


def epilogue(slot: str) -> SlotSpec:
    """The per-channel epilogue: a float32 (M, N) accumulator to the layer's output (cases:
    `shape`, `bias`, `activation`)."""
    return SlotSpec(name=slot, make_inputs=_epilogue, strategy=_epilogue_strategy,
                    expects=EXPECTS, error_inputs=EPILOGUE_ERRORS)


def gemm(slot: str, *, scales: Literal["rowwise", "tensorwise"]) -> SlotSpec:
    """The E4M3 GEMM, activation scales per row and weight scales per output channel (rowwise)
    or one each (tensorwise); cases: `m`, `n`, `k`, `bias`."""
    rowwise = scales == "rowwise"
    return SlotSpec(name=slot, make_inputs=_gemm(rowwise), strategy=_gemm_strategy,
                    expects=GEMM_EXPECTS, error_inputs=_gemm_errors(rowwise))


PROFILES = {"cast": cast, "epilogue": epilogue, "gemm": gemm}

"""Fake-quantization profiles: exact forward, straight-through backward (docs/quantization.md).

`PROFILES` maps each kind of profile to its factory; a slot's shape set
(`conformance/shapes/<slot>.toml`) names its kind and parameters in `[profile]`. A profile builds
its inputs from a shape-set case and draws new cases from a hypothesis strategy; both go through
the same `make_inputs`.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Literal

import torch
from hypothesis import strategies as st

from conformance.inputs import generators as gen_
from conformance.inputs import strategies as layouts_st
from conformance.inputs.numerics import E2M1, E4M3, E5M2, INT8_AFFINE, INT_BITS
from conformance.schema.spec import (
    TRITON_EXPECTATION,
    Case,
    Inputs,
    SlotSpec,
    error_input,
    tensor,
)

EXPECTS = {"triton": TRITON_EXPECTATION}
FP8_GRIDS = {"e4m3": E4M3, "e5m2": E5M2}
BLOCK_GRIDS = {"e2m1": E2M1, "e4m3": E4M3}


def ste_mask(op: str):
    """The reference's straight-through mask for `op` (`libreyolo.quant.fake_quant.ste_mask`),
    imported at call time so the catalogue loads without the references."""

    def mask(*args, **kwargs):
        from libreyolo.quant.fake_quant import ste_mask as reference_mask

        return reference_mask(op, *args, **kwargs)

    mask.__qualname__ = f"ste_mask[{op}]"
    return mask


def _shape(case: Case) -> tuple[int, ...]:
    return tuple(case.params["shape"])


def _per_channel(grid, case, dtype, layout, gen):
    shape, axis = _shape(case), case.params.get("axis", 0)
    n = shape[axis] if shape else 1
    scale = gen_.channel_scales(n, gen)
    unit = torch.where(scale == 0, 1.0, scale).reshape([n if d == axis % len(shape) else 1
                                                         for d in range(len(shape))])
    x = gen_.grid_values(shape, grid, gen, over_max=True) * unit
    return Inputs((gen_.finish(x, dtype, layout), scale, axis))


def _affine(case, dtype, layout, gen):
    zero_point = int(case.params.get("zero_point", 0))
    scale = gen_.powers_of_two((), gen)
    y = gen_.grid_values(_shape(case), INT8_AFFINE, gen, over_max=True) - zero_point
    return Inputs((gen_.finish(y * scale, dtype, layout), scale, zero_point))


def _fp8(case, dtype, layout, gen):
    shape, fmt, mode = _shape(case), case.params["fmt"], case.params["scale"]
    grid = FP8_GRIDS[fmt]
    if mode == "dynamic":
        x = gen_.blocked_values(shape, grid, gen, dim=-1, size=max(shape[-1], 1))
        return Inputs((gen_.finish(x, dtype, layout),), {"fmt": fmt})
    if mode == "tensor":
        scale = gen_.powers_of_two((), gen)
        x = gen_.grid_values(shape, grid, gen, over_max=True) * scale
        return Inputs((gen_.finish(x, dtype, layout), scale), {"fmt": fmt})
    axis = case.params.get("axis", 0)
    dim = axis % len(shape)
    scale = gen_.channel_scales(shape[dim], gen)
    unit = torch.where(scale == 0, 1.0, scale).reshape(
        [shape[dim] if d == dim else 1 for d in range(len(shape))])
    x = gen_.grid_values(shape, grid, gen, over_max=True) * unit
    return Inputs((gen_.finish(x, dtype, layout), scale), {"fmt": fmt, "axis": axis})


def _int_grouped(case, dtype, layout, gen):
    bits, group = case.params["bits"], case.params["group_size"]
    w = gen_.blocked_values(_shape(case), INT_BITS[bits], gen, dim=1, size=group)
    return Inputs((gen_.finish(w, dtype, layout), bits, group))


def _blocked(grid, size, dim, case, dtype, layout, gen):
    x = gen_.blocked_values(_shape(case), grid, gen, dim=dim, size=size)
    return Inputs((gen_.finish(x, dtype, layout),))


def _nvfp4_weight(case, dtype, layout, gen):
    w = gen_.blocked_values(_shape(case), E2M1, gen, dim=1, size=16)
    kwargs = {}
    if case.params.get("global_amax", False):
        finite = w[torch.isfinite(w)].abs()
        kwargs["global_amax"] = finite.max() if finite.numel() else torch.tensor(0.0)
    return Inputs((gen_.finish(w, dtype, layout),), kwargs)


# Error inputs: the rules of docs/quantization.md ("Rules common to every op"), worded as
# libreyolo/quant/validation.py words them. One defect per input, on a valid (4, 6) float32 x.
RULE_DTYPE = "docs/quantization.md rule 1: float32, float16 or bfloat16 tensors, else TypeError"
RULE_SCALE = ("docs/quantization.md rules 7 and 13: a user-given scale is a float32 tensor of "
              "exactly the stated shape on the input's device, finite and non-negative")
RULE_RANK = "docs/quantization.md, the op's signature: the rank the op is defined on"
RULE_ARGS = "docs/quantization.md, the op's signature: the parameter's type and range"
X = tensor()
NAN, INF = float("nan"), float("inf")


def _bad_float_input(name: str, *rest, **kwargs) -> list:
    """The quantized argument as an integer, complex or float64 tensor (rule 1)."""
    return [error_input(f"{str(dtype).removeprefix('torch.')}-{name}", TypeError, name,
                        RULE_DTYPE, tensor(dtype=dtype), *rest, **kwargs)
            for dtype in (torch.int32, torch.complex64, torch.float64)]


def _bad_scales(arg: str, shape: tuple, call, label: str | None = None) -> list:
    """A user-given scale of `shape` broken once per rule-13 clause; `call(scale)` places it in
    the op's arguments, `label` names it (default: `arg`). The bad element is the last one, so
    checking the first is not enough."""
    n = max(len(shape) and shape[0], 1)

    def last(value):
        return tensor(shape, values=[0.5] * (n - 1) + [value])

    wrong_shape = (n + 1,) if shape else (1,)
    cases = [("negative", ValueError, last(-0.5)), ("nan", ValueError, last(NAN)),
             ("infinite", ValueError, last(INF)),
             ("wrong-shape", ValueError, tensor(wrong_shape, values=[0.5] * wrong_shape[0])),
             ("float16", TypeError, tensor(shape, torch.float16, values=[0.5] * n)),
             ("on-another-device", ValueError, tensor(shape, values=[0.5] * n, on="other")),
             ("python-float", TypeError, 0.5)]
    return [error_input(f"{what}-{label or arg}", error, arg, RULE_SCALE, *args, **kwargs)
            for what, error, value in cases for args, kwargs in [call(value)]]


def _weight_rank(name: str, *rest) -> list:
    return [error_input(f"{len(shape)}-d-{name}", ValueError, name, RULE_RANK,
                        tensor(shape), *rest) for shape in ((24,), (2, 3, 4))]


PER_CHANNEL_ERRORS = (
    *_bad_float_input("x", tensor((4,), values=[0.5] * 4)),
    *_bad_scales("scale", (4,), lambda s: ((X, s, 0), {})),
    error_input("0-d-x", ValueError, "x", RULE_RANK, tensor(()), tensor((1,), values=[0.5])),
    error_input("axis-out-of-range", ValueError, "axis", RULE_ARGS, X,
                tensor((4,), values=[0.5] * 4), 2),
    error_input("float-axis", TypeError, "axis", RULE_ARGS, X, tensor((4,), values=[0.5] * 4),
                0.0),
)
AFFINE_ERRORS = (
    *_bad_float_input("x", tensor((), values=0.5), 0),
    *_bad_scales("scale", (), lambda s: ((X, s, 0), {})),
    error_input("zero-point-128", ValueError, "zero_point", RULE_ARGS, X,
                tensor((), values=0.5), 128),
    error_input("float-zero-point", TypeError, "zero_point", RULE_ARGS, X,
                tensor((), values=0.5), 1.5),
)
FP8_ERRORS = (
    *_bad_float_input("x"),
    *_bad_scales("scale", (), lambda s: ((X, s), {})),
    *_bad_scales("scale", (4,), lambda s: ((X, s), {"axis": 0}), label="channel-scale"),
    error_input("unknown-format", ValueError, "fmt", RULE_ARGS, X, fmt="e3m4"),
    error_input("axis-without-scale", ValueError, "axis", RULE_SCALE, X, axis=0),
    error_input("1-d-scale-without-axis", ValueError, "scale", RULE_SCALE, X,
                tensor((4,), values=[0.5] * 4)),
    error_input("axis-out-of-range", ValueError, "axis", RULE_ARGS, X,
                tensor((4,), values=[0.5] * 4), axis=2),
)
GROUPED_ERRORS = (
    *_bad_float_input("w", 4, 2),
    *_weight_rank("w", 4, 2),
    error_input("3-bits", ValueError, "bits", RULE_ARGS, X, 3, 2),
    error_input("float-bits", TypeError, "bits", RULE_ARGS, X, 4.0, 2),
    error_input("zero-group-size", ValueError, "group_size", RULE_ARGS, X, 4, 0),
    error_input("bool-group-size", TypeError, "group_size", RULE_ARGS, X, 4, True),
)
NVFP4_WEIGHT_ERRORS = (
    *_bad_float_input("w"),
    *_weight_rank("w"),
    *_bad_scales("global_amax", (), lambda s: ((X, s), {})),
)
ACTIVATION_ERRORS = (
    *_bad_float_input("x"),
    error_input("0-d-x", ValueError, "x", RULE_RANK, tensor(())),
)
WEIGHT_ERRORS = (*_bad_float_input("w"), *_weight_rank("w"))


def _applied(op: str, *, axis=None, block=None, zero_point: bool = False):
    """The scales (as the reference's quantizer computes them) that applied at output `index`:
    `axis(inputs)` picks a per-channel scale, `block(inputs)` the block or group size along the
    last dim; a 0-dim scale applies everywhere; `zero_point`: also the third argument."""

    def applied(inputs: Inputs, index: tuple) -> dict:
        from libreyolo.quant import quantizers

        x = inputs.args[0]
        scales = getattr(quantizers, op.removeprefix("fake_quant_"))(
            *(a.detach() if isinstance(a, torch.Tensor) else a for a in inputs.args),
            **inputs.kwargs).scales
        found = {}
        for name, s in scales.items():
            s = s.detach().cpu()
            if s.dim() == 0:
                found[name] = s
            elif axis is not None and axis(inputs) is not None and s.dim() == 1:
                found[name] = s[index[axis(inputs) % x.dim()]]
            else:  # one scale per row (of the leading dims) and block of the last dim
                rows = s.reshape(math.prod(x.shape[:-1]), -1)
                row = sum(i * math.prod(x.shape[d + 1:-1]) for d, i in enumerate(index[:-1]))
                found[f"{name} (row {row}, block {index[-1] // block(inputs)})" if
                      rows.shape[1] > 1 else f"{name} (row {row})"] = \
                    rows[row, index[-1] // block(inputs) if rows.shape[1] > 1 else 0]
        if zero_point:
            found["zero_point"] = int(inputs.args[2])
        return found

    return applied


def _third_arg(default):
    return lambda inputs: inputs.args[2] if len(inputs.args) > 2 else default


def _spec(slot, make_inputs, strategy, error_inputs, applied):
    return SlotSpec(name=slot, make_inputs=make_inputs, strategy=strategy,
                    ste_mask=ste_mask(slot), expects=EXPECTS, error_inputs=error_inputs,
                    applied=applied)


def _case(params: dict) -> Case:
    return Case(name="hypothesis", source="hypothesis", size="small", params=params)


def _with_axis(shape_st, **fixed):
    return shape_st.flatmap(lambda shape: st.integers(-len(shape), len(shape) - 1).map(
        lambda axis: _case({"shape": list(shape), "axis": axis, **fixed})))


def _fp8_strategy():
    fmt = st.sampled_from(sorted(FP8_GRIDS))
    channel = fmt.flatmap(lambda f: _with_axis(layouts_st.shapes(min_dims=1), fmt=f,
                                               scale="channel"))
    other = st.builds(lambda shape, f, mode: _case({"shape": list(shape), "fmt": f, "scale": mode}),
                      layouts_st.shapes(min_dims=1), fmt, st.sampled_from(["tensor", "dynamic"]))
    return st.one_of(channel, other)


def _grouped_strategy():
    return st.builds(lambda shape, bits, group: _case({"shape": list(shape), "bits": bits,
                                                        "group_size": group}),
                     layouts_st.shapes(min_dims=2, max_dims=2), st.sampled_from([2, 4, 8]),
                     layouts_st.group_sizes())


def _plain(min_dims, max_dims=4):
    return lambda: layouts_st.shapes(min_dims=min_dims, max_dims=max_dims).map(
        lambda shape: _case({"shape": list(shape)}))


def per_channel(slot: str, *, bits: Literal[2, 4, 8]) -> SlotSpec:
    """Symmetric integers of `bits` (codes in ±(2^(bits-1) - 1)) with a user-given scale per
    channel along `axis` (cases: `shape`, `axis`); the error inputs are int8 per-channel's, whose
    rules every op of this signature shares."""
    return _spec(slot, partial(_per_channel, INT_BITS[bits]),
                 lambda: _with_axis(layouts_st.shapes(min_dims=1)), PER_CHANNEL_ERRORS,
                 _applied(slot, axis=_third_arg(0)))


def affine(slot: str) -> SlotSpec:
    """int8 with a user-given per-tensor scale and zero point (cases: `shape`, `zero_point`)."""
    return _spec(slot, _affine,
                 lambda: st.builds(lambda s, zp: _case({"shape": list(s), "zero_point": zp}),
                                   layouts_st.shapes(min_dims=0), st.integers(-128, 127)),
                 AFFINE_ERRORS, _applied(slot, zero_point=True))


def fp8(slot: str) -> SlotSpec:
    """E4M3 or E5M2 with a per-tensor, per-channel or dynamic per-row scale, chosen per case
    (`shape`, `fmt`, `scale`, `axis`)."""
    return _spec(slot, _fp8, _fp8_strategy, FP8_ERRORS,
                 _applied(slot, axis=lambda inputs: inputs.kwargs.get("axis"),
                          block=lambda inputs: inputs.args[0].shape[-1]))


def grouped(slot: str) -> SlotSpec:
    """Integers with one data-derived scale per group of a 2-D weight's row (cases: `shape`,
    `bits`, `group_size`)."""
    return _spec(slot, _int_grouped, _grouped_strategy, GROUPED_ERRORS,
                 _applied(slot, block=_third_arg(None)))


def nvfp4_weight(slot: str) -> SlotSpec:
    """NVFP4 of a 2-D weight: E2M1 in blocks of 16 along dim 1, with an optional user-given
    global amax (cases: `shape`, `global_amax`)."""
    return _spec(slot, _nvfp4_weight,
                 lambda: st.builds(lambda s, g: _case({"shape": list(s), "global_amax": g}),
                                   layouts_st.shapes(min_dims=2, max_dims=2), st.booleans()),
                 NVFP4_WEIGHT_ERRORS, _applied(slot, block=lambda inputs: 16))


def blocked(slot: str, *, grid: Literal["e2m1", "e4m3"], block: int,
            operand: Literal["weight", "activation"]) -> SlotSpec:
    """Elements on `grid` with one data-derived scale per `block` elements, of a 2-D weight
    (blocks along dim 1) or an activation of any rank (blocks along the last dim); the weight or
    the dynamic ops' error inputs (cases: `shape`)."""
    weight = operand == "weight"
    return _spec(slot, partial(_blocked, BLOCK_GRIDS[grid], block, 1 if weight else -1),
                 _plain(2, 2) if weight else _plain(1),
                 WEIGHT_ERRORS if weight else ACTIVATION_ERRORS,
                 _applied(slot, block=lambda inputs: block))


PROFILES = {"per_channel": per_channel, "affine": affine, "fp8": fp8, "grouped": grouped,
            "nvfp4_weight": nvfp4_weight, "blocked": blocked}

"""Hostile inputs of the ms_deform_attn slot, shared by every path's tests.

Each bad input is the valid ``HOSTILE_CASE`` broken in one way; the portable core, the Triton
implementation and the dispatch helper must all raise the listed exception (the interpreter
child checks the Triton side). Non-finite locations are legal: every path reads them as zero.
"""

import torch

from conformance.inputs.ms_deform_attn_cases import load_cases

HOSTILE_CASE = next(c for c in load_cases(sizes=("small",)) if c.name == "levels_1x1")

NON_FINITE = {"nan": float("nan"), "plus_inf": float("inf"), "minus_inf": float("-inf")}

# Bad input: (id, how the valid inputs are broken, exception, words the message must contain).
# Inputs are HOSTILE_CASE: batch 3, levels 1x1, 2x3, 1x1 (len_in 8), 2 heads x 8, 5 queries,
# 3 points. Every path (portable, Triton, the module's helpers) must raise the same exception.
BAD_INPUTS = [
    ("len_in_not_sum_hw", lambda v, s, loc, w: (v[:, :-1], s, loc, w), ValueError,
     ["len_in=7", "sum(H*W)=8"]),
    ("spatial_shapes_int32", lambda v, s, loc, w: (v, s.int(), loc, w), TypeError,
     ["spatial_shapes", "int64", "torch.int32"]),
    ("spatial_shapes_float", lambda v, s, loc, w: (v, s.double(), loc, w), TypeError,
     ["spatial_shapes", "int64"]),
    ("spatial_shapes_not_pairs", lambda v, s, loc, w: (v, s.view(-1), loc, w), ValueError,
     ["spatial_shapes", "(levels, 2)"]),
    ("spatial_shapes_zero_size", lambda v, s, loc, w: (v, s * 0, loc, w), ValueError,
     ["spatial_shapes", "positive"]),
    ("value_3d", lambda v, s, loc, w: (v.flatten(2), s, loc, w), ValueError,
     ["value", "(batch, len_in, heads, channels)"]),
    ("locations_wrong_heads", lambda v, s, loc, w: (v, s, loc[:, :, :1], w[:, :, :1]), ValueError,
     ["sampling_locations", "(batch, len_q, heads, levels, points, 2)"]),
    ("locations_wrong_levels", lambda v, s, loc, w: (v, s, loc[:, :, :, :2], w[:, :, :, :2]),
     ValueError, ["sampling_locations", "levels"]),
    ("locations_wrong_batch", lambda v, s, loc, w: (v, s, loc[:2], w[:2]), ValueError,
     ["sampling_locations", "(3, len_q, 2, 3, points, 2)"]),
    ("weights_wrong_points", lambda v, s, loc, w: (v, s, loc, w[..., :2]), ValueError,
     ["attention_weights", "(3, 5, 2, 3, 3)", "(3, 5, 2, 3, 2)"]),
    ("weights_dtype", lambda v, s, loc, w: (v, s, loc, w.double()), TypeError,
     ["attention_weights", "torch.float64", "share a dtype"]),
    ("value_integer", lambda v, s, loc, w: (v.long(), s, loc, w), TypeError,
     ["value", "floating-point"]),
    ("locations_not_a_tensor", lambda v, s, loc, w: (v, s, loc.tolist(), w), TypeError,
     ["sampling_locations", "torch.Tensor", "list"]),
    ("weights_on_another_device", lambda v, s, loc, w: (v, s, loc, w.to("meta")), ValueError,
     ["attention_weights", "meta", "one device"]),
    ("value_on_another_device", lambda v, s, loc, w: (v.to("meta"), s, loc, w), ValueError,
     ["sampling_locations", "meta", "one device"]),
    ("len_in_not_sum_hw_pairs", lambda v, s, loc, w: (v[:, :-1], s.tolist(), loc, w), ValueError,
     ["len_in=7", "sum(H*W)=8"]),
    ("spatial_shapes_negative", lambda v, s, loc, w: (v, s * -1, loc, w), ValueError,
     ["spatial_shapes", "positive"]),
    ("spatial_shapes_zero_pairs", lambda v, s, loc, w: (v, [(0, 1), (2, 4), (1, 1)], loc, w),
     ValueError, ["spatial_shapes", "positive"]),
    # a level whose H*W does not fit int32 (the kernels' offsets): the sizes disagree with len_in
    ("level_2_31_by_1", lambda v, s, loc, w: (v, torch.cat([s.new_tensor([[2**31, 1]]), s[1:]]),
                                             loc, w), ValueError,
     ["len_in=8", f"sum(H*W)={2**31 + 7}"]),
    ("level_2_31_by_1_pairs", lambda v, s, loc, w: (v, [(2**31, 1), (2, 3), (1, 1)], loc, w),
     ValueError, ["len_in=8", f"sum(H*W)={2**31 + 7}"]),
    ("spatial_shapes_pairs_of_floats", lambda v, s, loc, w: (v, [(1.0, 1.0), (2, 3), (1, 1)],
                                                            loc, w),
     TypeError, ["spatial_shapes", "pairs of ints"]),
    # issue 35: sizes that are not sizes, and what used to fail deep inside
    ("spatial_shapes_bool_level", lambda v, s, loc, w: (v, [(True, 1), (2, 3), (1, 1)], loc, w),
     TypeError, ["spatial_shapes", "pairs of ints"]),
    ("spatial_shapes_int", lambda v, s, loc, w: (v, 8, loc, w), TypeError,
     ["spatial_shapes", "got int"]),
    ("spatial_shapes_0_d", lambda v, s, loc, w: (v, s.new_tensor(8).reshape(()), loc, w),
     ValueError, ["spatial_shapes", "(levels, 2)"]),
    ("spatial_shapes_meta", lambda v, s, loc, w: (v, s.to("meta"), loc, w), ValueError,
     ["spatial_shapes", "meta"]),
    ("spatial_shapes_sparse", lambda v, s, loc, w: (v, s.to_sparse(), loc, w), TypeError,
     ["spatial_shapes", "dense"]),
    ("value_sparse", lambda v, s, loc, w: (v.to_sparse(), s, loc, w), TypeError,
     ["value", "dense"]),
]

"""Type stub of ``libreyolo.kernels.ops``, one function per slot: generated from
the entry points' signatures and docstrings by ``python tests/packaging/test_typing.py``; do not
edit."""

import torch

def fake_quant_int8_per_channel(
    x: torch.Tensor,
    scale: torch.Tensor,
    axis: int = 0,
) -> torch.Tensor:
    """
    fake_quant_int8_per_channel(x, scale, axis=0)

    Symmetric int8 (±127), one scale per channel.

    Dispatches slot 'fake_quant_int8_per_channel': the first eligible implementation that
    takes the input runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows
    which, and why). Defined for inputs of dtype float32, float16, bfloat16; layouts
    contiguous, gapped, transposed.

    Args:
        x (torch.Tensor): the straight-through gradient flows to it
        scale (torch.Tensor)
        axis (int, default 0)

    Returns:
        torch.Tensor: like('x'): The shape and device of argument `name`, its dtype or
            `dtype`.

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the reference
            (libreyolo.quant.fake_quant:fake_quant_int8_per_channel) raises it.
        NoImplementationError: no implementation took the input (the message gives each
            one's reason).
    """

def fake_quant_int8_affine(
    x: torch.Tensor,
    scale: torch.Tensor,
    zero_point: int,
) -> torch.Tensor:
    """
    fake_quant_int8_affine(x, scale, zero_point)

    Int8 [-128, 127] with per-tensor scale and zero point.

    Dispatches slot 'fake_quant_int8_affine': the first eligible implementation that takes
    the input runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and
    why). Defined for inputs of dtype float32, float16, bfloat16; layouts contiguous,
    gapped, transposed.

    Args:
        x (torch.Tensor): the straight-through gradient flows to it
        scale (torch.Tensor)
        zero_point (int)

    Returns:
        torch.Tensor: like('x'): The shape and device of argument `name`, its dtype or
            `dtype`.

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the reference
            (libreyolo.quant.fake_quant:fake_quant_int8_affine) raises it.
        NoImplementationError: no implementation took the input (the message gives each
            one's reason).
    """

def fake_quant_fp8(
    x: torch.Tensor,
    scale: torch.Tensor | None = None,
    *,
    fmt: str = 'e4m3',
    axis: int | None = None,
) -> torch.Tensor:
    """
    fake_quant_fp8(x, scale=None, *, fmt='e4m3', axis=None)

    FP8 E4M3/E5M2: per-tensor, per-channel or dynamic per-row.

    Dispatches slot 'fake_quant_fp8': the first eligible implementation that takes the input
    runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and why).
    Defined for inputs of dtype float32, float16, bfloat16; layouts contiguous, gapped,
    transposed.

    Args:
        x (torch.Tensor): the straight-through gradient flows to it
        scale (torch.Tensor | None, default None)
        fmt (str, default 'e4m3')
        axis (int | None, default None)

    Returns:
        torch.Tensor: like('x'): The shape and device of argument `name`, its dtype or
            `dtype`.

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the reference
            (libreyolo.quant.fake_quant:fake_quant_fp8) raises it.
        NoImplementationError: no implementation took the input (the message gives each
            one's reason).
    """

def fake_quant_int_grouped(
    w: torch.Tensor,
    bits: int,
    group_size: int,
) -> torch.Tensor:
    """
    fake_quant_int_grouped(w, bits, group_size)

    Int2/int4/int8, one scale per group of inputs.

    Dispatches slot 'fake_quant_int_grouped': the first eligible implementation that takes
    the input runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and
    why). Defined for inputs of dtype float32, float16, bfloat16; layouts contiguous,
    gapped, transposed.

    Args:
        w (torch.Tensor): the straight-through gradient flows to it
        bits (int)
        group_size (int)

    Returns:
        torch.Tensor: like('w'): The shape and device of argument `name`, its dtype or
            `dtype`.

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the reference
            (libreyolo.quant.fake_quant:fake_quant_int_grouped) raises it.
        NoImplementationError: no implementation took the input (the message gives each
            one's reason).
    """

def fake_quant_nvfp4_weight(
    w: torch.Tensor,
    global_amax: torch.Tensor | None = None,
) -> torch.Tensor:
    """
    fake_quant_nvfp4_weight(w, global_amax=None)

    NVFP4 weight: E2M1, 16-blocks, E4M3 + fp32 scales.

    Dispatches slot 'fake_quant_nvfp4_weight': the first eligible implementation that takes
    the input runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and
    why). Defined for inputs of dtype float32, float16, bfloat16; layouts contiguous,
    gapped, transposed.

    Args:
        w (torch.Tensor): the straight-through gradient flows to it
        global_amax (torch.Tensor | None, default None)

    Returns:
        torch.Tensor: like('w'): The shape and device of argument `name`, its dtype or
            `dtype`.

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the reference
            (libreyolo.quant.fake_quant:fake_quant_nvfp4_weight) raises it.
        NoImplementationError: no implementation took the input (the message gives each
            one's reason).
    """

def fake_quant_nvfp4_dynamic(
    x: torch.Tensor,
) -> torch.Tensor:
    """
    fake_quant_nvfp4_dynamic(x)

    NVFP4 activation, scales from the tensor itself.

    Dispatches slot 'fake_quant_nvfp4_dynamic': the first eligible implementation that takes
    the input runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and
    why). Defined for inputs of dtype float32, float16, bfloat16; layouts contiguous,
    gapped, transposed.

    Args:
        x (torch.Tensor): the straight-through gradient flows to it

    Returns:
        torch.Tensor: like('x'): The shape and device of argument `name`, its dtype or
            `dtype`.

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the reference
            (libreyolo.quant.fake_quant:fake_quant_nvfp4_dynamic) raises it.
        NoImplementationError: no implementation took the input (the message gives each
            one's reason).
    """

def fake_quant_mxfp4_weight(
    w: torch.Tensor,
) -> torch.Tensor:
    """
    fake_quant_mxfp4_weight(w)

    MXFP4 weight: E2M1, 32-blocks, E8M0 scales.

    Dispatches slot 'fake_quant_mxfp4_weight': the first eligible implementation that takes
    the input runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and
    why). Defined for inputs of dtype float32, float16, bfloat16; layouts contiguous,
    gapped, transposed.

    Args:
        w (torch.Tensor): the straight-through gradient flows to it

    Returns:
        torch.Tensor: like('w'): The shape and device of argument `name`, its dtype or
            `dtype`.

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the reference
            (libreyolo.quant.fake_quant:fake_quant_mxfp4_weight) raises it.
        NoImplementationError: no implementation took the input (the message gives each
            one's reason).
    """

def fake_quant_mxfp4_dynamic(
    x: torch.Tensor,
) -> torch.Tensor:
    """
    fake_quant_mxfp4_dynamic(x)

    MXFP4 activation, blocks along the last dim.

    Dispatches slot 'fake_quant_mxfp4_dynamic': the first eligible implementation that takes
    the input runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and
    why). Defined for inputs of dtype float32, float16, bfloat16; layouts contiguous,
    gapped, transposed.

    Args:
        x (torch.Tensor): the straight-through gradient flows to it

    Returns:
        torch.Tensor: like('x'): The shape and device of argument `name`, its dtype or
            `dtype`.

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the reference
            (libreyolo.quant.fake_quant:fake_quant_mxfp4_dynamic) raises it.
        NoImplementationError: no implementation took the input (the message gives each
            one's reason).
    """

def fake_quant_mxfp8_weight(
    w: torch.Tensor,
) -> torch.Tensor:
    """
    fake_quant_mxfp8_weight(w)

    MXFP8 weight: E4M3, 32-blocks, E8M0 scales.

    Dispatches slot 'fake_quant_mxfp8_weight': the first eligible implementation that takes
    the input runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and
    why). Defined for inputs of dtype float32, float16, bfloat16; layouts contiguous,
    gapped, transposed.

    Args:
        w (torch.Tensor): the straight-through gradient flows to it

    Returns:
        torch.Tensor: like('w'): The shape and device of argument `name`, its dtype or
            `dtype`.

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the reference
            (libreyolo.quant.fake_quant:fake_quant_mxfp8_weight) raises it.
        NoImplementationError: no implementation took the input (the message gives each
            one's reason).
    """

def fake_quant_mxfp8_dynamic(
    x: torch.Tensor,
) -> torch.Tensor:
    """
    fake_quant_mxfp8_dynamic(x)

    MXFP8 activation, blocks along the last dim.

    Dispatches slot 'fake_quant_mxfp8_dynamic': the first eligible implementation that takes
    the input runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and
    why). Defined for inputs of dtype float32, float16, bfloat16; layouts contiguous,
    gapped, transposed.

    Args:
        x (torch.Tensor): the straight-through gradient flows to it

    Returns:
        torch.Tensor: like('x'): The shape and device of argument `name`, its dtype or
            `dtype`.

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the reference
            (libreyolo.quant.fake_quant:fake_quant_mxfp8_dynamic) raises it.
        NoImplementationError: no implementation took the input (the message gives each
            one's reason).
    """

def unpack_int_grouped(
    codes: torch.Tensor,
    scale: torch.Tensor,
    bits: int,
    group_size: int,
    in_features: int,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """
    unpack_int_grouped(codes, scale, bits, group_size, in_features, dtype=torch.float32)

    Packed grouped int2/int4/int8 codes to floats.

    Dispatches slot 'unpack_int_grouped': the first eligible implementation that takes the
    input runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and
    why). Defined for inputs of dtype float32, float16, bfloat16; layouts contiguous,
    gapped, transposed.

    Args:
        codes (torch.Tensor)
        scale (torch.Tensor)
        bits (int)
        group_size (int)
        in_features (int)
        dtype (torch.dtype, default float32)

    Returns:
        torch.Tensor: unpacked('in_features'): ``(codes rows, in_features)`` of the
            ``dtype`` argument on the codes' device (MXFP8's

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the reference
            (libreyolo.quant.packing:unpack_int_grouped) raises it.
        NoImplementationError: no implementation took the input (the message gives each
            one's reason).
    """

def unpack_nvfp4(
    codes: torch.Tensor,
    block_scale: torch.Tensor,
    tensor_scale: torch.Tensor,
    in_features: int,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """
    unpack_nvfp4(codes, block_scale, tensor_scale, in_features, dtype=torch.float32)

    Packed NVFP4 codes and scales to floats.

    Dispatches slot 'unpack_nvfp4': the first eligible implementation that takes the input
    runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and why).
    Defined for inputs of dtype float32, float16, bfloat16; layouts contiguous, gapped,
    transposed.

    Args:
        codes (torch.Tensor)
        block_scale (torch.Tensor): E4M3 codes (torch.float8_e4m3fn)
        tensor_scale (torch.Tensor)
        in_features (int)
        dtype (torch.dtype, default float32)

    Returns:
        torch.Tensor: unpacked('in_features'): ``(codes rows, in_features)`` of the
            ``dtype`` argument on the codes' device (MXFP8's

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the reference
            (libreyolo.quant.packing:unpack_nvfp4) raises it.
        NoImplementationError: no implementation took the input (the message gives each
            one's reason).
    """

def unpack_mxfp4(
    codes: torch.Tensor,
    scale: torch.Tensor,
    in_features: int,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """
    unpack_mxfp4(codes, scale, in_features, dtype=torch.float32)

    Packed MXFP4 codes and scales to floats.

    Dispatches slot 'unpack_mxfp4': the first eligible implementation that takes the input
    runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and why).
    Defined for inputs of dtype float32, float16, bfloat16; layouts contiguous, gapped,
    transposed.

    Args:
        codes (torch.Tensor)
        scale (torch.Tensor)
        in_features (int)
        dtype (torch.dtype, default float32)

    Returns:
        torch.Tensor: unpacked('in_features'): ``(codes rows, in_features)`` of the
            ``dtype`` argument on the codes' device (MXFP8's

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the reference
            (libreyolo.quant.packing:unpack_mxfp4) raises it.
        NoImplementationError: no implementation took the input (the message gives each
            one's reason).
    """

def unpack_mxfp8(
    codes: torch.Tensor,
    scale: torch.Tensor,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """
    unpack_mxfp8(codes, scale, dtype=torch.float32)

    Packed MXFP8 codes and scales to floats.

    Dispatches slot 'unpack_mxfp8': the first eligible implementation that takes the input
    runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and why).
    Defined for inputs of dtype float32, float16, bfloat16; layouts contiguous, gapped,
    transposed.

    Args:
        codes (torch.Tensor): E4M3 codes (torch.float8_e4m3fn)
        scale (torch.Tensor)
        dtype (torch.dtype, default float32)

    Returns:
        torch.Tensor: unpacked(None): ``(codes rows, in_features)`` of the ``dtype``
            argument on the codes' device (MXFP8's

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the reference
            (libreyolo.quant.packing:unpack_mxfp8) raises it.
        NoImplementationError: no implementation took the input (the message gives each
            one's reason).
    """

def fp8_cast_static(
    x: torch.Tensor,
    scale: torch.Tensor,
) -> torch.Tensor:
    """
    fp8_cast_static(x, scale)

    Activations to E4M3 codes with a per-tensor scale (the FP8 GEMM's prologue).

    Dispatches slot 'fp8_cast_static': the first eligible implementation that takes the
    input runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and
    why). Defined for inputs of dtype float32, float16, bfloat16; layouts contiguous,
    gapped, transposed.

    Args:
        x (torch.Tensor)
        scale (torch.Tensor)

    Returns:
        torch.Tensor: like('x', torch.float8_e4m3fn): The shape and device of argument
            `name`, its dtype or `dtype`.

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the reference
            (libreyolo.quant.fp8_execute:fp8_cast_static) raises it.
        NoImplementationError: no implementation took the input (the message gives each
            one's reason).
    """

def fp8_cast_dynamic(
    x: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """
    fp8_cast_dynamic(x)

    Activations to E4M3 codes and per-row scales in one pass (dynamic prologue).

    Dispatches slot 'fp8_cast_dynamic': the first eligible implementation that takes the
    input runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and
    why). Defined for inputs of dtype float32, float16, bfloat16; layouts contiguous,
    gapped, transposed.

    Args:
        x (torch.Tensor)

    Returns:
        tuple[torch.Tensor, torch.Tensor]: fp8_codes_and_row_scales: E4M3 codes shaped like
            ``x``, and float32 scales, one per row: ``x.shape[:-1] + (1,)``.

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the reference
            (libreyolo.quant.fp8_execute:fp8_cast_dynamic) raises it.
        NoImplementationError: no implementation took the input (the message gives each
            one's reason).
    """

def fp8_perchannel_epilogue(
    acc: torch.Tensor,
    row_scale: torch.Tensor,
    col_scale: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """
    fp8_perchannel_epilogue(acc, row_scale, col_scale, bias=None, activation=None,
    out_dtype=torch.bfloat16)

    Float32 accumulator x row scale x column scale + bias, ReLU, cast.

    Dispatches slot 'fp8_perchannel_epilogue': the first eligible implementation that takes
    the input runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and
    why). Defined for inputs of dtype float32, float16, bfloat16; layouts contiguous,
    gapped, transposed.

    Args:
        acc (torch.Tensor)
        row_scale (torch.Tensor)
        col_scale (torch.Tensor)
        bias (torch.Tensor | None, default None)
        activation (str | None, default None)
        out_dtype (torch.dtype, default bfloat16)

    Returns:
        torch.Tensor: epilogue: ``acc``'s shape and device in ``out_dtype``.

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the reference
            (libreyolo.quant.fp8_execute:fp8_perchannel_epilogue) raises it.
        NoImplementationError: no implementation took the input (the message gives each
            one's reason).
    """

def fp8_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor | None:
    """
    fp8_gemm(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16)

    E4M3 GEMM, per-row x per-output-channel scales, bias, out dtype.

    Dispatches slot 'fp8_gemm': the first eligible implementation that takes the input runs
    (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and why). Defined
    for inputs of dtype float16, bfloat16; layouts contiguous, gapped, transposed.

    Args:
        a (torch.Tensor): E4M3 codes (torch.float8_e4m3fn)
        b (torch.Tensor): E4M3 codes (torch.float8_e4m3fn)
        scale_a (torch.Tensor)
        scale_b (torch.Tensor)
        bias (torch.Tensor | None, default None)
        out_dtype (torch.dtype, default bfloat16)

    Returns:
        torch.Tensor | None: gemm: ``(a rows, b rows)`` (``b`` is stored output channels
            first) in ``out_dtype``. None when no implementation takes the input: the caller
            then runs its portable path (libreyolo.quant.fp8_execute:fp8_gemm_portable).

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the validator
            (libreyolo.quant.fp8_execute:check_fp8_gemm) raises it.
    """

def fp8_gemm_tensorwise(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor | None:
    """
    fp8_gemm_tensorwise(a, b, scale_a, scale_b, bias=None, out_dtype=torch.bfloat16)

    E4M3 GEMM with per-tensor scales, bias, out dtype.

    Dispatches slot 'fp8_gemm_tensorwise': the first eligible implementation that takes the
    input runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and
    why). Defined for inputs of dtype float16, bfloat16; layouts contiguous, gapped,
    transposed.

    Args:
        a (torch.Tensor): E4M3 codes (torch.float8_e4m3fn)
        b (torch.Tensor): E4M3 codes (torch.float8_e4m3fn)
        scale_a (torch.Tensor)
        scale_b (torch.Tensor)
        bias (torch.Tensor | None, default None)
        out_dtype (torch.dtype, default bfloat16)

    Returns:
        torch.Tensor | None: gemm: ``(a rows, b rows)`` (``b`` is stored output channels
            first) in ``out_dtype``. None when no implementation takes the input: the caller
            then runs its portable path (libreyolo.quant.fp8_execute:fp8_gemm_portable).

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the validator
            (libreyolo.quant.fp8_execute:check_fp8_gemm_tensorwise) raises it.
    """

def ms_deform_attn(
    value: torch.Tensor,
    spatial_shapes: torch.Tensor,
    sampling_locations: torch.Tensor,
    attention_weights: torch.Tensor,
) -> torch.Tensor | None:
    """
    ms_deform_attn(value, spatial_shapes, sampling_locations, attention_weights)

    Multi-scale deformable attention (Deformable-DETR layout).

    Dispatches slot 'ms_deform_attn': the first eligible implementation that takes the input
    runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and why).
    Defined for inputs of dtype float32, float16, bfloat16; layouts contiguous, gapped.

    Args:
        value (torch.Tensor): differentiable
        spatial_shapes (torch.Tensor)
        sampling_locations (torch.Tensor): differentiable
        attention_weights (torch.Tensor): differentiable

    Returns:
        torch.Tensor | None: attention: ``(batch, len_q, heads * channels)`` in the value's
            dtype. None when no implementation takes the input: the caller then runs its
            portable path
            (libreyolo.kernels.attention.ms_deform_attn.portable:ms_deform_attn_portable).

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the validator
            (libreyolo.kernels.attention.ms_deform_attn.portable:validate_inputs) raises it.
    """

def ms_deform_attn_ragged(
    value: torch.Tensor,
    spatial_shapes: torch.Tensor,
    sampling_locations: torch.Tensor,
    attention_weights: torch.Tensor,
    points_per_level: list[int],
    method: str = 'bilinear',
) -> torch.Tensor | None:
    """
    ms_deform_attn_ragged(value, spatial_shapes, sampling_locations, attention_weights,
    points_per_level, method='bilinear')

    Deformable attention with a point count per level, bilinear or discrete (RT-DETRv2).

    Dispatches slot 'ms_deform_attn_ragged': the first eligible implementation that takes
    the input runs (libreyolo.kernels.dispatch; python -m libreyolo.kernels shows which, and
    why). Defined for inputs of dtype float32, float16, bfloat16; layouts contiguous,
    gapped.

    Args:
        value (torch.Tensor): differentiable
        spatial_shapes (torch.Tensor)
        sampling_locations (torch.Tensor): differentiable; no gradient when
            method='discrete'
        attention_weights (torch.Tensor): differentiable
        points_per_level (list[int])
        method (str, default 'bilinear')

    Returns:
        torch.Tensor | None: attention: ``(batch, len_q, heads * channels)`` in the value's
            dtype. None when no implementation takes the input: the caller then runs its
            portable path
            (libreyolo.kernels.attention.ms_deform_attn.portable:ms_deform_attn_ragged_portable).

    Raises:
        TypeError: a call the signature does not take (a missing, unknown or repeated
            argument).
        ValueError, TypeError: a bad input, as the validator
            (libreyolo.kernels.attention.ms_deform_attn.portable:validate_ragged_inputs)
            raises it.
    """

"""Attention modules with a ``fused_attn`` flag, one per way the families compute attention.

Each module's manual path is its family's upstream equation, operation for operation (the source
of each is named in its docstring and in ``libreyolo/kernels/attention/families.toml``); the fused
path computes the same attention with ``torch.nn.functional.scaled_dot_product_attention``, its
additive terms folded into one ``attn_mask``. The fused path keeps that mask between calls
(``_Memo``): built once in the dtype and layout SDPA reads, not folded, cast and padded again on
every call; where it is built (the first call, inside CUDA-graph capture, in training) the fold
is one pass writing that layout. The flag is a plain attribute: it is not state, so the
state-dict keys are the same either way. Under ONNX export and ``torch.jit.trace`` the manual
path runs whatever the flag says (``manual_attention_required``).

These are inference modules: no attention dropout (every family runs with it at 0 at inference).
"""

from __future__ import annotations

import functools
import itertools
import math

import torch
import torch.nn.functional as F
from torch import nn

from libreyolo.kernels.attention import manual_attention_required

# Looked up at call time, so a conformance negative control can stand in for it.
sdpa = F.scaled_dot_product_attention

__all__ = [
    "GlobalTokenAttention",
    "ProjectedAttention",
    "QKVAttention",
    "SeparateProjAttention",
    "SpatialReductionAttention",
    "TinyViTAttention",
    "WindowAttention",
    "local_window_mask",
    "module_for_site",
    "shifted_window_mask",
]


def _positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")


def _heads(dim: int, num_heads: int) -> int:
    _positive(dim=dim, num_heads=num_heads)
    if dim % num_heads:
        raise ValueError(f"dim ({dim}) must be divisible by num_heads ({num_heads})")
    return dim // num_heads


#: Memory-efficient attention reads an additive mask in place only when every stride but the last
#: is a multiple of 8 elements; otherwise SDPA pads the last dimension to a multiple of 8 and
#: slices it back, a copy of the whole mask on every call (``preprocess_mask`` in PyTorch's
#: aten/src/ATen/native/transformers/attention.cpp). Its CUDA kernels also need the head width to
#: be a multiple of 8 in half precision (``check_head_dim_size_mem_efficient`` in
#: transformers/cuda/sdp_utils.cpp); flash takes no mask and cuDNN the same multiple of 8, so an
#: additive mask with another head width goes to the math fallback.
SDPA_ALIGNMENT = 8


def _is_aligned(mask: torch.Tensor) -> bool:
    """Whether memory-efficient attention reads ``mask`` without a copy (a broadcast view with
    stride-0 dimensions included)."""
    return mask.stride(-1) == 1 and all(s % SDPA_ALIGNMENT == 0 for s in mask.stride()[:-1])


def _aligned_empty(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An uninitialized tensor of ``shape`` whose rows start at multiples of ``SDPA_ALIGNMENT``
    elements: the last dimension padded and sliced back."""
    n = shape[-1]
    return torch.empty(*shape[:-1], n + -n % SDPA_ALIGNMENT, dtype=dtype, device=device)[..., :n]


def _autocast_dtype(device_type: str) -> torch.dtype | None:
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None


def _autocast_cast_dtype(dtype: torch.dtype, device_type: str) -> torch.dtype:
    """The dtype autocast casts a floating argument of ``dtype`` to (float64 and non-floating
    dtypes stay), so a tensor made in it is the very tensor the op would be handed."""
    target = _autocast_dtype(device_type)
    if target is None or not dtype.is_floating_point or dtype == torch.float64:
        return dtype
    return target


def _folded_for_sdpa(terms: tuple[torch.Tensor, ...], shape) -> torch.Tensor:
    """The sum of the additive ``terms`` as SDPA's ``attn_mask`` of ``shape``: added in their own
    dtype, as the manual path adds them, rounded once to the dtype autocast would hand SDPA and
    written into the layout memory-efficient attention reads (``_aligned_empty``), in one pass:
    one ``add`` with ``out=`` (computed in the inputs' dtype, cast on the store), one copy for a
    single term, nothing for a term already so. The terms broadcast to a shape of as many
    elements as ``shape`` (Swin's images apart from their windows). With autograd the sum is
    added first and copied in (``add`` with ``out=`` has no gradient; ``copy_`` does)."""
    dtype = _autocast_cast_dtype(functools.reduce(torch.promote_types, (t.dtype for t in terms)),
                                 terms[0].device.type)
    if (len(terms) == 1 and terms[0].dtype == dtype and tuple(terms[0].shape) == tuple(shape)
            and _is_aligned(terms[0])):
        return terms[0]
    mask = _aligned_empty(shape, dtype, terms[0].device)
    into = mask.view(torch.broadcast_shapes(*(t.shape for t in terms)))
    if len(terms) == 2 and not (torch.is_grad_enabled() and any(t.requires_grad for t in terms)):
        torch.add(*terms, out=into)
    else:
        into.copy_(functools.reduce(torch.add, terms))
    return mask


class _Memo:
    """One value built from some tensors, reused while they are unchanged: the same tensor
    objects (held here, so their addresses cannot be reused by others), each at the same version
    counter and storage (an optimizer step, ``load_state_dict``, any in-place ``copy_`` bumps the
    counter; ``.to()`` and ``.half()`` move the storage), and the same ``extra`` key.

    Built afresh, and not kept, where keeping would be wrong: when autograd must reach a source
    (grad enabled and a source requires grad: training gets the gradient through the mask), under
    ``torch.compile`` and ``torch.export`` (the traced graph folds it itself), inside CUDA-graph
    capture (the graph must compute the mask from the parameters, so replays follow in-place
    updates) and for inference tensors, which keep no version counter. An in-place change made
    through ``.data`` bypasses version counters, as it bypasses autograd: it is not seen.

    Not state: a deep copy or a pickle of the module starts empty."""

    def __init__(self):
        self._sources: list[torch.Tensor] = []
        self._stamp = None
        self._value = None

    def __reduce__(self):
        return _Memo, ()

    def __deepcopy__(self, memo):
        return _Memo()

    @staticmethod
    def keeps(sources) -> bool:
        """Whether a value built from ``sources`` may be kept now (see the class docstring)."""
        if torch.compiler.is_compiling():
            return False
        grad = torch.is_grad_enabled()
        for t in sources:  # a loop, not a generator: this runs on every call (host time)
            if (grad and t.requires_grad) or t.is_inference():
                return False
        return not (sources[0].is_cuda and torch.cuda.is_current_stream_capturing())

    def get(self, sources, extra: tuple, build):
        """``build()``, or the value it gave for these ``sources`` and ``extra`` last time."""
        return self.kept(sources, extra, build) if self.keeps(sources) else build()

    def kept(self, sources, extra: tuple, build):
        """As ``get``, for a caller that already knows ``keeps(sources)``.

        Written for the host: a hit is a few attribute reads per source (it replaces a kernel
        launch or more on a module whose eager time is mostly host time)."""
        stamp = [extra, torch.is_inference_mode_enabled()]
        for t in sources:
            stamp += (t._version, t.data_ptr())
        # equal stamps have two entries per source, so the lengths match
        if stamp == self._stamp and all(a is b for a, b in zip(sources, self._sources,
                                                                strict=True)):
            return self._value
        value = build()
        self._sources, self._stamp, self._value = sources, stamp, value
        return value


class _Flagged(nn.Module):
    def __init__(self, fused_attn: bool):
        super().__init__()
        if not isinstance(fused_attn, bool):
            raise TypeError(f"fused_attn: expected a bool, got {type(fused_attn).__name__}")
        self.fused_attn = fused_attn
        self._mask_memo = _Memo()

    def _use_fused(self) -> bool:
        return self.fused_attn and not manual_attention_required()

    def _sdpa_mask(self, sources, terms, *extra, shape=None) -> torch.Tensor | None:
        """The ``attn_mask`` SDPA gets: the sum of the additive ``terms()`` (``_folded_for_sdpa``;
        ``shape``: the mask's, by default the terms' broadcast shape); kept between calls while
        ``sources`` (every tensor the terms read) and ``extra`` (what else its shape depends on)
        are unchanged. None when there is no additive term."""
        sources = [t for t in sources if t is not None]
        if not sources:
            return None

        def fold():
            parts = terms()
            return _folded_for_sdpa(parts, shape or torch.broadcast_shapes(*(t.shape
                                                                            for t in parts)))

        return self._mask_memo.get(sources, (*extra, _autocast_dtype(sources[0].device.type)),
                                   fold)

    def extra_repr(self) -> str:
        return f"fused_attn={self.fused_attn}"


class QKVAttention(_Flagged):
    """Global multi-head self-attention with one ``qkv`` projection and q scaled before q @ k^T:
    timm's ``Attention`` (ViT, DeiT), DINOv2's ``Attention`` (Depth Anything), LW-DETR's ViT
    ``Attention`` (boolean padding mask through ``masked_fill``) and SVTR's ``Attention`` (PP-OCR;
    additive local-window mask).

    ``forward(x, attn_bias=None, padding_mask=None)``: ``x`` is (B, N, dim); ``attn_bias`` an
    additive float term broadcastable to (B, heads, N, N); ``padding_mask`` a (B, N) bool tensor,
    True where a key is padding.
    """

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True, fused_attn: bool = False):
        super().__init__(fused_attn)
        self.num_heads = num_heads
        self.head_dim = _heads(dim, num_heads)
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, attn_bias: torch.Tensor | None = None,
                padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        if attn_bias is not None and padding_mask is not None:
            raise ValueError("attn_bias and padding_mask: give at most one (no family uses both)")
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(
            2, 0, 3, 1, 4).unbind(0)
        if self._use_fused():
            mask = self._sdpa_mask((attn_bias,), lambda: (attn_bias,))
            if padding_mask is not None:
                mask = ~padding_mask.reshape(B, 1, 1, N)  # SDPA's boolean mask: True attends
            x = sdpa(q, k, v, attn_mask=mask, scale=self.scale)
        else:
            attn = (q * self.scale) @ k.transpose(-2, -1)
            if attn_bias is not None:
                attn = attn + attn_bias
            if padding_mask is not None:
                attn = attn.masked_fill(padding_mask.reshape(B, 1, 1, N).expand_as(attn),
                                        float("-inf"))
            x = attn.softmax(dim=-1) @ v
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class WindowAttention(_Flagged):
    """Swin's window attention with a relative position bias and the shifted-window mask, as in
    microsoft/Swin-Transformer ``models/swin_transformer.py`` (also IDEA-Research/DINO, SwinIR and
    BiRefNet's ``swin_v1.py``): ``softmax(((q*s) @ k^T + bias) + mask) @ v``.

    ``forward(x, mask=None)``: ``x`` is (num_windows * B, N, dim) with N = window**2; ``mask`` the
    (num_windows, N, N) additive shifted-window mask (``shifted_window_mask``).
    """

    def __init__(self, dim: int, window_size: int, num_heads: int, qkv_bias: bool = True,
                 fused_attn: bool = False):
        super().__init__(fused_attn)
        _positive(window_size=window_size)
        self.window_size = window_size
        self.num_heads = num_heads
        self.scale = _heads(dim, num_heads) ** -0.5
        self.relative_position_bias_table = nn.Parameter(
            torch.zeros((2 * window_size - 1) ** 2, num_heads))
        self.register_buffer("relative_position_index", _relative_position_index(window_size))
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        B_, N, C = x.shape
        head_dim = C // self.num_heads
        qkv = self.qkv(x).reshape(B_, N, 3, self.num_heads, head_dim)
        if self._use_fused():
            # zero columns add nothing to q @ k^T; they let a head width such as SwinIR's 30
            # reach memory-efficient attention instead of the math fallback (SDPA_ALIGNMENT)
            if head_dim % SDPA_ALIGNMENT:
                qkv = F.pad(qkv, (0, -head_dim % SDPA_ALIGNMENT))
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            attn_mask = self._sdpa_mask(
                (self.relative_position_bias_table, self.relative_position_index, mask),
                lambda: self._terms(mask, B_, N), B_,
                shape=(B_ if mask is not None else 1, self.num_heads, N, N))
            x = sdpa(q, k, v, attn_mask=attn_mask, scale=self.scale)
            if x.shape[-1] != head_dim:
                x = x[..., :head_dim]
        else:
            q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
            attn = (q * self.scale) @ k.transpose(-2, -1)
            attn = attn + self._bias(N).unsqueeze(0)
            if mask is not None:
                nW = mask.shape[0]
                attn = attn.view(B_ // nW, nW, self.num_heads, N, N) + mask.unsqueeze(
                    1).unsqueeze(0)
                attn = attn.view(-1, self.num_heads, N, N)
            x = attn.softmax(dim=-1) @ v
        return self.proj(x.transpose(1, 2).reshape(B_, N, C))

    def _bias(self, N: int) -> torch.Tensor:
        """The (heads, N, N) relative position bias, as upstream lays it out (a contiguous copy
        of ``_gathered_bias``)."""
        return self._gathered_bias(N).contiguous()

    def _gathered_bias(self, N: int) -> torch.Tensor:
        """The (heads, N, N) relative position bias: a permuted view of one gather."""
        return self.relative_position_bias_table[self.relative_position_index.view(-1)].view(
            N, N, -1).permute(2, 0, 1)

    def _terms(self, mask: torch.Tensor | None, B_: int, N: int) -> tuple[torch.Tensor, ...]:
        """The bias and the shifted-window mask, the manual path's two additive terms, as views
        broadcasting to (images, windows, heads, N, N) ((1, heads, N, N): the bias alone)."""
        bias = self._gathered_bias(N).unsqueeze(0)
        if mask is None:
            return (bias,)
        nW = mask.shape[0]
        return (bias.unsqueeze(0).expand(B_ // nW, -1, -1, -1, -1),
                mask.unsqueeze(1).unsqueeze(0))


def _relative_position_index(window: int) -> torch.Tensor:
    """(N, N) index into the (2w-1)^2 bias table for every pair of tokens in a w x w window."""
    coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window),
                                        indexing="ij")).flatten(1)
    relative = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (window - 1)
    return relative[:, :, 0] * (2 * window - 1) + relative[:, :, 1]


def shifted_window_mask(height: int, width: int, window: int, shift: int,
                        fill: float) -> torch.Tensor:
    """Swin's (num_windows, N, N) mask for a grid cyclically shifted by ``shift``: 0 between
    tokens of the same region, ``fill`` between regions (-100 in Swin, DINO and SwinIR; -inf in
    BiRefNet)."""
    _positive(height=height, width=width, window=window)
    if not 0 < shift < window or height % window or width % window:
        raise ValueError(f"shift ({shift}) must be in (0, window={window}) and the grid "
                         f"({height}x{width}) a multiple of the window")
    region = torch.zeros(height, width)
    bounds = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
    for label, (rows, cols) in enumerate(itertools.product(bounds, bounds)):
        region[rows, cols] = label
    windows = region.view(height // window, window, width // window, window).permute(
        0, 2, 1, 3).reshape(-1, window * window)
    differs = windows.unsqueeze(1) != windows.unsqueeze(2)
    return torch.zeros(differs.shape).masked_fill(differs, fill)


def local_window_mask(height: int, width: int, kernel_h: int, kernel_w: int) -> torch.Tensor:
    """SVTR's ``Local`` mixer mask, (1, 1, N, N): 0 where a key lies in the kernel_h x kernel_w
    window centred on the query, -inf elsewhere."""
    _positive(height=height, width=width, kernel_h=kernel_h, kernel_w=kernel_w)
    rows, cols = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    rows, cols = rows.flatten(), cols.flatten()
    near = (((rows[:, None] - rows[None, :]).abs() <= kernel_h // 2)
            & ((cols[:, None] - cols[None, :]).abs() <= kernel_w // 2))
    return torch.zeros(near.shape).masked_fill(~near, float("-inf"))[None, None]


class SpatialReductionAttention(_Flagged):
    """SegFormer's efficient self-attention (NVlabs/SegFormer ``mix_transformer.py``): keys and
    values from the input reduced by an ``sr_ratio`` strided conv and a LayerNorm, and the scale
    applied to the scores, ``softmax((q @ k^T) * s) @ v``.

    ``forward(x, H, W)``: ``x`` is (B, H*W, dim).
    """

    def __init__(self, dim: int, num_heads: int, sr_ratio: int = 1, qkv_bias: bool = True,
                 fused_attn: bool = False):
        super().__init__(fused_attn)
        _positive(sr_ratio=sr_ratio)
        self.num_heads = num_heads
        self.scale = _heads(dim, num_heads) ** -0.5
        self.q = nn.Linear(dim, dim, bias=qkv_bias)
        self.kv = nn.Linear(dim, dim * 2, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        self.sr_ratio = sr_ratio
        if sr_ratio > 1:
            self.sr = nn.Conv2d(dim, dim, kernel_size=sr_ratio, stride=sr_ratio)
            self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, H: int, W: int) -> torch.Tensor:
        B, N, C = x.shape
        q = self.q(x).reshape(B, N, self.num_heads, C // self.num_heads).permute(0, 2, 1, 3)
        if self.sr_ratio > 1:
            x = self.sr(x.permute(0, 2, 1).reshape(B, C, H, W)).reshape(B, C, -1).permute(0, 2, 1)
            x = self.norm(x)
        k, v = self.kv(x).reshape(B, -1, 2, self.num_heads, C // self.num_heads).permute(
            2, 0, 3, 1, 4).unbind(0)
        if self._use_fused():
            x = sdpa(q, k, v, scale=self.scale)
        else:
            attn = (q @ k.transpose(-2, -1)) * self.scale
            x = attn.softmax(dim=-1) @ v
        return self.proj(x.transpose(1, 2).reshape(B, N, C))


class TinyViTAttention(_Flagged):
    """TinyViT's attention with a learned per-offset bias (ChaoningZhang/MobileSAM
    ``tiny_vit_sam.py``): LayerNorm first, q, k, v interleaved per head in one projection, and
    ``softmax((q @ k^T) * s + attention_biases[:, idxs]) @ v``.

    ``forward(x)``: ``x`` is (num_windows * B, window**2, dim).
    """

    def __init__(self, dim: int, key_dim: int, num_heads: int, window_size: int,
                 attn_ratio: int = 1, fused_attn: bool = False):
        super().__init__(fused_attn)
        _positive(dim=dim, key_dim=key_dim, num_heads=num_heads, window_size=window_size,
                  attn_ratio=attn_ratio)
        self.num_heads = num_heads
        self.key_dim = key_dim
        self.scale = key_dim ** -0.5
        self.d = attn_ratio * key_dim
        self.dh = self.d * num_heads
        self.norm = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, self.dh + 2 * key_dim * num_heads)
        self.proj = nn.Linear(self.dh, dim)
        points = list(itertools.product(range(window_size), range(window_size)))
        offsets: dict[tuple[int, int], int] = {}
        idxs = [offsets.setdefault((abs(a[0] - b[0]), abs(a[1] - b[1])), len(offsets))
                for a in points for b in points]
        self.attention_biases = nn.Parameter(torch.zeros(num_heads, len(offsets)))
        self.register_buffer("attention_bias_idxs",
                             torch.tensor(idxs).view(len(points), len(points)), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, N, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(B, N, self.num_heads, -1).split(
            [self.key_dim, self.key_dim, self.d], dim=3)
        q, k, v = (t.permute(0, 2, 1, 3) for t in (q, k, v))
        if self._use_fused():
            attn_mask = self._sdpa_mask((self.attention_biases, self.attention_bias_idxs),
                                        lambda: (self._bias(),))
            x = sdpa(q, k, v, attn_mask=attn_mask, scale=self.scale)
        else:
            attn = (q @ k.transpose(-2, -1)) * self.scale + self._bias()
            x = attn.softmax(dim=-1) @ v
        return self.proj(x.transpose(1, 2).reshape(B, N, self.dh))

    def _bias(self) -> torch.Tensor:
        """The (heads, N, N) bias of every query-key offset."""
        return self.attention_biases[:, self.attention_bias_idxs]


class _SeparateQKV(_Flagged):
    """A flagged module with separate ``q_proj``, ``k_proj`` and ``v_proj`` linears (with
    biases). Its fused path computes q, k and v in one matmul, the three weights and biases
    concatenated once and kept (``_Memo``, in the dtype autocast would cast them to): one launch
    instead of three projections and autocast's six casts of their parameters, on modules whose
    eager time is mostly host time. Where the concatenation could not be kept (training,
    CUDA-graph capture, compiling) it would copy the weights every call, so there the three
    projections run. Either way q, k and v are views with a stride-1 head width, as SDPA takes
    them: no copy to make them contiguous."""

    def __init__(self, fused_attn: bool):
        super().__init__(fused_attn)
        self._qkv_memo = _Memo()

    def _fused_qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """q, k and v for SDPA, (B, heads, N, head_dim) each."""
        B, N, _ = x.shape
        projections = (self.q_proj, self.k_proj, self.v_proj)
        sources = [p.weight for p in projections] + [p.bias for p in projections]
        if not self._qkv_memo.keeps(sources):
            return tuple(p(x).view(B, N, self.num_heads, self.head_dim).transpose(1, 2)
                         for p in projections)

        def concatenated():
            return tuple(torch.cat(group).to(_autocast_cast_dtype(group[0].dtype, x.device.type))
                         for group in (sources[:3], sources[3:]))

        weight, bias = self._qkv_memo.kept(sources, (_autocast_dtype(x.device.type),),
                                           concatenated)
        return F.linear(x, weight, bias).view(B, N, 3, self.num_heads, self.head_dim).permute(
            2, 0, 3, 1, 4).unbind(0)


class SeparateProjAttention(_SeparateQKV):
    """CLIP-style attention with separate q, k, v projections (huggingface/transformers
    ``modeling_owlv2.py``, ``Owlv2Attention``): q scaled right after its projection, heads folded
    into the batch for ``bmm``, the causal and the padding masks added one after the other.

    ``forward(x, attention_mask=None, causal_attention_mask=None)``: ``x`` is (B, N, dim); each
    mask an additive (B, 1, N, N) float tensor.
    """

    def __init__(self, dim: int, num_heads: int, fused_attn: bool = False):
        super().__init__(fused_attn)
        self.num_heads = num_heads
        self.head_dim = _heads(dim, num_heads)
        self.scale = self.head_dim ** -0.5
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.q_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def _shape(self, t: torch.Tensor, B: int) -> torch.Tensor:
        return t.view(B, -1, self.num_heads, self.head_dim).transpose(1, 2).contiguous()

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                causal_attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        B, N, C = x.shape
        if self._use_fused():
            masks = [m for m in (causal_attention_mask, attention_mask) if m is not None]
            mask = self._sdpa_mask(masks, lambda: tuple(masks))
            q, k, v = self._fused_qkv(x)
            out = sdpa(q, k, v, attn_mask=mask, scale=self.scale)
            return self.out_proj(out.transpose(1, 2).reshape(B, N, C))
        flat = (B * self.num_heads, -1, self.head_dim)
        q = self._shape(self.q_proj(x) * self.scale, B).view(*flat)
        k = self._shape(self.k_proj(x), B).view(*flat)
        v = self._shape(self.v_proj(x), B).view(*flat)
        attn = torch.bmm(q, k.transpose(1, 2))
        S = k.shape[1]
        for mask in (causal_attention_mask, attention_mask):
            if mask is not None:
                attn = (attn.view(B, self.num_heads, N, S) + mask).view(B * self.num_heads, N, S)
        out = torch.bmm(attn.softmax(dim=-1), v)
        out = out.view(B, self.num_heads, N, self.head_dim).transpose(1, 2).reshape(B, N, C)
        return self.out_proj(out)


class ProjectedAttention(_SeparateQKV):
    """Attention with separate q, k, v projections in Hugging Face's layout, scaled on the scores:
    ``scale_at="divide"`` is BERT's ``BertSelfAttention`` (``scores / sqrt(head_dim)``, then the
    additive mask, ``nn.Softmax``); ``scale_at="multiply"`` is the shared eager attention of SigLIP
    2 (``scores * head_dim**-0.5``, the mask, a float32 softmax cast back to the query's dtype).
    The output projection (BERT's ``BertSelfOutput.dense``) is included.

    ``forward(x, attention_mask=None)``: ``x`` is (B, N, dim); the mask an additive float tensor
    broadcastable to (B, heads, N, N).
    """

    SCALE_AT = ("divide", "multiply")

    def __init__(self, dim: int, num_heads: int, scale_at: str, fused_attn: bool = False):
        super().__init__(fused_attn)
        if scale_at not in self.SCALE_AT:
            raise ValueError(f"scale_at must be one of {self.SCALE_AT}, got {scale_at!r}")
        self.num_heads = num_heads
        self.head_dim = _heads(dim, num_heads)
        self.scale_at = scale_at
        self.scale = self.head_dim ** -0.5
        self.q_proj = nn.Linear(dim, dim)
        self.k_proj = nn.Linear(dim, dim)
        self.v_proj = nn.Linear(dim, dim)
        self.out_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        B, N, C = x.shape
        if self._use_fused():
            q, k, v = self._fused_qkv(x)
            mask = self._sdpa_mask((attention_mask,), lambda: (attention_mask,))
            out = sdpa(q, k, v, attn_mask=mask, scale=self.scale)
        else:
            q, k, v = (p(x).view(B, N, self.num_heads, self.head_dim).transpose(1, 2)
                       for p in (self.q_proj, self.k_proj, self.v_proj))
            scores = torch.matmul(q, k.transpose(-1, -2))
            if self.scale_at == "divide":
                scores = scores / math.sqrt(self.head_dim)
            else:
                scores = scores * self.scale
            if attention_mask is not None:
                scores = scores + attention_mask
            if self.scale_at == "divide":
                probs = scores.softmax(dim=-1)
            else:
                probs = scores.softmax(dim=-1, dtype=torch.float32).to(q.dtype)
            out = torch.matmul(probs, v)
        return self.out_proj(out.transpose(1, 2).contiguous().reshape(B, N, C))


class GlobalTokenAttention(_Flagged):
    """ZipDepth's ``EfficientGlobalAttention`` (fabiotosi92/ZipDepth ``zipdepth/model/
    architecture.py``): two cross-attentions through a few learned tokens. The tokens attend to
    the feature map, ``softmax((q_tok @ k_sp^T) * s) @ v_sp``; then the feature map attends to the
    updated tokens, ``softmax((q_sp @ k_tok^T) * s) @ tokens``; a 1x1 conv, BatchNorm and the
    residual close it. Projections are 1x1 convs on the map, linears on the tokens.

    The fused path computes the map's k, v and q from the convolutions' own weights as matmuls on
    the map's (B, H*W, dim) view, so their head width comes out with stride 1, as SDPA's fused
    kernels take it; the convolutions' outputs have it at stride H*W, a copy away.

    ``forward(x)``: ``x`` is (B, dim, H, W).
    """

    def __init__(self, dim: int, num_tokens: int = 8, num_heads: int = 4,
                 fused_attn: bool = False):
        super().__init__(fused_attn)
        _positive(num_tokens=num_tokens)
        self.num_tokens = num_tokens
        self.num_heads = num_heads
        self.head_dim = _heads(dim, num_heads)
        self.scale = self.head_dim ** -0.5
        self.tokens = nn.Parameter(torch.randn(1, num_tokens, dim))
        nn.init.trunc_normal_(self.tokens, std=0.02)
        self.q_tokens = nn.Linear(dim, dim, bias=False)
        self.kv_spatial = nn.Conv2d(dim, dim * 2, 1, bias=False)
        self.q_spatial = nn.Conv2d(dim, dim, 1, groups=num_heads, bias=False)
        self.k_proj_tokens = nn.Linear(dim, dim, bias=False)
        self.proj_out = nn.Conv2d(dim, dim, 1)
        self.norm = nn.BatchNorm2d(dim)

    def _attend(self, fused: bool, q, k, v):
        if fused:
            return sdpa(q, k, v, scale=self.scale)
        return F.softmax((q @ k.transpose(-2, -1)) * self.scale, dim=-1) @ v

    def _token_heads(self, projected: torch.Tensor, B: int) -> torch.Tensor:
        return projected.reshape(1, self.num_tokens, self.num_heads, self.head_dim).permute(
            0, 2, 1, 3).expand(B, -1, -1, -1)

    def _spatial_kv(self, x: torch.Tensor, fused: bool):
        """k and v of the map, (B, heads, N, head_dim) each."""
        B, C, H, W = x.shape
        if fused:  # the 1x1 conv as a matmul on the (B, N, C) view: channels come out stride 1
            kv = torch.matmul(x.flatten(2).transpose(1, 2),
                              self.kv_spatial.weight.view(2 * C, C).t())
            return kv.view(B, H * W, 2, self.num_heads, self.head_dim).permute(
                2, 0, 3, 1, 4).unbind(0)
        # views of the 1x1 conv's channels: the head width has stride N
        return self.kv_spatial(x).reshape(B, 2, self.num_heads, self.head_dim, H * W).permute(
            1, 0, 2, 4, 3).unbind(0)

    def _spatial_q(self, x: torch.Tensor, fused: bool) -> torch.Tensor:
        """q of the map, (B, heads, N, head_dim)."""
        B, C, H, W = x.shape
        if fused:  # the grouped 1x1 conv as one matmul per head on the head's (N, head_dim) view
            per_head = x.reshape(B, self.num_heads, self.head_dim, H * W).transpose(-1, -2)
            weight = self.q_spatial.weight.view(self.num_heads, self.head_dim, self.head_dim)
            return torch.matmul(per_head, weight.transpose(-1, -2))
        return self.q_spatial(x).reshape(B, C, H * W).view(B, self.num_heads, self.head_dim,
                                                           H * W).transpose(-1, -2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, C, H, W = x.shape
        N = H * W
        fused = self._use_fused()
        k_sp, v_sp = self._spatial_kv(x, fused)
        tokens = self._attend(fused, self._token_heads(self.q_tokens(self.tokens), B), k_sp, v_sp)
        q_sp = self._spatial_q(x, fused)
        out = self._attend(fused, q_sp, self._token_heads(self.k_proj_tokens(self.tokens), B),
                           tokens)
        out = out.transpose(1, 2).reshape(B, N, C).transpose(1, 2).reshape(B, C, H, W)
        return x + self.norm(self.proj_out(out))


def module_for_site(site, *, fused_attn: bool = False) -> nn.Module:
    """The module that computes call site ``site`` (a ``families.Site``), freshly initialized."""
    if site.module == "qkv":
        return QKVAttention(site.dim, site.heads, fused_attn=fused_attn)
    if site.module == "window":
        return WindowAttention(site.dim, site.window, site.heads, fused_attn=fused_attn)
    if site.module == "spatial_reduction":
        return SpatialReductionAttention(site.dim, site.heads, site.sr_ratio,
                                         fused_attn=fused_attn)
    if site.module == "tinyvit":
        return TinyViTAttention(site.dim, site.head_dim, site.heads, site.window,
                                fused_attn=fused_attn)
    if site.module == "separate_proj":
        return SeparateProjAttention(site.dim, site.heads, fused_attn=fused_attn)
    if site.module == "projected":
        return ProjectedAttention(site.dim, site.heads, site.scale_at, fused_attn=fused_attn)
    if site.module == "global_tokens":
        return GlobalTokenAttention(site.dim, site.learned_tokens, site.heads,
                                    fused_attn=fused_attn)
    raise ValueError(f"site: unknown module kind {site.module!r}")

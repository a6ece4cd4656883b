"""The fused-attention policy API, and the attention modules' manual paths as their families wrote
them.

Each ``upstream_*`` function below is the family's forward transcribed from its public source
(named in its docstring) onto our module's parameters; the module's manual path must give the same
bits. Changing the module's equation (even moving the scale) fails these tests, which is shown
by running each transcription with the scale moved.
"""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from conformance.reporting.attention_evidence import limited, prepared
from libreyolo.kernels.attention import (
    families,
    fused_attention_default,
    fused_attention_modules,
    set_fused_attention,
)
from libreyolo.nn import attention as nn_attention
from libreyolo.nn.attention import (
    ProjectedAttention,
    QKVAttention,
    SeparateProjAttention,
    SpatialReductionAttention,
    TinyViTAttention,
    WindowAttention,
    local_window_mask,
    module_for_site,
    shifted_window_mask,
)

SITES = families.sites()


def upstream_timm(m, x, attn_bias=None, padding_mask=None, moved=False):
    """timm/layers/attention.py ``Attention.forward`` (DINOv2's and SVTR's are the same
    operations; LW-DETR's masks with ``masked_fill_(..., -inf)``)."""
    B, N, C = x.shape
    qkv = m.qkv(x).reshape(B, N, 3, m.num_heads, m.head_dim).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    attn = (q @ k.transpose(-2, -1)) * m.scale if moved else (q * m.scale) @ k.transpose(-2, -1)
    if attn_bias is not None:
        attn = attn + attn_bias
    if padding_mask is not None:
        attn.masked_fill_(padding_mask.reshape(B, 1, 1, N).expand_as(attn), float("-inf"))
    x = attn.softmax(dim=-1) @ v
    return m.proj(x.transpose(1, 2).reshape(B, N, C))


def upstream_swin(m, x, mask=None, moved=False):
    """microsoft/Swin-Transformer models/swin_transformer.py ``WindowAttention.forward``."""
    B_, N, C = x.shape
    qkv = m.qkv(x).reshape(B_, N, 3, m.num_heads, C // m.num_heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    if moved:
        attn = (q @ k.transpose(-2, -1)) * m.scale
    else:
        q = q * m.scale
        attn = q @ k.transpose(-2, -1)
    relative_position_bias = m.relative_position_bias_table[
        m.relative_position_index.view(-1)].view(N, N, -1)
    relative_position_bias = relative_position_bias.permute(2, 0, 1).contiguous()
    attn = attn + relative_position_bias.unsqueeze(0)
    if mask is not None:
        nW = mask.shape[0]
        attn = attn.view(B_ // nW, nW, m.num_heads, N, N) + mask.unsqueeze(1).unsqueeze(0)
        attn = attn.view(-1, m.num_heads, N, N)
    attn = nn.Softmax(dim=-1)(attn)
    x = (attn @ v).transpose(1, 2).reshape(B_, N, C)
    return m.proj(x)


def upstream_segformer(m, x, H, W, moved=False):
    """NVlabs/SegFormer mmseg/models/backbones/mix_transformer.py ``Attention.forward``."""
    B, N, C = x.shape
    q = m.q(x).reshape(B, N, m.num_heads, C // m.num_heads).permute(0, 2, 1, 3)
    if m.sr_ratio > 1:
        x_ = x.permute(0, 2, 1).reshape(B, C, H, W)
        x_ = m.sr(x_).reshape(B, C, -1).permute(0, 2, 1)
        x_ = m.norm(x_)
        kv = m.kv(x_).reshape(B, -1, 2, m.num_heads, C // m.num_heads).permute(2, 0, 3, 1, 4)
    else:
        kv = m.kv(x).reshape(B, -1, 2, m.num_heads, C // m.num_heads).permute(2, 0, 3, 1, 4)
    k, v = kv[0], kv[1]
    attn = (q * m.scale) @ k.transpose(-2, -1) if moved else (q @ k.transpose(-2, -1)) * m.scale
    attn = attn.softmax(dim=-1)
    x = (attn @ v).transpose(1, 2).reshape(B, N, C)
    return m.proj(x)


def upstream_tinyvit(m, x, moved=False):
    """ChaoningZhang/MobileSAM mobile_sam/modeling/tiny_vit_sam.py ``Attention.forward`` (eval
    mode reads the same ``attention_biases[:, attention_bias_idxs]`` from a cache)."""
    B, N, _ = x.shape
    x = m.norm(x)
    qkv = m.qkv(x)
    q, k, v = qkv.view(B, N, m.num_heads, -1).split([m.key_dim, m.key_dim, m.d], dim=3)
    q = q.permute(0, 2, 1, 3)
    k = k.permute(0, 2, 1, 3)
    v = v.permute(0, 2, 1, 3)
    scores = (q * m.scale) @ k.transpose(-2, -1) if moved else (q @ k.transpose(-2, -1)) * m.scale
    attn = scores + m.attention_biases[:, m.attention_bias_idxs]
    attn = attn.softmax(dim=-1)
    x = (attn @ v).transpose(1, 2).reshape(B, N, m.dh)
    return m.proj(x)


def upstream_owlv2(m, x, attention_mask=None, causal_attention_mask=None, moved=False):
    """huggingface/transformers src/transformers/models/owlv2/modeling_owlv2.py
    ``Owlv2Attention.forward``."""
    bsz, tgt_len, embed_dim = x.size()

    def shape(t, seq_len):
        return t.view(bsz, seq_len, m.num_heads, m.head_dim).transpose(1, 2).contiguous()

    query_states = m.q_proj(x) if moved else m.q_proj(x) * m.scale
    key_states = shape(m.k_proj(x), -1)
    value_states = shape(m.v_proj(x), -1)
    proj_shape = (bsz * m.num_heads, -1, m.head_dim)
    query_states = shape(query_states, tgt_len).view(*proj_shape)
    key_states = key_states.view(*proj_shape)
    value_states = value_states.view(*proj_shape)
    src_len = key_states.size(1)
    attn_weights = torch.bmm(query_states, key_states.transpose(1, 2))
    if moved:
        attn_weights = attn_weights * m.scale
    for mask in (causal_attention_mask, attention_mask):
        if mask is not None:
            attn_weights = attn_weights.view(bsz, m.num_heads, tgt_len, src_len) + mask
            attn_weights = attn_weights.view(bsz * m.num_heads, tgt_len, src_len)
    attn_weights = nn.functional.softmax(attn_weights, dim=-1)
    attn_output = torch.bmm(attn_weights, value_states)
    attn_output = attn_output.view(bsz, m.num_heads, tgt_len, m.head_dim).transpose(1, 2)
    return m.out_proj(attn_output.reshape(bsz, tgt_len, embed_dim))


def upstream_bert(m, x, attention_mask=None, moved=False):
    """huggingface/transformers src/transformers/models/bert/modeling_bert.py
    ``BertSelfAttention.forward`` (self-attention, absolute positions, no head mask), then
    ``BertSelfOutput.dense``."""
    def transpose_for_scores(t):
        return t.view(t.size()[:-1] + (m.num_heads, m.head_dim)).permute(0, 2, 1, 3)

    query_layer = transpose_for_scores(m.q_proj(x))
    key_layer = transpose_for_scores(m.k_proj(x))
    value_layer = transpose_for_scores(m.v_proj(x))
    if moved:
        attention_scores = torch.matmul(query_layer / math.sqrt(m.head_dim),
                                        key_layer.transpose(-1, -2))
    else:
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(m.head_dim)
    if attention_mask is not None:
        attention_scores = attention_scores + attention_mask
    attention_probs = nn.Softmax(dim=-1)(attention_scores)
    context_layer = torch.matmul(attention_probs, value_layer)
    context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
    context_layer = context_layer.view(context_layer.size()[:-2] + (m.num_heads * m.head_dim,))
    return m.out_proj(context_layer)


def upstream_siglip2(m, x, attention_mask=None, moved=False):
    """huggingface/transformers src/transformers/models/siglip2/modeling_siglip2.py
    ``Siglip2Attention.forward`` with ``eager_attention_forward``."""
    batch_size, seq_length, embed_dim = x.shape
    queries = m.q_proj(x).view(batch_size, seq_length, m.num_heads, m.head_dim).transpose(1, 2)
    keys = m.k_proj(x).view(batch_size, seq_length, m.num_heads, m.head_dim).transpose(1, 2)
    values = m.v_proj(x).view(batch_size, seq_length, m.num_heads, m.head_dim).transpose(1, 2)
    if moved:
        attn_weights = torch.matmul(queries * m.scale, keys.transpose(-1, -2))
    else:
        attn_weights = torch.matmul(queries, keys.transpose(-1, -2)) * m.scale
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(
        queries.dtype)
    attn_output = torch.matmul(attn_weights, values).transpose(1, 2).contiguous()
    return m.out_proj(attn_output.reshape(batch_size, seq_length, embed_dim).contiguous())


def upstream_zipdepth(m, x, moved=False):
    """fabiotosi92/ZipDepth zipdepth/model/architecture.py ``EfficientGlobalAttention.forward``."""
    def scores(q, k):
        return (q * m.scale) @ k.transpose(-2, -1) if moved else (q @ k.transpose(-2, -1)) * m.scale

    B, C, H, W = x.shape
    N = H * W
    kv = m.kv_spatial(x).reshape(B, 2, C, N).permute(1, 0, 2, 3)
    k_sp, v_sp = kv[0], kv[1]
    k_sp = k_sp.view(B, m.num_heads, m.head_dim, N).transpose(-1, -2)
    v_sp = v_sp.view(B, m.num_heads, m.head_dim, N).transpose(-1, -2)
    q_tok = (m.q_tokens(m.tokens).reshape(1, m.num_tokens, m.num_heads, m.head_dim)
             .permute(0, 2, 1, 3).expand(B, -1, -1, -1))
    tokens_updated = nn.functional.softmax(scores(q_tok, k_sp), dim=-1) @ v_sp
    q_sp = m.q_spatial(x).reshape(B, C, N).view(B, m.num_heads, m.head_dim, N).transpose(-1, -2)
    k_tok = (m.k_proj_tokens(m.tokens).reshape(1, m.num_tokens, m.num_heads, m.head_dim)
             .permute(0, 2, 1, 3).expand(B, -1, -1, -1))
    attn_s2t = nn.functional.softmax(scores(q_sp, k_tok), dim=-1)
    out = attn_s2t @ tokens_updated
    out = out.transpose(1, 2).reshape(B, N, C).transpose(1, 2).reshape(B, C, H, W)
    return x + m.norm(m.proj_out(out))


def upstream_projected(m, *args, **kwargs):
    return (upstream_bert if m.scale_at == "divide" else upstream_siglip2)(m, *args, **kwargs)


UPSTREAM = {"qkv": upstream_timm, "window": upstream_swin, "spatial_reduction": upstream_segformer,
            "tinyvit": upstream_tinyvit, "separate_proj": upstream_owlv2,
            "projected": upstream_projected, "global_tokens": upstream_zipdepth}


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


@pytest.mark.parametrize("site", SITES, ids=lambda s: s.id)
def test_the_manual_path_is_the_upstream_equation_bit_for_bit(site):
    module, args, kwargs = prepared(limited(site), dtype=torch.float32, device="cpu")
    with torch.no_grad():
        ours = module(*args, **kwargs)
        theirs = UPSTREAM[site.module](module, *args, **kwargs)
        moved = UPSTREAM[site.module](module, *args, **kwargs, moved=True)
    assert torch.equal(bits(ours), bits(theirs))
    # A power-of-two scale (head width 64: s = 1/8) scales exactly wherever it is applied, so
    # there the two placements are the same numbers; everywhere else the comparison must see it.
    if not math.log2(module.scale).is_integer():
        assert not torch.equal(bits(ours), bits(moved)), "the comparison must see a moved scale"


def test_the_moved_scale_control_applies_to_most_sites():
    visible = [s.id for s in SITES if not math.log2(s.head_dim ** -0.5).is_integer()]
    assert len(visible) >= len(SITES) // 2, visible


def test_the_relative_position_index_is_swins():
    """Swin's construction, transcribed: coordinates, pairwise differences, shift, row stride."""
    window = 7
    coords = torch.stack(torch.meshgrid([torch.arange(window), torch.arange(window)],
                                        indexing="ij"))
    coords_flatten = torch.flatten(coords, 1)
    relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]
    relative_coords = relative_coords.permute(1, 2, 0).contiguous()
    relative_coords[:, :, 0] += window - 1
    relative_coords[:, :, 1] += window - 1
    relative_coords[:, :, 0] *= 2 * window - 1
    expected = relative_coords.sum(-1)
    assert torch.equal(WindowAttention(96, window, 3).relative_position_index, expected)


@pytest.mark.parametrize("fill", [-100.0, float("-inf")])
def test_the_shifted_window_mask_is_swins(fill):
    """SwinTransformerBlock's mask construction, transcribed (window_partition inlined)."""
    H = W = 14
    window, shift = 7, 3
    img_mask = torch.zeros((1, H, W, 1))
    slices = (slice(0, -window), slice(-window, -shift), slice(-shift, None))
    cnt = 0
    for h in slices:
        for w in slices:
            img_mask[:, h, w, :] = cnt
            cnt += 1
    windows = img_mask.view(1, H // window, window, W // window, window, 1)
    windows = windows.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window * window)
    attn_mask = windows.unsqueeze(1) - windows.unsqueeze(2)
    attn_mask = attn_mask.masked_fill(attn_mask != 0, fill).masked_fill(attn_mask == 0, 0.0)
    assert torch.equal(shifted_window_mask(H, W, window, shift, fill), attn_mask)


def test_the_local_mask_is_svtrs():
    """SVTR's Local mixer mask construction (rec_svtrnet.py), transcribed into torch."""
    H, W, hk, wk = 8, 25, 7, 11
    mask = torch.ones(H * W, H + hk - 1, W + wk - 1)
    for h in range(H):
        for w in range(W):
            mask[h * W + w, h:h + hk, w:w + wk] = 0.0
    cropped = mask[:, hk // 2:H + hk // 2, wk // 2:W + wk // 2].flatten(1)
    expected = torch.where(cropped < 1, cropped, torch.full_like(cropped, float("-inf")))
    assert torch.equal(local_window_mask(H, W, hk, wk), expected[None, None])


def test_the_tinyvit_bias_index_is_tinyvits():
    points = list(itertools.product(range(7), range(7)))
    offsets, idxs = {}, []
    for p1 in points:
        for p2 in points:
            offset = (abs(p1[0] - p2[0]), abs(p1[1] - p2[1]))
            if offset not in offsets:
                offsets[offset] = len(offsets)
            idxs.append(offsets[offset])
    module = TinyViTAttention(128, 32, 4, 7)
    assert torch.equal(module.attention_bias_idxs, torch.LongTensor(idxs).view(49, 49))
    assert module.attention_biases.shape == (4, len(offsets))


def every_site_model() -> nn.Module:
    """One module per call site, each with its family's default flag, plus an unflagged layer."""
    model = nn.Module()
    model.sites = nn.ModuleList(
        module_for_site(site, fused_attn=fused_attention_default(site.family)) for site in SITES)
    model.head = nn.Linear(4, 4)
    return model


def test_set_fused_attention_flips_every_flag_family_and_counts_the_switches():
    model = every_site_model()
    off = sum(not fused_attention_default(site.family) for site in SITES)
    assert off > 0
    assert set_fused_attention(model) == off
    assert all(state for _, state in fused_attention_modules(model))
    assert set_fused_attention(model) == 0
    assert set_fused_attention(model, enabled=False) == len(SITES)
    assert not any(state for _, state in fused_attention_modules(model))


def test_upstream_sdpa_families_are_on_by_default_and_turned_off_by_enabled_false():
    model = every_site_model()
    upstream_on = [f"sites.{i}" for i, site in enumerate(SITES)
                   if site.family in ("vit", "deit", "moge2")]
    assert [name for name, state in fused_attention_modules(model) if state] == upstream_on
    assert set_fused_attention(model, enabled=False) == len(upstream_on)


def test_modules_are_listed_by_qualified_name_with_their_state():
    model = nn.Sequential(nn.Linear(8, 8), QKVAttention(64, 4, fused_attn=True),
                          WindowAttention(32, 4, 2))
    assert fused_attention_modules(model) == [("1", True), ("2", False)]


def test_any_module_with_a_boolean_fused_attn_is_flipped_timm_included():
    class TimmLike(nn.Module):
        def __init__(self):
            super().__init__()
            self.fused_attn = False

    model = nn.Sequential(TimmLike(), TimmLike())
    assert set_fused_attention(model) == 2
    assert [state for _, state in fused_attention_modules(model)] == [True, True]


def test_an_object_holding_the_network_in_model_is_accepted():
    class Wrapper:
        def __init__(self):
            self.model = nn.Sequential(QKVAttention(64, 4))

    wrapper = Wrapper()
    assert set_fused_attention(wrapper) == 1
    assert fused_attention_modules(wrapper) == [("0", True)]


@pytest.mark.parametrize("bad", [42, "model", None, object()], ids=lambda b: type(b).__name__)
def test_anything_else_is_a_type_error_naming_what_it_got(bad):
    with pytest.raises(TypeError, match=f"model: expected a torch.nn.Module.*{type(bad).__name__}"):
        set_fused_attention(bad)
    with pytest.raises(TypeError, match=type(bad).__name__):
        fused_attention_modules(bad)


def test_enabled_must_be_a_bool():
    with pytest.raises(TypeError, match="enabled: expected a bool, got int"):
        set_fused_attention(nn.Sequential(QKVAttention(64, 4)), enabled=1)


@pytest.mark.parametrize("site", SITES, ids=lambda s: s.id)
def test_the_flag_never_changes_the_state_dict_keys(site):
    off = module_for_site(site, fused_attn=False)
    on = module_for_site(site, fused_attn=True)
    assert list(off.state_dict()) == list(on.state_dict())
    assert set_fused_attention(off) == 1
    assert list(off.state_dict()) == list(on.state_dict())


def test_the_flag_is_read_at_every_call(monkeypatch):
    """The fused path is what runs when the flag is on (a stand-in SDPA records the call)."""
    calls = []

    def recording(q, k, v, attn_mask=None, scale=None):
        calls.append(scale)
        return torch.zeros_like(q)

    monkeypatch.setattr(nn_attention, "sdpa", recording)
    module = QKVAttention(64, 4)
    x = torch.randn(1, 5, 64)
    module(x)
    assert calls == []
    set_fused_attention(module)
    module(x)
    assert calls == [16 ** -0.5]


@pytest.mark.parametrize(("build", "message"), [
    (lambda: QKVAttention(10, 3), r"dim \(10\) must be divisible by num_heads \(3\)"),
    (lambda: QKVAttention(64, 0), "num_heads must be a positive int, got 0"),
    (lambda: WindowAttention(96, 0, 3), "window_size must be a positive int, got 0"),
    (lambda: SpatialReductionAttention(32, 1, sr_ratio=0), "sr_ratio must be a positive int"),
    (lambda: SeparateProjAttention(64, 4, fused_attn="yes"), "fused_attn: expected a bool"),
    (lambda: ProjectedAttention(64, 4, "after"), "scale_at must be one of"),
    (lambda: shifted_window_mask(14, 14, 7, 7, -100.0), r"shift \(7\) must be in \(0, window=7\)"),
])
def test_bad_arguments_are_errors_naming_the_argument(build, message):
    with pytest.raises((ValueError, TypeError), match=message):
        build()


def test_attn_bias_and_padding_mask_together_are_refused():
    with pytest.raises(ValueError, match="attn_bias and padding_mask"):
        QKVAttention(64, 4)(torch.randn(1, 5, 64), attn_bias=torch.zeros(1, 1, 5, 5),
                            padding_mask=torch.zeros(1, 5, dtype=torch.bool))


def test_importing_the_policy_and_the_modules_imports_no_triton():
    code = ("import sys, libreyolo.kernels.attention, libreyolo.nn.attention; "
            "print('triton' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=False, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"

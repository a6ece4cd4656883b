"""What the fused path hands SDPA, and the mask it keeps between calls.

Every call site's fused path must hand SDPA tensors its fused CUDA kernels take as they are (no
math fallback, no per-call copy inside SDPA): a stride-1 head width that is a multiple of 8, and
an additive mask already in the dtype SDPA computes in, its strides multiples of 8
(``libreyolo.nn.attention.SDPA_ALIGNMENT``). The folded mask is kept between calls only while
nothing it is built from changed: an in-place change of a bias table, another mask, another
batch or another autocast dtype rebuilds it, and training builds it afresh so that the bias
tables get their gradient. Where the fused path does work of its own (building the mask, the
projections) it does it in as few passes as the manual path or fewer: these tests count the
ATen operations a call runs. These run on the CPU; the layout rules are CUDA's, checked here on
the tensors themselves.
"""

from __future__ import annotations

import collections
import copy
import pickle

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from conformance.reporting.attention_evidence import limited, prepared
from libreyolo.kernels.attention import families
from libreyolo.nn import attention as nn_attention
from libreyolo.nn.attention import SDPA_ALIGNMENT, TinyViTAttention, WindowAttention

SITES = families.sites()
SWIN = limited(families.family("swin").sites[0])  # 49-token windows, bias + shifted mask
MOBILESAM = limited(families.family("mobilesam").sites[0])  # 49 tokens, TinyViT offset bias
OWLV2_TEXT = limited(families.family("owlv2").sites[1])  # causal + padding masks
SEPARATE_QKV = [limited(site) for site in SITES if site.module in ("projected", "separate_proj")]
ZIPDEPTH = limited(families.family("zipdepth").sites[0])


class AtenOps(TorchDispatchMode):
    """The ATen operations run while active that produce tensor data (views and allocations of
    uninitialized memory left out), by overload name, e.g. ``aten.add.out``."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = str(func)
        produces = any(isinstance(t, torch.Tensor) for t in torch.utils._pytree.tree_leaves(out))
        if produces and not func.is_view and not name.startswith("aten.empty"):
            self.ops.append(name)
        return out


def aten_ops(module, args, kwargs, autocast=True) -> list[str]:
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        with AtenOps() as recorded:
            module(*args, **kwargs)
    return recorded.ops


@pytest.fixture
def handed(monkeypatch):
    """Every SDPA call of the fused path, as ``(q, k, v, attn_mask)``; the real SDPA runs."""
    calls = []
    real = nn_attention.sdpa

    def recording(q, k, v, attn_mask=None, scale=None):
        calls.append((q, k, v, attn_mask))
        return real(q, k, v, attn_mask=attn_mask, scale=scale)

    monkeypatch.setattr(nn_attention, "sdpa", recording)
    return calls


def fused(site, dtype=torch.float32):
    return prepared(site, dtype=dtype, device="cpu", fused_attn=True)


def aligned(mask: torch.Tensor) -> bool:
    return mask.stride(-1) == 1 and all(s % SDPA_ALIGNMENT == 0 for s in mask.stride()[:-1])


def expected_mask(module, kwargs) -> torch.Tensor:
    """The additive term from the parameters as they are now, independently of the module's fold:
    Swin's bias table gathered by its index plus the shifted-window mask, or TinyViT's biases."""
    if isinstance(module, TinyViTAttention):
        return module.attention_biases[:, module.attention_bias_idxs]
    n = module.window_size ** 2
    bias = module.relative_position_bias_table[module.relative_position_index.flatten()]
    bias = bias.view(n, n, -1).permute(2, 0, 1)
    return bias[None] + kwargs["mask"][:, None]


@pytest.mark.parametrize("site", SITES, ids=lambda s: s.id)
def test_every_fused_call_hands_sdpa_what_its_fused_kernels_take(site, handed):
    module, args, kwargs = fused(limited(site))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        module(*args, **kwargs)
    assert handed, f"{site.id}: the fused path made no SDPA call"
    for q, k, v, mask in handed:
        for name, t in (("q", q), ("k", k), ("v", v)):
            assert t.stride(-1) == 1, f"{site.id}: {name} has head-width stride {t.stride(-1)}"
        assert q.shape[-1] % SDPA_ALIGNMENT == 0 and v.shape[-1] % SDPA_ALIGNMENT == 0, (
            f"{site.id}: head widths {q.shape[-1]}, {v.shape[-1]}")
        # a boolean mask (LW-DETR's padding) is converted by SDPA itself, whatever its layout
        if mask is not None and mask.is_floating_point():
            assert mask.dtype == q.dtype, f"{site.id}: mask {mask.dtype}, query {q.dtype}"
            assert aligned(mask), f"{site.id}: mask strides {mask.stride()}"


@pytest.mark.parametrize("site", [SWIN, MOBILESAM], ids=lambda s: s.id)
def test_the_kept_mask_is_reused_while_nothing_changed(site, handed):
    module, args, kwargs = fused(site)
    with torch.no_grad():
        module(*args, **kwargs)
        module(*args, **kwargs)
    first, second = handed[0][3], handed[1][3]
    assert second is first
    assert torch.equal(first, expected_mask(module, kwargs).expand_as(first))


@pytest.mark.parametrize("site", [SWIN, MOBILESAM], ids=lambda s: s.id)
def test_an_in_place_change_of_the_bias_table_rebuilds_the_mask(site, handed):
    module, args, kwargs = fused(site)
    table = next(p for n, p in module.named_parameters()
                 if n in ("relative_position_bias_table", "attention_biases"))
    with torch.no_grad():
        module(*args, **kwargs)
        table.mul_(-2.0)  # as an optimizer step or load_state_dict would: in place
        module(*args, **kwargs)
    first, second = handed[0][3], handed[1][3]
    assert not torch.equal(first, second)
    assert torch.equal(second, expected_mask(module, kwargs).expand_as(second))


def test_load_state_dict_rebuilds_the_mask(handed):
    module, args, kwargs = fused(SWIN)
    other = fused(SWIN)[0]
    with torch.no_grad():
        other.relative_position_bias_table.add_(1.0)
        module(*args, **kwargs)
        module.load_state_dict(other.state_dict())
        module(*args, **kwargs)
    assert torch.equal(handed[1][3], expected_mask(module, kwargs).expand_as(handed[1][3]))


def test_another_input_size_a_changed_mask_or_another_batch_rebuilds_it(handed):
    module, args, kwargs = fused(SWIN)
    (x,) = args
    n = SWIN.tokens
    # another resolution: 14x14 tokens shifted by 3 are 4 windows of 49, another region layout
    other = nn_attention.shifted_window_mask(14, 14, 7, 3, -100.0)[-x.shape[0]:]
    with torch.no_grad():
        module(x, **kwargs)
        module(x, mask=other)
        kwargs["mask"][0, 0, 1:].fill_(-100.0)  # the caller's mask changed in place
        module(x, **kwargs)
        module(torch.cat([x, x]), **kwargs)  # two images: every window twice
    masks = [call[3] for call in handed]
    assert torch.equal(masks[1], expected_mask(module, {"mask": other}))
    assert torch.equal(masks[2], expected_mask(module, kwargs))
    assert masks[3].shape == (2 * x.shape[0], SWIN.heads, n, n)
    assert torch.equal(masks[3], expected_mask(module, kwargs).repeat(2, 1, 1, 1))


def test_autocast_gets_the_mask_autocast_would_have_cast(handed):
    module, args, kwargs = fused(SWIN)
    with torch.no_grad():
        module(*args, **kwargs)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            module(*args, **kwargs)
    plain, autocast = handed[0][3], handed[1][3]
    assert plain.dtype == torch.float32 and autocast.dtype == torch.bfloat16
    assert torch.equal(autocast, expected_mask(module, kwargs).to(torch.bfloat16))


@pytest.mark.parametrize("module_kind", [WindowAttention, TinyViTAttention])
def test_training_gets_the_gradient_of_the_bias_table_through_the_mask(module_kind, handed):
    site = SWIN if module_kind is WindowAttention else MOBILESAM
    module, args, kwargs = prepared(site, dtype=torch.float64, device="cpu")
    module.train()
    table = next(p for n, p in module.named_parameters()
                 if n in ("relative_position_bias_table", "attention_biases"))
    grads = {}
    for flag in (False, True):
        module.fused_attn = flag
        table.grad = None
        module(*args, **kwargs).square().sum().backward()
        grads[flag] = table.grad
    assert grads[True] is not None and grads[True].abs().sum() > 0
    torch.testing.assert_close(grads[True], grads[False], rtol=1e-9, atol=1e-12)
    module(*args, **kwargs)
    assert handed[1][3] is not handed[0][3], "a mask that carries a gradient is not kept"


def test_inference_mode_is_served_and_its_mask_is_not_reused_outside_it(handed):
    module, args, kwargs = fused(SWIN)
    with torch.inference_mode():
        module(*args, mask=kwargs["mask"].clone())  # an inference tensor keeps no version
        module(*args, **kwargs)
    module.requires_grad_(False)  # a frozen model, a gradient wanted for its input only
    x = args[0].clone().requires_grad_()
    module(x, **kwargs).sum().backward()  # an inference tensor could not be saved for backward
    assert not handed[2][3].is_inference()
    assert x.grad is not None


@pytest.mark.parametrize("duplicate", [copy.deepcopy, lambda m: pickle.loads(pickle.dumps(m))],
                         ids=["deepcopy", "pickle"])
def test_the_kept_mask_is_not_state(duplicate, handed):
    module, args, kwargs = fused(SWIN)
    with torch.no_grad():
        module(*args, **kwargs)
        twin = duplicate(module)
        twin.relative_position_bias_table.add_(1.0)
        twin(*args, **kwargs)
    assert handed[1][3] is not handed[0][3]
    assert torch.equal(handed[1][3], expected_mask(twin, kwargs).expand_as(handed[1][3]))
    assert list(module.state_dict()) == list(twin.state_dict())


@pytest.mark.parametrize(("site", "fold"), [
    (SWIN, {"aten.index.Tensor": 1, "aten.add.out": 1}),
    (MOBILESAM, {"aten.index.Tensor": 1, "aten.copy_.default": 1}),
    (OWLV2_TEXT, {"aten.add.out": 1})], ids=lambda v: v.id if hasattr(v, "id") else "")
def test_a_mask_built_afresh_is_one_pass_writing_what_sdpa_reads(site, fold):
    """What a first call (as every call inside CUDA-graph capture) runs beyond a warm one: the
    bias gathered from its table, then one add (or copy) that sums the terms, rounds them to the
    autocast dtype and writes the aligned layout; no separate cast, pad or contiguous copy."""
    module, args, kwargs = fused(site)
    cold = aten_ops(module, args, kwargs)
    warm = aten_ops(module, args, kwargs)
    built = collections.Counter(cold) - collections.Counter(warm)
    built -= collections.Counter({"aten.cat.default": 2, "aten._to_copy.default": 2})  # OWLv2's
    assert dict(built) == fold  # kept q, k, v weights, built on the first call as well


@pytest.mark.parametrize("site", SEPARATE_QKV, ids=lambda s: s.id)
def test_separate_q_k_v_projections_are_one_kept_matmul_in_the_fused_path(site):
    """A warm fused call of SigLIP 2, BERT and OWLv2 projects q, k and v in one matmul with the
    concatenated weights kept in the autocast dtype (no cast of a parameter), where the manual
    path runs three and autocast casts each weight and bias."""
    module, args, kwargs = fused(site)
    manual = copy.deepcopy(module)
    manual.fused_attn = False
    aten_ops(module, args, kwargs)
    warm, by_hand = aten_ops(module, args, kwargs), aten_ops(manual, args, kwargs)
    assert warm.count("aten.addmm.default") == 2, warm  # q, k, v together; the output
    assert by_hand.count("aten.addmm.default") == 4, by_hand
    # autocast casts the input once, and the output projection's weight and bias
    assert warm.count("aten._to_copy.default") == 3, warm


@pytest.mark.parametrize("site", SEPARATE_QKV, ids=lambda s: s.id)
def test_the_kept_q_k_v_weights_follow_an_in_place_change_and_training_gets_gradients(site):
    module, args, kwargs = prepared(site, dtype=torch.float64, device="cpu", fused_attn=True)
    with torch.no_grad():
        module(*args, **kwargs)  # kept
        module.k_proj.weight.mul_(-2.0)
        kept = module(*args, **kwargs)
    separate = module(*args, **kwargs)  # grad enabled: the three projections, not kept
    torch.testing.assert_close(kept, separate, rtol=1e-12, atol=1e-12)
    separate.square().sum().backward()
    assert all(p.weight.grad is not None and p.weight.grad.abs().sum() > 0
               for p in (module.q_proj, module.k_proj, module.v_proj))


def test_zipdepth_hands_sdpa_its_projections_without_copying_them():
    """The map's k, v and q come out of their matmuls with a stride-1 head width: nothing is
    copied before either SDPA call (the convolutions' outputs needed two copies)."""
    module, args, kwargs = fused(ZIPDEPTH)
    ops = aten_ops(module, args, kwargs, autocast=False)
    before = ops[:max(i for i, op in enumerate(ops) if "scaled_dot_product" in op)]
    assert not [op for op in before if op in ("aten.clone.default", "aten.copy_.default")], ops


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize("site", SITES, ids=lambda s: s.id)
def test_on_cuda_every_fused_call_takes_a_fused_kernel_not_the_math_fallback(site, handed):
    """At the real sizes under float16 autocast, SDPA's own dispatcher picks flash, memory-efficient
    or cuDNN attention for every call the fused path makes."""
    module, args, kwargs = prepared(site, dtype=torch.float32, device="cuda", fused_attn=True)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
        module(*args, **kwargs)
    math = int(torch.nn.attention.SDPBackend.MATH)
    for q, k, v, mask in handed:
        assert torch._fused_sdp_choice(q, k, v, mask, 0.0, False, scale=None) != math, site.id


@pytest.mark.gpu
@cuda
@pytest.mark.parametrize(("site", "parameter"), [
    (SWIN, "relative_position_bias_table"),
    (limited(families.family("siglip2").sites[0]), "k_proj.weight")], ids=["swin", "siglip2"])
def test_a_cuda_graph_computes_what_is_kept_eagerly_so_its_replays_follow_the_parameters(
        site, parameter):
    """The Swin mask and SigLIP 2's concatenated q, k, v weights, kept eagerly, are computed
    inside a captured graph from the parameters: a replay after an in-place change uses it."""
    module, args, kwargs = prepared(site, dtype=torch.float32, device="cuda", fused_attn=True)
    with torch.no_grad():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            module(*args, **kwargs)  # warm-up, eager: kept
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = module(*args, **kwargs)
        module.get_parameter(parameter).mul_(-2.0)
        graph.replay()
        expected = module(*args, **kwargs)  # eager, rebuilt after the change
    torch.testing.assert_close(out, expected)

"""The wiring's checks on small transformers detectors, shared by the CPU tests and the
interpreter child (``interpreted_wiring_checks.py``).

A family (``detector_families.toml``) is built twice from one seed: stock, and wired, and both run
on the same inputs (:func:`inputs`: pixels, and a text prompt for the open-vocabulary families).
The checks:
- the wiring finds the family's sites, and each asks its slot on every forward;
- every real call a wired site made (captured) is within the slot's bounded contract against
  transformers' own core in float64, output and the three input gradients: our error at most
  ``K`` x the stock core's own float32 error plus a floor (``libreyolo.kernels.slots.MSDA_BOUND``);
- the wired model's outputs match the stock model's (:func:`assert_same_detections`).
"""

from __future__ import annotations

import importlib
import tomllib
from dataclasses import dataclass
from pathlib import Path

import torch

import libreyolo.integrations.transformers as wiring
from conformance.schema.bounds import bounded_limit
from libreyolo.kernels.slots import MSDA_BOUND

FAMILIES_FILE = Path(__file__).with_name("detector_families.toml")


@dataclass(frozen=True)
class Family:
    name: str
    config: str
    model: str
    overrides: dict
    image: int
    sites: int
    slot: str
    core: str
    backbone: dict | None = None
    #: a text prompt's token ids, for the families that ground text (Grounding DINO and kin)
    prompt: list[int] | None = None
    #: the decoder's queries are the top-k of proposals scored after deformable-attention sites
    #: (two-stage with a deformable encoder: the Grounding DINOs), so a rounding at those sites
    #: may reorder proposals tied at the cut (:func:`assert_same_detections`)
    selects_after_sites: bool = False


def load_families(table: str) -> dict[str, Family]:
    """``family`` (small configurations, CPU) or ``full`` (the defaults, GPU) by name."""
    with FAMILIES_FILE.open("rb") as handle:
        return {entry["name"]: Family(**entry) for entry in tomllib.load(handle)[table]}


FAMILIES = load_families("family")


def inputs(family: Family, batch: int = 1, device: str = "cpu", seed: int = 0) -> dict:
    """The forward's keyword arguments: random pixels from ``seed``, and the family's prompt (one
    copy per image, every token attended) where it reads text."""
    pixels = torch.randn(batch, 3, family.image, family.image,
                         generator=torch.Generator().manual_seed(seed + 1))
    arguments = {"pixel_values": pixels}
    if family.prompt is not None:
        ids = torch.tensor([family.prompt]).expand(batch, -1)
        arguments.update(input_ids=ids, attention_mask=torch.ones_like(ids))
    return {name: tensor.to(device) for name, tensor in arguments.items()}


def _redraw_attention_projections(model, seed: int) -> None:
    """A trained model's sites weigh their points unevenly and move them with the query; a
    fresh one's own initialisation zeroes the projections that do both (uniform weights, fixed
    offsets), under which a kernel pairing a weight with the wrong point gives the right output.
    Redrawn from ``seed``: the weights' projection (bias included) and the offsets' matrix
    (its grid bias kept)."""
    generator = torch.Generator().manual_seed(seed + 2)
    with torch.no_grad():
        for name, module in model.named_modules():
            if not isinstance(module, torch.nn.Linear):
                continue
            if name.endswith(".attention_weights"):
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * 0.1)
                module.bias.copy_(torch.randn(module.bias.shape, generator=generator))
            elif name.endswith(".sampling_offsets"):
                module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * 0.02)


def build(family: Family, seed: int = 0, batch: int = 1, device: str = "cpu"):
    """The family's stock model in eval mode, its weights from ``seed`` (the attention
    projections redrawn: :func:`_redraw_attention_projections`), and its :func:`inputs`."""
    import transformers

    arguments = dict(family.overrides)
    if family.backbone is not None:
        backbone = dict(family.backbone)
        arguments["backbone_config"] = getattr(transformers, backbone.pop("class"))(**backbone)
    torch.manual_seed(seed)
    model = getattr(transformers, family.model)(getattr(transformers, family.config)(**arguments))
    _redraw_attention_projections(model, seed)
    return model.eval().to(device), inputs(family, batch, device, seed)


@dataclass
class Call:
    """One real call a wired site made: which route, and its arguments (detached copies)."""

    route: str  # "classic" | "ragged"
    args: tuple


class Recorder:
    """Records the calls the wired sites hand to the slots (``_ask_classic``, ``_ask_ragged``),
    and whether an implementation took each (its answer was not None)."""

    def __init__(self, monkeypatch):
        self.calls: list[Call] = []
        self.declined = 0
        for route in ("classic", "ragged"):
            ask = getattr(wiring, f"_ask_{route}")
            monkeypatch.setattr(wiring, f"_ask_{route}", self._recording(route, ask))

    def _recording(self, route, ask):
        def recorded(*args):
            self.calls.append(Call(route, tuple(
                a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args)))
            out = ask(*args)
            self.declined += out is None
            return out
        return recorded


def stock_core(family: Family):
    module, name = family.core.split(":")
    core = getattr(importlib.import_module(module), name)
    if isinstance(core, type):  # the MultiScaleDeformableAttention module: stateless
        layer = core()

        def classic(value, shapes, locations, weights):
            # the forward reads the pairs only (the int64 tensor is for a hub kernel)
            pairs = [tuple(int(n) for n in level) for level in shapes]
            return layer(value, pairs, pairs, None, locations, weights, 64)
        return classic
    return core


def _ours(route):
    ask = getattr(wiring, f"_ask_{route}")

    def ours(*args):
        out = ask(*args)
        assert out is not None, "no implementation took a call the wired site made"
        return out
    return ours


def _run(fn, call: Call, dtype, grad_output):
    """Output and the gradients of value, sampling locations and attention weights."""
    value, shapes, locations, weights, *rest = call.args
    leaves = [t.to(dtype, copy=True).requires_grad_() for t in (value, locations, weights)]
    out = fn(leaves[0], shapes, leaves[1], leaves[2], *rest)
    out.backward(grad_output.to(device=out.device, dtype=out.dtype))
    # discrete sampling has no gradient through the locations: transformers' core leaves None
    grads = [torch.zeros_like(leaf) if leaf.grad is None else leaf.grad for leaf in leaves]
    return [t.detach().double() for t in (out, *grads)]


def call_errors(family: Family, call: Call, ours=None):
    """Per quantity (output, three gradients): (our error, the bound) against the stock core in
    float64, the bound from the stock core's own error in the call's dtype."""
    stock = stock_core(family)
    ours = ours or _ours(call.route)
    value, _, locations, weights, *_ = call.args
    dtype = wiring._widest(value, locations, weights)  # what the call ran in
    generator = torch.Generator().manual_seed(7)
    grad_output = torch.randn(value.shape[0], locations.shape[1], value.shape[2] * value.shape[3],
                              generator=generator, dtype=torch.float64)
    oracle = _run(stock, call, torch.float64, grad_output)
    theirs = _run(stock, call, dtype, grad_output)
    mine = _run(ours, call, dtype, grad_output)
    eps = torch.finfo(dtype).eps
    rows = []
    for name, ref, port, cand in zip(("output", "grad_value", "grad_sampling_locations",
                                      "grad_attention_weights"), oracle, theirs, mine, strict=True):
        limit = bounded_limit((port - ref).abs().max().item(), ref.abs().max().item(), eps,
                              MSDA_BOUND.k, MSDA_BOUND.floor)
        rows.append((name, (cand - ref).abs().max().item(), limit))
    return rows


def check_family(family: Family, monkeypatch, model_atol: float = 1e-4) -> Recorder:
    """Every check of the module docstring on ``family``; returns the recorder for more."""
    stock, arguments = build(family)
    wired, _ = build(family)
    report = wiring.wire_deformable_attention(wired)
    assert len(report.wired) == family.sites, report
    assert {site.slot for site in report.wired} == {family.slot}, report
    assert not report.left, report
    recorder = Recorder(monkeypatch)
    with torch.no_grad():
        expected = stock(**arguments)
        got = wired(**arguments)
    assert len(recorder.calls) == family.sites, \
        f"{family.name}: {len(recorder.calls)} slot calls in a forward, {family.sites} sites wired"
    assert recorder.declined == 0, f"{family.name}: {recorder.declined} calls declined"
    for index, call in enumerate(list(recorder.calls)):  # checking calls the sites again
        for name, error, limit in call_errors(family, call):
            assert error <= limit, (f"{family.name} call {index}: {name} error {error:.3g} over "
                                    f"the bound {limit:.3g}")
    assert_same_detections(family, got, expected, model_atol)
    return recorder


def _close(got: torch.Tensor, expected: torch.Tensor, atol: float, what: str) -> None:
    torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=atol,
                               msg=lambda message: f"{what}: {message}")


def selected_proposals(output) -> torch.Tensor:
    """(batch, queries) indices of the encoder proposals the decoder's queries start from, in
    query order, as transformers' two-stage Grounding DINO selects them (the top-k of each
    proposal's best class score, highest first); checked against the reference points the
    model reports, so a change in how transformers selects fails here, not silently."""
    queries = output.init_reference_points.shape[1]
    chosen = torch.topk(output.enc_outputs_class.max(-1)[0], queries, dim=1)[1]
    coordinates = torch.gather(output.enc_outputs_coord_logits, 1,
                               chosen.unsqueeze(-1).expand(-1, -1, 4)).sigmoid()
    assert torch.equal(coordinates, output.init_reference_points), \
        "the model's reference points are not the top-k proposals' (its selection changed?)"
    return chosen


def assert_same_detections(family: Family, got, expected, atol: float) -> None:
    """The wired model's ``logits`` and ``pred_boxes`` match the stock model's within ``atol``.

    Where the queries are selected after deformable-attention sites (``selects_after_sites``),
    proposals whose scores are tied within a rounding may be selected in another order, or one
    in place of another at the cut (seen on an H100: 2,397 of Grounding DINO's 230,400 logits
    moved, by up to 25). There the encoder's proposals (scores, boxes) match within ``atol``, so
    a proposal one model selected and the other did not scores within ``2 atol`` of the cut (the
    k-th score moves by at most ``atol`` too), and every proposal both selected gives the same
    detection, query paired with query by proposal."""
    if not family.selects_after_sites:
        for key in ("logits", "pred_boxes"):
            _close(getattr(got, key), getattr(expected, key), atol, f"{family.name} {key}")
        return
    for key in ("enc_outputs_class", "enc_outputs_coord_logits"):
        _close(getattr(got, key), getattr(expected, key), atol, f"{family.name} {key}")
    chosen = {"got": selected_proposals(got), "expected": selected_proposals(expected)}
    for image in range(chosen["expected"].shape[0]):
        rank = {side: {int(p): q for q, p in enumerate(chosen[side][image])} for side in chosen}
        both = sorted(rank["expected"].keys() & rank["got"].keys())
        pairs = {side: [rank[side][p] for p in both] for side in chosen}
        for key in ("logits", "pred_boxes"):
            _close(getattr(got, key)[image, pairs["got"]],
                   getattr(expected, key)[image, pairs["expected"]], atol,
                   f"{family.name} image {image} {key}, queries paired by proposal")

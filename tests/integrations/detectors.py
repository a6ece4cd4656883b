"""The wiring's checks on small transformers detectors, shared by the CPU tests and the
interpreter child (``interpreted_wiring_checks.py``).

A family (``detector_families.toml``) is built twice from one seed: stock, and wired, and both run
on the same inputs (:func:`inputs`: pixels, and a text prompt for the open-vocabulary families).
The checks:
- the wiring finds the family's sites, and each asks its slot on every forward;
- every real call a wired site made (captured) is within the slot's bounded contract against
  transformers' own core in float64, output and the three input gradients: our error at most
  ``K`` x the stock core's own float32 error plus a floor (``libreyolo.kernels.slots.MSDA_BOUND``);
- the wired model's outputs match the stock model's (:func:`assert_same_detections`; where the
  queries are selected after the sites, with the stock's selection).
"""

from __future__ import annotations

import importlib
import tomllib
from contextlib import contextmanager
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
    #: may reorder proposals tied within it: their detections are compared with the stock's
    #: selection (:func:`assert_same_detections`)
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


#: A redrawn box head's output (box deltas, in the units its family adds them in) per unit of its
#: input (layer-normalised hidden states): enough to move boxes, too little to saturate them.
BOX_HEAD_GAIN = 0.5


def _redraw_box_heads(model, seed: int) -> None:
    """A trained model's boxes, and the reference points its decoder refines layer after layer
    (the next layer's sampling locations), move with what the sites compute; a fresh one's box
    heads give nothing (most families zero their last layer) or next to nothing (their weights'
    std of 0.01-0.02 shrinks the input at every layer), so its boxes are its anchors' or
    proposals' whatever the sites give. Every box head (an MLP of linear layers whose name says
    ``bbox``) has its weights redrawn from ``seed``: the hidden layers He-scaled, which keeps the
    input's size through the ReLUs, the last one giving deltas of about :data:`BOX_HEAD_GAIN`."""
    generator = torch.Generator().manual_seed(seed + 3)
    with torch.no_grad():
        for name, module in model.named_modules():
            layers = getattr(module, "layers", None)
            if "bbox" not in name or not isinstance(layers, torch.nn.ModuleList) or not all(
                    isinstance(layer, torch.nn.Linear) for layer in layers):
                continue
            for index, layer in enumerate(layers):
                fan_in = layer.weight.shape[1]
                gain = BOX_HEAD_GAIN if index == len(layers) - 1 else 2 ** 0.5
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=generator)
                                   * gain / fan_in ** 0.5)


#: Added to ``build``'s seed for the BatchNorms' calibration image: one that no test or benchmark
#: feeds (theirs are :func:`inputs`' from seeds 0 to 8)
CALIBRATION_SEED = 100


def _calibrate_batch_norms(model, arguments: dict) -> None:
    """A trained model's BatchNorms pass on features of about unit size; a fresh RT-DETR's,
    RT-DETRv2's and PP-DocLayoutV3's draw their scales around 0 (std 0.01), and the hybrid
    encoders' convolutions (every family of that design: D-FINE and DEIMv2 too) draw weights of
    std 0.01, a fraction of what keeps their input's size. Through the encoder's dozens of them
    the sites' values (its output) shrink to 1e-10 or less, and the sites hardly move the
    outputs. So every ``BatchNorm2d`` (bias 0) takes the one scale that gives its output unit
    standard deviation in a forward on ``arguments``: each is set at its first call, and its output
    passed on so scaled, so every later layer is set on inputs already set (layer-sequential unit
    variance, in one forward). A model with no ``BatchNorm2d`` runs no forward."""
    norms = [module for module in model.modules() if isinstance(module, torch.nn.BatchNorm2d)]
    if not norms:
        return
    calibrated = set()

    def calibrate(module, args, output):
        if module in calibrated:  # called again in the forward: its scale is set
            return None
        calibrated.add(module)
        scale = output.std()
        module.weight.fill_(1 / scale)
        return output / scale

    with torch.no_grad():
        for module in norms:
            module.weight.fill_(1.0)
            module.bias.zero_()
        handles = [module.register_forward_hook(calibrate) for module in norms]
        try:
            model(**arguments)
        finally:
            for handle in handles:
                handle.remove()


def build(family: Family, seed: int = 0, batch: int = 1, device: str = "cpu"):
    """The family's stock model in eval mode, its weights from ``seed`` (the attention
    projections and the box heads redrawn: :func:`_redraw_attention_projections`,
    :func:`_redraw_box_heads`; the BatchNorms scaled on an image from ``seed`` that no test
    feeds, on the CPU whatever ``device``: :func:`_calibrate_batch_norms`), and its
    :func:`inputs`."""
    import transformers

    arguments = dict(family.overrides)
    if family.backbone is not None:
        backbone = dict(family.backbone)
        arguments["backbone_config"] = getattr(transformers, backbone.pop("class"))(**backbone)
    torch.manual_seed(seed)
    model = getattr(transformers, family.model)(getattr(transformers, family.config)(**arguments))
    _redraw_attention_projections(model, seed)
    _redraw_box_heads(model, seed)
    _calibrate_batch_norms(model.eval(), inputs(family, seed=seed + CALIBRATION_SEED))
    return model.to(device), inputs(family, batch, device, seed)


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
    with torch.no_grad():
        got = Run(got, under_stock_selection(family, wired, arguments, expected))
    assert_same_detections(family, got, expected, Absolute(model_atol))
    return recorder


#: The encoder's proposals (scored after sites, before the selection) and the decoder's detections.
PROPOSALS = ("enc_outputs_class", "enc_outputs_coord_logits")
DETECTIONS = ("logits", "pred_boxes")


@dataclass(frozen=True)
class Run:
    """A model's outputs on the inputs: its own forward (``free``) and, where its family selects
    its queries after the sites, its forward with the stock model's selection (``selected``,
    :func:`under_stock_selection`), whose detections are the ones compared."""

    free: object
    selected: object | None = None

    def holding(self, key: str):
        """The forward whose ``key`` is compared."""
        return self.selected if key in DETECTIONS and self.selected is not None else self.free


def _close(got: torch.Tensor, expected: torch.Tensor, atol: float, what: str) -> None:
    torch.testing.assert_close(got.float(), expected.float(), rtol=0, atol=atol,
                               msg=lambda message: f"{what}: {message}")


def largest_difference(got: torch.Tensor, expected: torch.Tensor) -> float:
    """The greatest ``|got - expected|``, entries equal in both (the -inf past a prompt) at 0; a
    NaN, or an infinity one side only, makes it NaN or infinite."""
    got, expected = got.float(), expected.float()
    return torch.where(got == expected, 0.0, (got - expected).abs()).max().item()


def _finite_max(tensor: torch.Tensor) -> float:
    """The largest magnitude of ``tensor``'s finite entries (the -inf past a prompt left out)."""
    tensor = tensor.float()
    return torch.where(tensor.isfinite(), tensor, 0.0).abs().max().item()


@dataclass(frozen=True)
class Absolute:
    """Every entry within ``atol`` of the stock model's (float32: both models round alike but at
    the sites)."""

    atol: float

    def check(self, key: str, got: torch.Tensor, expected: torch.Tensor, what: str) -> None:
        _close(got, expected, self.atol, what)


@dataclass(frozen=True)
class WithinStockError:
    """bf16 autocast: the wired model's error against the stock model in float32 (``oracle``), at
    most ``k`` times the stock model's own bf16 error plus a floor, per output tensor, by the
    suite's bounded formula (``bounded_limit``) with MSDA's contract: k = 8, a floor of 8 bf16 ulps
    of the oracle's largest finite value.

    Why MSDA's: the wired model is the stock one with each site's call replaced by one within that
    contract (at most k times the stock core's error in the same dtype, checked call by call).
    Rounding-sized errors travel through the layers linearly, so the sites' share of the model's
    error grows by at most k and every other operation's share is the stock's own: the wired
    model's error is at most about k times the stock's. The floor covers a stock error of zero (an
    output no bf16 rounding reaches). An absolute tolerance cannot say this: under bf16 autocast
    the Grounding DINOs' proposal scores (up to ~66) sit where one ulp is 0.25-0.5, and six fused
    encoder layers leave the stock itself that far and more from float32.

    The oracle must decode the stock's queries (``oracle.selected``: the float32 stock run with the
    bf16 stock's selection), or its distance from the stock would be another query's detection,
    not a rounding, and the limit vacuous: :func:`model_tolerance` builds it so."""

    oracle: Run
    dtype: torch.dtype = torch.bfloat16

    def check(self, key: str, got: torch.Tensor, expected: torch.Tensor, what: str) -> None:
        oracle = getattr(self.oracle.holding(key), key).float()
        largest = _finite_max(oracle)
        theirs = largest_difference(expected, oracle)
        limit = bounded_limit(theirs, largest, torch.finfo(self.dtype).eps, MSDA_BOUND.k,
                              MSDA_BOUND.floor)
        ours = largest_difference(got, oracle)
        assert ours <= limit, (
            f"{what}: {ours:.4g} from the float32 stock model, over {limit:.4g} (the stock's own "
            f"{self.dtype} error {theirs:.4g} x {MSDA_BOUND.k:g} + {MSDA_BOUND.floor:g} ulps of "
            f"{largest:.4g})")


@contextmanager
def selecting(model, scores: torch.Tensor):
    """Within: ``model`` (a Grounding DINO) selects its decoder's queries from ``scores`` (another
    forward's ``enc_outputs_class``) instead of its own encoder's. transformers scores the
    proposals with ``model.model.encoder_output_class_embed`` (then the selected queries, a shorter
    sequence) and takes their top-k by best score; a hook hands it ``scores`` for the proposals.
    Fails unless exactly one output was replaced (transformers' selection moved?)."""
    replaced = []

    def replace(module, args, output):
        if output.shape != scores.shape:
            return None
        replaced.append(output)
        return scores

    handle = model.model.encoder_output_class_embed.register_forward_hook(replace)
    try:
        yield
    finally:
        handle.remove()
    assert len(replaced) == 1, \
        f"{len(replaced)} proposal scorings replaced in a forward, not 1 (the selection moved?)"


def under_stock_selection(family: Family, model, arguments: dict, stock_output):
    """``model``'s forward with the stock forward's selection where ``family`` selects its queries
    after the sites (None otherwise): what :class:`Run` compares. The caller sets grad and
    autocast."""
    if not family.selects_after_sites:
        return None
    with selecting(model, stock_output.enc_outputs_class):
        return model(**arguments)


#: The stock model's sensitivity to its sites (:func:`site_sensitivity`): its runs with every
#: site's output perturbed, one per seed; the largest deviation over them times the factor, plus
#: the floor in ulps of the output's own dtype times its largest finite value, is the limit.
SENSITIVITY_SEEDS = (1, 2, 3)
SENSITIVITY_FACTOR = 2.0
SENSITIVITY_FLOOR_ULPS = 2.0


@contextmanager
def sites_computing(family: Family, model, site):
    """Within: ``model`` (unwired; unwired again after) has its sites wired, every slot call
    answered by ``site(core, *arguments)``, ``core`` transformers' own (:func:`stock_core`), so
    ``site`` may compute the stock call, perturbed or wrong. Through the wiring, because that is
    where the three cores' calls (a module's forward, an attribute, a module-level name) are
    reached alike; a site computing ``core(*arguments)`` gives the stock model's outputs bit for
    bit (a test)."""
    report = wiring.wire_deformable_attention(model)
    assert len(report.wired) == family.sites and not report.left, report
    core = stock_core(family)
    saved = wiring._ask_classic, wiring._ask_ragged

    def answer(*arguments):
        return site(core, *arguments)

    wiring._ask_classic = wiring._ask_ragged = answer
    try:
        yield
    finally:
        wiring._ask_classic, wiring._ask_ragged = saved
        wiring.unwire_deformable_attention(model)


def perturbed(seed: int, scale: float = 1.0):
    """A site (for :func:`sites_computing`) giving the stock call's output with each entry times
    ``1 + u``, ``u`` uniform in +-``scale`` x r from ``seed``, r = MSDA's k x eps of the output's
    dtype. At ``scale`` 1 that is within what the slot's contract allows a call (k times the stock
    core's own error, of order one eps of that dtype, plus 8 ulps of the largest output), and at
    least how far a kernel exact in that dtype is from the stock call (the stock's own error)."""
    generators = {}

    def site(core, *arguments):
        out = core(*arguments)
        if out.device not in generators:
            generators[out.device] = torch.Generator(out.device).manual_seed(seed)
        r = scale * MSDA_BOUND.k * torch.finfo(out.dtype).eps
        noise = torch.rand(out.shape, generator=generators[out.device], device=out.device,
                           dtype=torch.float64)
        return (out.double() * (1 + r * (2 * noise - 1))).to(out.dtype)
    return site


@dataclass(frozen=True)
class WithinSiteSensitivity:
    """Every compared output within ``factor`` x ``moved`` of the stock's forward, ``moved`` the
    farthest the stock model's own runs went from it with every site's output perturbed by an error
    the slot's contract allows (:func:`site_sensitivity`), plus ``floor_ulps`` ulps of the output's
    dtype times its largest finite value (a limit where no perturbed run moved it).

    Why: the wired model is the stock one with each site's call within the contract (checked call
    by call), so how far such errors carry to the detections is a property of the model, which an
    absolute number cannot know: decoders refine their reference points layer after layer, so a
    rounding-sized difference at one site grows by layer (4-10x a layer in PP-DocLayoutV3), and one
    sampling point that moves onto a neighbouring pixel (RT-DETRv2's discrete sampling) or one bf16
    rounding that goes the other way moves a detection by much more than the difference that moved
    it. The stock model perturbed at its sites measures exactly that, in the test's dtype, autocast,
    batch and device. The perturbation is the contract's size and uniform (a kernel's rounding is
    usually smaller: a few ulps); the factor covers that the largest deviation of a few seeded runs
    is a sample (on the small CPU models two seeds' maxima differ by up to 3x: RT-DETRv2 discrete
    in bf16, where single roundings flip and single points move)."""

    moved: dict
    factor: float = SENSITIVITY_FACTOR
    floor_ulps: float = SENSITIVITY_FLOOR_ULPS

    def limit(self, key: str, expected: torch.Tensor) -> float:
        floor = self.floor_ulps * torch.finfo(expected.dtype).eps * _finite_max(expected)
        return self.factor * self.moved[key] + floor

    def check(self, key: str, got: torch.Tensor, expected: torch.Tensor, what: str) -> None:
        limit = self.limit(key, expected)
        ours = largest_difference(got, expected)
        assert ours <= limit, (
            f"{what}: {ours:.4g} from the stock model, over {limit:.4g} ({self.factor:g} x "
            f"{self.moved[key]:.4g}, the farthest the stock moved with its sites perturbed within "
            f"the contract, + {self.floor_ulps:g} ulps of its largest entry)")


def _decodes_the_stocks_queries(family: Family, run: Run, expected) -> bool:
    """Whether ``run`` decodes ``expected``'s queries: the same reference points where the queries
    are selected before the sites, the same proposals at the same ranks under the stock's
    selection where after."""
    if family.selects_after_sites:
        return torch.equal(selected_proposals(run.selected), selected_proposals(expected))
    return torch.equal(run.free.init_reference_points, expected.init_reference_points)


def site_sensitivity(family: Family, stock, arguments: dict, expected,
                     seeds=SENSITIVITY_SEEDS) -> WithinSiteSensitivity:
    """:class:`WithinSiteSensitivity` around ``expected`` (``stock``'s forward on ``arguments``):
    ``stock`` (unwired) run once per seed with its sites :func:`perturbed`, and where the queries
    are selected after the sites (the Grounding DINOs) once more under the stock's selection
    (:func:`under_stock_selection`), which gives the detections compared; its own forward gives
    the encoder's proposals. The caller sets grad and autocast as for ``expected``. Every run must
    decode the stock's queries, or its deviation would be another query's detection, not a
    rounding carried."""
    keys = DETECTIONS + (PROPOSALS if family.selects_after_sites else ())
    moved = dict.fromkeys(keys, 0.0)
    for seed in seeds:
        with sites_computing(family, stock, perturbed(seed)):
            run = Run(stock(**arguments), under_stock_selection(family, stock, arguments,
                                                                expected))
        assert _decodes_the_stocks_queries(family, run, expected), (
            f"{family.name}: the run with its sites perturbed (seed {seed}) decodes other queries "
            f"than the stock's")
        for key in keys:
            moved[key] = max(moved[key], largest_difference(getattr(run.holding(key), key),
                                                            getattr(expected, key)))
    return WithinSiteSensitivity(moved)


def model_tolerance(family: Family, dtype: str, stock, arguments: dict, expected):
    """The wired model's tolerance around the stock's forward ``expected`` on a GPU: the stock
    model's own sensitivity to its sites in ``dtype`` (:func:`site_sensitivity`), but for the
    Grounding DINOs in bf16 autocast, :class:`WithinStockError` around ``stock`` (unwired) run in
    float32, free and with the bf16 forward's selection (only :func:`selecting` makes a float32
    forward decode the bf16 one's). An absolute tolerance held them until the BatchNorms were
    calibrated and the sites mattered: on an H100 the Grounding DINOs' float32 logits under the
    stock's selection then moved by up to 0.9 (1e-3 allowed)."""
    device = arguments["pixel_values"].device.type
    if dtype == "fp32" or not family.selects_after_sites:
        with torch.no_grad(), torch.autocast(device, torch.bfloat16, enabled=dtype == "bf16"):
            return site_sensitivity(family, stock, arguments, expected)
    with torch.no_grad(), torch.autocast(device, enabled=False):
        oracle = Run(stock(**arguments), under_stock_selection(family, stock, arguments, expected))
    return WithinStockError(oracle)


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


def assert_same_detections(family: Family, got: Run, expected, tolerance) -> None:
    """The wired model's outputs (``got``) match the stock model's forward (``expected``) within
    ``tolerance`` (:class:`Absolute`, :class:`WithinSiteSensitivity` or
    :class:`WithinStockError`): ``logits`` and
    ``pred_boxes``, query by query.

    Where the queries are selected after the sites (``selects_after_sites``: the Grounding DINOs),
    a rounding at the sites may select proposals whose scores tie within it in another order, or
    one in place of another at the cut, and the query a proposal lands on decides its detection
    twice over (transformers 5.17): the decoder's content embedding is the learned one of the
    query's rank (``embedding_init_target``), and its self-attention spans every query, unmasked,
    so a query that moved moves every other's detection too. There the encoder's proposals
    (scores and boxes, before the selection) of the two forwards match, and the wired model run
    with the stock's selection (``got.selected``) holds the stock's proposals at the stock's ranks
    (read from its reference points) and gives the stock's detections. The wired model's own
    selection needs no other check: ranks move with the scores by at most as much, so any
    proposal it selects otherwise ties with the stock's, within the scores' tolerance."""
    if family.selects_after_sites != (got.selected is not None):
        raise ValueError(
            f"got: expected a Run {'with' if family.selects_after_sites else 'without'} a forward "
            f"under the stock's selection (selected) for {family.name} "
            f"(selects_after_sites={family.selects_after_sites})")
    if family.selects_after_sites:
        for key in PROPOSALS:
            tolerance.check(key, getattr(got.free, key), getattr(expected, key),
                            f"{family.name} {key}")
        assert _decodes_the_stocks_queries(family, got, expected), \
            f"{family.name}: the run under the stock's selection decodes other queries"
    for key in DETECTIONS:
        tolerance.check(key, getattr(got.holding(key), key), getattr(expected, key),
                        f"{family.name} {key}")

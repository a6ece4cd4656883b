"""The three calls: ``prepare`` (float layers -> fake-quantized ones), ``calibrate`` (the static
input scales) and ``convert`` (fake-quantized layers -> finalized ones), each in place, each
atomic: every layer is checked, and every replacement built, before the model changes, so an
error leaves the model as it was. Errors name the layer by its qualified name.

```python
report = prepare(model, "w8a8_int8", skip=["stem.*", "head.cls"])   # what it swapped and why not
calibrate(model, batches)                                           # observers, progress bar
convert(model)                                                      # finalized, packed layers
```
"""

from __future__ import annotations

import fnmatch
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

from libreyolo.nn.attention import GlobalTokenAttention, _SeparateQKV
from libreyolo.nn.finalized import FinalizedConv2d, FinalizedLinear
from libreyolo.suggest import did_you_mean

from .modules import QuantConv2d, QuantLinear, _Quantized
from .observers import Observer, input_qparams, observer_factory
from .recipes import Recipe, get_recipe

_QUANT_OF_FLOAT = {nn.Linear: QuantLinear, nn.Conv2d: QuantConv2d}
_FINALIZED_OF_QUANT = {QuantLinear: FinalizedLinear, QuantConv2d: FinalizedConv2d}
_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

#: Modules whose fused path reads some children's weights itself (``F.linear`` on their
#: concatenated ``weight``s, a matmul on a 1x1 convolution's weight) instead of calling them:
#: that read would bypass a quantized child's quantizers (and a finalized child has no
#: ``weight``), so ``prepare`` turns their fused path off (``fused_attn = False``) when it
#: swaps one of those children, and says so in its report.
DIRECT_WEIGHT_READERS: dict[type, tuple[str, ...]] = {
    _SeparateQKV: ("q_proj", "k_proj", "v_proj"),
    GlobalTokenAttention: ("kv_spatial", "q_spatial"),
}


class LayerError(ValueError):
    """Some layers cannot be prepared, calibrated or converted. ``layers`` maps each one's
    qualified name to the reason; the message lists them all. Nothing was changed."""

    def __init__(self, what: str, layers: dict[str, str]):
        self.layers = dict(layers)
        lines = "\n".join(f"  {name!r}: {reason}" for name, reason in self.layers.items())
        count = f"{len(self.layers)} layer{'s' if len(self.layers) != 1 else ''}"
        super().__init__(f"{what}: {count} cannot be {_VERB[what]}; nothing was changed:\n"
                         f"{lines}")


_VERB = {"prepare": "prepared", "calibrate": "calibrated", "convert": "converted"}


@dataclass(frozen=True)
class Entry:
    """One line of a report: a module's qualified name, its type, and what happened or why."""

    name: str
    type: str
    detail: str


def _table(title: str, entries: list[Entry]) -> list[str]:
    if not entries:
        return []
    width = max(len(e.name) for e in entries)
    return [f"{title} ({len(entries)}):",
            *(f"  {e.name:<{width}}  {e.type:<14} {e.detail}" for e in entries)]


@dataclass
class PrepareReport:
    """What ``prepare`` did: ``swapped`` (float layer -> quantized), ``skipped`` (with the
    reason), ``adjusted`` (parents whose fused path was turned off, and why)."""

    recipe: Recipe
    swapped: list[Entry] = field(default_factory=list)
    skipped: list[Entry] = field(default_factory=list)
    adjusted: list[Entry] = field(default_factory=list)

    def __str__(self) -> str:
        lines = [f"prepare: recipe {self.recipe.name!r} ({self.recipe.doc})",
                 *_table("swapped", self.swapped), *_table("skipped", self.skipped),
                 *_table("adjusted", self.adjusted)]
        return "\n".join(lines)


@dataclass
class CalibrationReport:
    """What ``calibrate`` found: per calibrated layer, its input scale (and zero point)."""

    observer: str
    batches: int
    layers: dict[str, dict] = field(default_factory=dict)

    def __str__(self) -> str:
        if not self.layers:
            return "calibrate: no layer of this model has a calibrated input scale"
        lines = [f"calibrate: {len(self.layers)} layers, {self.batches} batches, "
                 f"observer {self.observer}"]
        width = max(map(len, self.layers))
        for name, values in self.layers.items():
            zp = values.get("input_zero_point")
            lines.append(f"  {name:<{width}}  input_scale={values['input_scale']:.6g}"
                         + ("" if zp is None else f" input_zero_point={zp}"))
        return "\n".join(lines)


@dataclass
class ConvertReport:
    """What ``convert`` made: per layer, the finalized format."""

    converted: list[Entry] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(["convert:", *_table("converted", self.converted)])


# -- walking a model -----------------------------------------------------------------------------

def _locations(model: nn.Module, kinds: tuple[type, ...]) -> dict[int, tuple[nn.Module, list]]:
    """Every module of ``kinds`` with all the qualified names it sits under (a module shared by
    two parents is one entry with two names), in the model's order."""
    found: dict[int, tuple[nn.Module, list[str]]] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        if name and isinstance(module, kinds):
            found.setdefault(id(module), (module, []))[1].append(name)
    return found


def _parent(model: nn.Module, name: str) -> tuple[nn.Module, str]:
    head, _, attr = name.rpartition(".")
    return (model.get_submodule(head) if head else model), attr


def _swap(model: nn.Module, replacements: list[tuple[list[str], nn.Module]]) -> None:
    """Set every replacement under each of its names; undo all of it if any assignment fails."""
    done = []
    try:
        for names, new in replacements:
            for name in names:
                parent, attr = _parent(model, name)
                done.append((parent, attr, getattr(parent, attr)))
                setattr(parent, attr, new)
    except BaseException:
        for parent, attr, old in reversed(done):
            setattr(parent, attr, old)
        raise


def _check_model(model) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")


# -- prepare ---------------------------------------------------------------------------------------

SkipRule = Callable[[str, nn.Module], "bool | str"]


def _skip_rule(skip) -> tuple[Callable[[list[str], nn.Module], str | None], list[str]]:
    """``skip`` as a function of (names, module) -> the reason it is skipped, or None; and the
    patterns (each must match some module)."""
    if callable(skip):
        def by_callable(names, module):
            for name in names:
                answer = skip(name, module)
                if answer:
                    return answer if isinstance(answer, str) else "skipped by the skip callable"
            return None

        return by_callable, []
    if isinstance(skip, str):
        skip = [skip]
    try:
        patterns = list(skip)
    except TypeError:
        raise TypeError(f"skip must be qualified names (fnmatch patterns) or a callable, got "
                        f"{type(skip).__name__}") from None
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise TypeError(f"skip: each entry must be a str (a qualified name or an fnmatch "
                            f"pattern), got {type(pattern).__name__}")

    def by_pattern(names, module):
        for name in names:
            prefixes = list(itertools.accumulate(name.split("."), lambda a, b: f"{a}.{b}"))
            for pattern in patterns:
                for prefix in prefixes:
                    if fnmatch.fnmatchcase(prefix, pattern):
                        return f"skip: {prefix!r} matches {pattern!r}"
        return None

    return by_pattern, patterns


def _check_every_pattern_matches(model: nn.Module, patterns: list[str]) -> None:
    """A ValueError naming each pattern that matches no module, with the nearest module names:
    a mistyped skip would otherwise quantize the layer it meant to keep in float."""
    names = [name for name, _ in model.named_modules(remove_duplicate=False) if name]
    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in names)]
    if unmatched:
        raise ValueError("skip: " + "; ".join(
            f"{p!r} matches no module of the model{did_you_mean(p, names)}" for p in unmatched))


def _subclass_reason(module: nn.Module, names: list[str], readers: dict[str, nn.Module]) -> str:
    base = "nn.Linear" if isinstance(module, nn.Linear) else "nn.Conv2d"
    for name in names:
        parent = readers.get(name.rpartition(".")[0])
        if isinstance(parent, nn.MultiheadAttention):
            return ("nn.MultiheadAttention reads out_proj's weight itself "
                    "(F.multi_head_attention_forward): it cannot be swapped")
    return (f"a subclass of {base} ({type(module).__name__}): its forward may not be "
            f"{base}'s, so it is not swapped")


def _layer_problem(module: nn.Module, recipe: Recipe) -> str | None:
    """Why ``recipe`` cannot take this float layer, or None."""
    if module.weight.dtype not in _FLOAT_DTYPES:
        return (f"weight is {str(module.weight.dtype).removeprefix('torch.')}: the fake-quant "
                f"slots take float32, float16 or bfloat16")
    if isinstance(module, nn.Conv2d):
        if module.padding_mode != "zeros":
            return (f"padding_mode={module.padding_mode!r}: the finalized layers pad with "
                    f"zeros, so recipe {recipe.name!r} cannot take it")
        dim, size = "in_channels / groups", module.in_channels // module.groups
    else:
        dim, size = "in_features", module.in_features
    block = recipe.block
    if block is not None and size % block:
        what = "group_size" if recipe.weight == "int_grouped" else "block"
        return (f"{dim} = {size} is not a multiple of {block}, the {what} of recipe "
                f"{recipe.name!r} (its scales span {block} inputs)")
    return None


def prepare(model: nn.Module, recipe: str | Recipe, *, skip=()) -> PrepareReport:
    """Swap ``model``'s ``nn.Linear`` and ``nn.Conv2d`` layers (attention projections included)
    for ``QuantLinear`` / ``QuantConv2d`` of ``recipe`` (a name of ``RECIPES`` or a ``Recipe``),
    in place; return the report of what was swapped, skipped and adjusted.

    ``skip``: qualified names or fnmatch patterns (a match skips the module and everything under
    it; a pattern matching nothing is a ValueError), or a callable ``(name, module)`` returning
    True or a reason string to skip. Not swapped, and reported with the reason: subclasses of
    the two layers (their forward may differ; ``nn.MultiheadAttention``'s ``out_proj``), layers
    with hooks (a swap would drop them), layers already quantized. A layer the recipe cannot take
    (an input dim not a multiple of its block, a padding mode, a dtype) is a ``LayerError``
    (a ValueError) naming every such layer, and nothing is swapped. The new layers share the
    float layers' parameters (an optimizer made before keeps working; tied weights stay tied).
    """
    _check_model(model)
    recipe = get_recipe(recipe)
    if type(model) in _QUANT_OF_FLOAT:
        raise TypeError(f"model is a bare {type(model).__name__}: prepare swaps a model's layers "
                        f"in place, and the model itself has no parent; wrap it, e.g. "
                        f"nn.Sequential(layer)")
    rule, patterns = _skip_rule(skip)
    _check_every_pattern_matches(model, patterns)
    report = PrepareReport(recipe)
    modules = dict(model.named_modules(remove_duplicate=False))
    problems: dict[str, str] = {}
    replacements: list[tuple[list[str], nn.Module]] = []
    for module, names in _locations(model, (nn.Linear, nn.Conv2d)).values():
        kind = type(module).__name__
        if isinstance(module, _Quantized):
            report.skipped.append(Entry(names[0], kind,
                                        f"already quantized (recipe {module.recipe.name!r})"))
            continue
        if type(module) not in _QUANT_OF_FLOAT:
            report.skipped.append(Entry(names[0], kind, _subclass_reason(module, names,
                                                                         modules)))
            continue
        reason = rule(names, module)
        if reason is None and (module._forward_hooks or module._forward_pre_hooks or
                               module._backward_hooks or module._backward_pre_hooks):
            reason = "has hooks, which a swap would drop: remove them or skip the layer"
        if reason is not None:
            report.skipped.append(Entry(names[0], kind, reason))
            continue
        problem = _layer_problem(module, recipe)
        if problem is not None:
            problems[names[0]] = f"{kind}: {problem}"
            continue
        new = _QUANT_OF_FLOAT[type(module)].from_float(module, recipe)
        new.qualified_name = names[0]
        replacements.append((names, new))
        also = f" (also as {', '.join(names[1:])})" if len(names) > 1 else ""
        report.swapped.append(Entry(names[0], kind, f"-> {type(new).__name__}{also}"))
    if problems:
        raise LayerError("prepare", problems)
    adjustments = _fused_paths_to_turn_off(modules, {n for names, _ in replacements
                                                     for n in names})
    _swap(model, replacements)
    for name, parent, children in adjustments:
        parent.fused_attn = False
        parent._quantized_fused_off = True  # recorded by checkpoint.describe
        report.adjusted.append(Entry(name or "(model)", type(parent).__name__,
                                     f"fused_attn=False: its fused path reads "
                                     f"{', '.join(children)}'s weights directly"))
    return report


def _fused_paths_to_turn_off(modules: dict[str, nn.Module], swapped: set[str]):
    found, seen = [], set()
    for name, parent in modules.items():
        for kind, children in DIRECT_WEIGHT_READERS.items():
            if not isinstance(parent, kind) or id(parent) in seen:
                continue
            prefix = f"{name}." if name else ""
            hit = [c for c in children if prefix + c in swapped]
            if hit and getattr(parent, "fused_attn", False):
                found.append((name, parent, hit))
                seen.add(id(parent))
    return found


def quantized_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(qualified name, layer)`` of every ``QuantLinear`` / ``QuantConv2d``, in order."""
    return [(names[0], m) for m, names in _locations(model, (_Quantized,)).values()]


# -- calibrate ---------------------------------------------------------------------------------

def _default_forward(model: nn.Module, batch):
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def _progress_bar(progress, total):
    """(update(), close()) for ``progress``: True = tqdm when installed (else nothing), False =
    nothing, a callable = called with (batches done, total or None) after each batch."""
    done = [0]
    if callable(progress):
        def update():
            done[0] += 1
            progress(done[0], total)

        return update, lambda: None
    if progress:
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return (lambda: None), (lambda: None)
        bar = tqdm(total=total, desc="calibrate", unit="batch", leave=False)
        return (lambda: bar.update(1)), bar.close
    return (lambda: None), (lambda: None)


def calibrate(model: nn.Module, batches: Iterable, *, observer="minmax", progress=True,
              forward: Callable | None = None) -> CalibrationReport:
    """Run ``model`` on ``batches`` (in eval mode, without gradients) and set the input scale of
    every quantized layer whose recipe calibrates one; returns the values it set.

    ``batches``: an iterable of inputs, each passed as ``model(batch)``, ``model(*batch)`` (a
    tuple or list) or ``model(**batch)`` (a dict), or as ``forward(model, batch)`` says.
    ``observer``: ``"minmax"``, ``"moving_average"``, ``"percentile"`` (``observers.py``) or a
    callable returning a fresh ``Observer`` per layer. ``progress``: a tqdm bar when tqdm is
    installed (True), none (False), or a callable ``(done, total)``. Every layer's values are set
    at the end, together: an error (no batches, a layer that saw no finite input) changes
    nothing. A model whose recipes compute every scale from the data has nothing to calibrate:
    its batches are not run. The training mode of every module is restored.
    """
    _check_model(model)
    make = observer_factory(observer)
    layers = quantized_layers(model)
    if not layers:
        raise ValueError("model has no quantized layers: run prepare(model, recipe) first")
    if isinstance(batches, torch.Tensor):
        raise TypeError("batches must be an iterable of batches (e.g. a list of tensors or a "
                        "DataLoader), got a single tensor")
    try:
        total = len(batches)
    except TypeError:
        total = None
    try:
        iterator = iter(batches)
    except TypeError:
        raise TypeError(f"batches must be an iterable of batches, got "
                        f"{type(batches).__name__}") from None
    first = next(iterator, _EMPTY)
    if first is _EMPTY:
        raise ValueError("batches is empty: calibration needs at least one batch")
    static = [(name, layer) for name, layer in layers if layer.recipe.static]
    name_of = getattr(make, "name", None) or getattr(make, "__name__", "observer")
    report = CalibrationReport(str(name_of), 0)
    if not static:
        return report
    forward = forward or _default_forward
    modes = [(m, m.training) for m in model.modules()]
    observers: dict[str, Observer] = {}
    update, close = _progress_bar(progress, total)
    try:
        for name, layer in static:
            made = make()
            if not isinstance(made, Observer):
                raise TypeError(f"observer: the callable returned a {type(made).__name__}, "
                                f"not an Observer")
            observers[name] = layer._observer = made
        model.eval()
        with torch.no_grad():
            for batch in itertools.chain([first], iterator):
                forward(model, batch)
                report.batches += 1
                update()
    finally:
        close()
        for _, layer in static:
            layer._observer = None
        for m, training in modes:
            m.training = training
    found, problems = {}, {}
    for name, layer in static:
        observed = observers[name].range()
        if observed is None:
            problems[name] = (f"saw no finite input in {report.batches} batches (does the "
                              f"model's forward reach it?)")
            continue
        found[name] = input_qparams(layer.recipe.activation, *observed)
    if problems:
        raise LayerError("calibrate", problems)
    for name, layer in static:
        scale, zero_point = found[name]
        layer.set_calibration(scale, zero_point)
        values = {"input_scale": float(scale)}
        if zero_point is not None:
            values["input_zero_point"] = zero_point
        report.layers[name] = values
    return report


_EMPTY = object()


# -- convert -----------------------------------------------------------------------------------

def convert(model: nn.Module) -> ConvertReport:
    """Replace every ``QuantLinear`` / ``QuantConv2d`` of ``model`` by the ``FinalizedLinear`` /
    ``FinalizedConv2d`` of its recipe (packed weight, calibrated input scale), in place; returns
    what it made. A layer whose recipe calibrates its input but was not calibrated, or whose
    weight cannot be packed (a NaN or inf), is a ``LayerError`` naming every such layer, and
    nothing is converted. The finalized layers compute the fake-quantized layers' bits on their
    portable path (the CPU, any capture; docs/finalized_models.md)."""
    _check_model(model)
    if isinstance(model, _Quantized):
        raise TypeError(f"model is a bare {type(model).__name__}: convert swaps a model's "
                        f"layers in place; wrap it, e.g. nn.Sequential(layer)")
    found = _locations(model, (_Quantized,))
    if not found:
        raise ValueError("model has no quantized layers: run prepare(model, recipe) first")
    problems: dict[str, str] = {}
    replacements, report = [], ConvertReport()
    for layer, names in found.values():
        recipe = layer.recipe
        if not layer.calibrated:
            problems[names[0]] = (f"recipe {recipe.name!r} quantizes the input with a "
                                  f"calibrated scale, and this layer has none: run "
                                  f"calibrate(model, batches) before convert")
            continue
        finalized_class = _FINALIZED_OF_QUANT[type(layer)]
        try:
            with torch.no_grad():
                new = finalized_class.from_float(layer, **recipe.finalized_kwargs,
                                                 **layer.calibration())
        except (TypeError, ValueError) as exc:
            problems[names[0]] = f"{type(exc).__name__}: {exc}"
            continue
        new.train(layer.training)
        new._quantized_recipe = recipe  # recorded by checkpoint.describe
        replacements.append((names, new))
        detail = f"-> {finalized_class.__name__} weight={recipe.weight!r} activation=" \
                 f"{recipe.activation!r}"
        report.converted.append(Entry(names[0], type(layer).__name__, detail))
    if problems:
        raise LayerError("convert", problems)
    _swap(model, replacements)
    return report

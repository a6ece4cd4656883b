"""Checkpoints of a quantized model at any stage: prepared, calibrated or finalized.

A checkpoint is the model's state dict plus a description of what ``prepare`` (and ``convert``)
did to it: per swapped layer its qualified name, its stage (``quantized`` or ``finalized``) and
its recipe as data, and the parents whose fused path was turned off. ``load`` takes the float
model freshly built from its definition, redoes those swaps (empty layers of the recorded
recipes and formats, no calibration, no packing) and loads the state dict strictly. So the
state dict stays the documented one of each layer (``modules.py``; the finalized layers' is the
packing contract, docs/checkpoint_format.md), and loading a finalized checkpoint needs neither
triton nor CUDA and calls no slot.

``save(model, path)`` / ``load(model, path)`` use safetensors (the metadata in its header, shared
tensors stored once). ``describe(model)`` and ``restore(model, description)`` are the two halves
for any other container (``torch.save({"state": model.state_dict(), "quantized":
describe(model)})``).
"""

from __future__ import annotations

import json
import os

from torch import nn

from libreyolo.nn.finalized import FinalizedConv2d, FinalizedLinear

from .modules import QuantConv2d, QuantLinear, _Quantized
from .prepare import DIRECT_WEIGHT_READERS, _locations, _swap
from .recipes import Recipe

FORMAT = "libreyolo.nn.quantized/1"
_METADATA_KEY = "libreyolo.nn.quantized"
_KINDS = {QuantLinear: ("linear", "quantized"), QuantConv2d: ("conv2d", "quantized"),
          FinalizedLinear: ("linear", "finalized"), FinalizedConv2d: ("conv2d", "finalized")}
_FLOAT = {"linear": nn.Linear, "conv2d": nn.Conv2d}


def _recipe_of_finalized(layer) -> dict:
    """A finalized layer keeps no recipe: the one its ``convert`` came from is recorded on it."""
    recipe = getattr(layer, "_quantized_recipe", None)
    if recipe is None:
        raise ValueError("a finalized layer that convert did not make has no recipe to record")
    return recipe.to_dict()


def describe(model: nn.Module) -> dict:
    """What ``restore`` needs to rebuild ``model``'s quantized structure on a float model."""
    layers = {}
    for module, names in _locations(model, tuple(_KINDS)).values():
        kind, stage = _KINDS[type(module)]
        recipe = module.recipe.to_dict() if isinstance(module, _Quantized) else \
            _recipe_of_finalized(module)
        layers[names[0]] = {"kind": kind, "stage": stage, "recipe": recipe}
    readers = tuple(DIRECT_WEIGHT_READERS)
    adjusted = [name for name, m in model.named_modules()
                if isinstance(m, readers) and getattr(m, "_quantized_fused_off", False)]
    return {"format": FORMAT, "layers": layers, "fused_attn_off": adjusted}


def restore(model: nn.Module, description: dict) -> nn.Module:
    """Redo, on the float ``model`` built from its definition, the swaps ``description`` (from
    ``describe``) records: empty quantized or finalized layers of the recorded recipes, ready for
    ``load_state_dict``. Atomic: a description that does not fit the model changes nothing."""
    given = description.get("format") if isinstance(description, dict) else None
    if given != FORMAT:
        raise ValueError(f"not a {FORMAT} description: format is {given!r}")
    found = {names[0]: (m, names) for m, names in _locations(model, (nn.Linear,
                                                                      nn.Conv2d)).values()}
    replacements, problems = [], {}
    for name, entry in description["layers"].items():
        module, names = found.get(name, (None, None))
        kind = _FLOAT.get(entry["kind"])
        if module is None or kind is None or type(module) is not kind:
            problems[name] = (f"the checkpoint has a {entry['kind']} here, the model "
                              f"{'nothing' if module is None else type(module).__name__}")
            continue
        recipe = Recipe.from_dict(entry["recipe"])
        if entry["stage"] == "quantized":
            new = (QuantLinear if kind is nn.Linear else QuantConv2d).from_float(module, recipe)
            new.qualified_name = name
        else:
            new = _empty_finalized(module, recipe)
        replacements.append((names, new))
    readers = []
    for name in description.get("fused_attn_off", []):
        try:
            readers.append(model.get_submodule(name))
        except AttributeError:
            problems[name] = "the checkpoint turned this module's fused path off: no such module"
    if problems:
        lines = "\n".join(f"  {n!r}: {reason}" for n, reason in problems.items())
        raise ValueError(f"the checkpoint does not fit this model; nothing was changed:\n{lines}")
    _swap(model, replacements)
    for parent in readers:
        parent.fused_attn = False
        parent._quantized_fused_off = True
    return model


def _empty_finalized(module: nn.Module, recipe: Recipe):
    kwargs = dict(recipe.finalized_kwargs, device=module.weight.device)
    if isinstance(module, nn.Linear):
        layer = FinalizedLinear(module.in_features, module.out_features, module.bias is not None,
                                **kwargs)
    else:
        layer = FinalizedConv2d(module.in_channels, module.out_channels, module.kernel_size,
                                module.stride, module.padding, module.dilation, module.groups,
                                module.bias is not None, **kwargs)
    layer._quantized_recipe = recipe
    return layer


def save(model: nn.Module, path: str | os.PathLike) -> None:
    """Write ``model`` (prepared, calibrated or finalized) as safetensors, with ``describe``'s
    description in the header."""
    from safetensors.torch import save_model

    metadata = {_METADATA_KEY: json.dumps(describe(model))}
    save_model(model, str(path), metadata=metadata)


def load(model: nn.Module, path: str | os.PathLike, *, device="cpu") -> nn.Module:
    """Load a checkpoint ``save`` wrote into ``model``, the float model freshly built from its
    definition: its layers are swapped as recorded, then the state dict is loaded strictly (the
    finalized layers check every dtype and shape). Returns ``model``."""
    from safetensors import safe_open
    from safetensors.torch import load_model

    with safe_open(str(path), framework="pt", device=str(device)) as f:
        header = (f.metadata() or {}).get(_METADATA_KEY)
    if header is None:
        raise ValueError(f"{os.fspath(path)!r} was not written by libreyolo.nn.quantized.save "
                         f"(no {_METADATA_KEY!r} in its metadata)")
    restore(model, json.loads(header))
    missing, unexpected = load_model(model, str(path), strict=True, device=str(device))
    return model

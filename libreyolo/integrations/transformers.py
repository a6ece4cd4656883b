"""Hugging Face ``transformers``' deformable-attention sites, routed to the slots and back.

The DETR lineage in transformers (5.17 to 5.25) calls one of three cores:

- the module ``MultiScaleDeformableAttention`` (RT-DETR, Deformable DETR, Grounding DINO, RF-DETR,
  LW-DETR and their relatives), whose forward takes ``(value, value_spatial_shapes,
  value_spatial_shapes_list, level_start_index, sampling_locations, attention_weights,
  im2col_step)``: routed to the ``ms_deform_attn`` slot;
- the function ``multi_scale_deformable_attention_v2``, with a point count per level and
  ``method="default"|"discrete"``: D-FINE and DEIMv2 keep it as the module attribute
  ``ms_deformable_attn_core``, RT-DETRv2 calls it by its module-level name. Routed to
  ``ms_deform_attn_ragged`` (``"default"`` is its ``"bilinear"``);
- the function ``multi_scale_deformable_attention`` (Mask2Former, OneFormer), the classic core
  called by its module-level name: routed to ``ms_deform_attn``.

Wiring changes the model's instances only, never a class or a module's globals, so a stock model
in the same process stays stock and :func:`unwire_deformable_attention` restores exactly what was
there. A wired site asks its slot; when no implementation takes the input, or a graph is being
exported, it runs transformers' own code, which is the portable path. A site whose signature is not
the one described here is left alone, and the report says why. transformers itself is never
imported: the wiring reads the model it is given.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from libreyolo.kernels.attention.ms_deform_attn import (
    maybe_ms_deform_attn,
    maybe_ms_deform_attn_ragged,
)

CLASSIC_SLOT, RAGGED_SLOT = "ms_deform_attn", "ms_deform_attn_ragged"
#: The class and function names of the cores, as transformers spells them.
CLASSIC_MODULE = "MultiScaleDeformableAttention"
RAGGED_CORE = "multi_scale_deformable_attention_v2"
CLASSIC_CORE = "multi_scale_deformable_attention"
RAGGED_ATTRIBUTE = "ms_deformable_attn_core"
#: The parameters each core is wired for: another signature is another contract.
CLASSIC_FORWARD_PARAMETERS = ("self", "value", "value_spatial_shapes", "value_spatial_shapes_list",
                              "level_start_index", "sampling_locations", "attention_weights",
                              "im2col_step")
RAGGED_PARAMETERS = ("value", "value_spatial_shapes", "sampling_locations", "attention_weights",
                     "num_points_list", "method")
CLASSIC_PARAMETERS = ("value", "value_spatial_shapes", "sampling_locations", "attention_weights")
#: transformers' sampling methods and the ragged slot's names for them.
METHODS = {"default": "bilinear", "discrete": "discrete"}
#: Where a wired module keeps what wiring replaced (an instance attribute, never a submodule).
_UNDO = "_libreyolo_wiring"


@dataclass(frozen=True)
class Site:
    """One wired call site: the module (its qualified name in the model), what was replaced
    there, and the slot it now asks."""

    module: str
    core: str
    slot: str


@dataclass(frozen=True)
class Wiring:
    """What :func:`wire_deformable_attention` did: the sites it wired and those it left, each
    left one with the reason."""

    wired: tuple[Site, ...] = ()
    left: tuple[tuple[str, str], ...] = ()

    @property
    def per_slot(self) -> dict[str, int]:
        """How many sites ask each slot."""
        counts: dict[str, int] = {}
        for site in self.wired:
            counts[site.slot] = counts.get(site.slot, 0) + 1
        return counts

    def __str__(self) -> str:
        slots = ", ".join(f"{slot}: {count}" for slot, count in sorted(self.per_slot.items()))
        lines = [f"wired {len(self.wired)} deformable-attention site(s)"
                 + (f" ({slots})" if slots else "") + f", left {len(self.left)}"]
        lines += [f"  left {module}: {reason}" for module, reason in self.left]
        return "\n".join(lines)


def _widest(*tensors: torch.Tensor) -> torch.dtype:
    """The slots take one dtype; under autocast the projections give bfloat16 or float16 while
    softmax and the reference points stay float32 (transformers' own grid_sample then runs in
    float32, autocast's rule for it), so the inputs meet in the widest."""
    dtype = tensors[0].dtype
    for tensor in tensors[1:]:
        dtype = torch.promote_types(dtype, tensor.dtype)
    return dtype


def _ask_classic(value, spatial_shapes, sampling_locations, attention_weights):
    dtype = _widest(value, sampling_locations, attention_weights)
    return maybe_ms_deform_attn(value.to(dtype), spatial_shapes, sampling_locations.to(dtype),
                                attention_weights.to(dtype))


def _ask_ragged(value, spatial_shapes, sampling_locations, attention_weights, points, method):
    ours = METHODS.get(method) if isinstance(method, str) else None
    if ours is None:  # a method we do not know: transformers' code decides what it means
        return None
    dtype = _widest(value, sampling_locations, attention_weights)
    return maybe_ms_deform_attn_ragged(value.to(dtype), spatial_shapes,
                                       sampling_locations.to(dtype), attention_weights.to(dtype),
                                       points, ours)


def _wired_module_forward(self, value, value_spatial_shapes, value_spatial_shapes_list,
                          level_start_index, sampling_locations, attention_weights, im2col_step):
    """``MultiScaleDeformableAttention.forward`` through the ``ms_deform_attn`` slot. The
    ``(H, W)`` pairs are preferred to the int64 tensor: known on the host, they need no read of
    device memory."""
    shapes = value_spatial_shapes if value_spatial_shapes_list is None \
        else value_spatial_shapes_list
    out = _ask_classic(value, shapes, sampling_locations, attention_weights)
    if out is not None:
        return out
    return getattr(self, _UNDO).stock(value, value_spatial_shapes, value_spatial_shapes_list,
                                      level_start_index, sampling_locations, attention_weights,
                                      im2col_step)


def _routed_ragged(stock: Callable) -> Callable:
    """``multi_scale_deformable_attention_v2`` through the ragged slot, ``stock`` otherwise."""
    def multi_scale_deformable_attention_v2(value, value_spatial_shapes, sampling_locations,
                                            attention_weights, num_points_list,
                                            method="default"):
        out = _ask_ragged(value, value_spatial_shapes, sampling_locations, attention_weights,
                          num_points_list, method)
        if out is not None:
            return out
        return stock(value, value_spatial_shapes, sampling_locations, attention_weights,
                     num_points_list, method)
    return multi_scale_deformable_attention_v2


def _routed_classic(stock: Callable) -> Callable:
    """``multi_scale_deformable_attention`` through the classic slot, ``stock`` otherwise."""
    def multi_scale_deformable_attention(value, value_spatial_shapes, sampling_locations,
                                         attention_weights):
        out = _ask_classic(value, value_spatial_shapes, sampling_locations, attention_weights)
        if out is not None:
            return out
        return stock(value, value_spatial_shapes, sampling_locations, attention_weights)
    return multi_scale_deformable_attention


#: The cores called by their module-level name: (name, its parameters, the slot, the router).
_GLOBAL_CORES = ((RAGGED_CORE, RAGGED_PARAMETERS, RAGGED_SLOT, _routed_ragged),
                 (CLASSIC_CORE, CLASSIC_PARAMETERS, CLASSIC_SLOT, _routed_classic))


@dataclass(frozen=True)
class _Undo:
    """What wiring replaced on one module: its instance ``forward`` (absent: ``None``) or the
    ``ms_deformable_attn_core`` attribute, and ``stock``, the callable the wired site falls back
    to."""

    attribute: str
    had_instance_value: bool
    previous: object
    stock: Callable


def _parameters(function) -> tuple[str, ...] | None:
    try:
        return tuple(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return None


def _from_transformers(obj) -> bool:
    return (getattr(obj, "__module__", None) or "").startswith("transformers.")


def _is_deformable_site_name(module: nn.Module) -> bool:
    """The attention wrappers of the lineage (``RTDetrMultiscaleDeformableAttention`` and kin):
    each must call a core this module wires, itself or through a child."""
    name = type(module).__name__.lower()
    return "multiscaledeformableattention" in name and _from_transformers(type(module))


def _wire_module_forward(module: nn.Module) -> str | None:
    """Replace a ``MultiScaleDeformableAttention``'s forward; the reason when it cannot be."""
    forward = type(module).forward
    if _parameters(forward) != CLASSIC_FORWARD_PARAMETERS:
        return (f"{CLASSIC_MODULE}.forward takes {_parameters(forward)}, the wiring is written for "
                f"{CLASSIC_FORWARD_PARAMETERS}")
    had = "forward" in module.__dict__
    stock = module.__dict__["forward"] if had else types.MethodType(forward, module)
    module.__dict__[_UNDO] = _Undo("forward", had, module.__dict__.get("forward"), stock)
    module.forward = types.MethodType(_wired_module_forward, module)
    return None


def _wire_attribute(module: nn.Module) -> str | None:
    """Replace D-FINE's and DEIMv2's ``ms_deformable_attn_core``; the reason when it cannot be."""
    core = getattr(module, RAGGED_ATTRIBUTE)
    if getattr(core, "__name__", None) != RAGGED_CORE or not _from_transformers(core):
        return (f"{RAGGED_ATTRIBUTE} is {getattr(core, '__qualname__', repr(core))}, not "
                f"transformers' {RAGGED_CORE}")
    if _parameters(core) != RAGGED_PARAMETERS:
        return f"{RAGGED_CORE} takes {_parameters(core)}, the wiring is written for " \
               f"{RAGGED_PARAMETERS}"
    module.__dict__[_UNDO] = _Undo(RAGGED_ATTRIBUTE, True, core, core)
    setattr(module, RAGGED_ATTRIBUTE, _routed_ragged(core))
    return None


def _global_core(module: nn.Module):
    """The module-level core its forward calls by name, as ``(name, parameters, slot, router,
    stock)``, or None."""
    forward = inspect.unwrap(type(module).forward)
    code = getattr(forward, "__code__", None)
    if code is None or not _from_transformers(forward):
        return None
    for name, parameters, slot, router in _GLOBAL_CORES:
        stock = forward.__globals__.get(name)
        if name in code.co_names and stock is not None:
            return name, parameters, slot, router, stock
    return None


#: (forward, core name) -> the forward rebound: one per class and core, shared by every wired
#: instance. torch.compile keeps what it compiled per code object and installs its compiled
#: functions in the frame's globals; instances each with their own copy of the globals met a
#: cache entry made for another copy (NameError on ``__compiled_fn_...``).
_REBOUND: dict[tuple[Callable, str], Callable] = {}


def _rebound(forward: Callable, name: str, router: Callable, stock: Callable) -> Callable:
    """``forward``'s code run with ``name`` bound to ``router(stock)``, in a copy of its
    module's globals made once (the module itself is untouched)."""
    rebound = _REBOUND.get((forward, name))
    if rebound is None:
        namespace = dict(forward.__globals__)
        namespace[name] = router(stock)
        rebound = types.FunctionType(forward.__code__, namespace, forward.__name__,
                                     forward.__defaults__, forward.__closure__)
        rebound.__kwdefaults__ = forward.__kwdefaults__
        rebound.__qualname__, rebound.__doc__ = forward.__qualname__, forward.__doc__
        _REBOUND[(forward, name)] = rebound
    return rebound


def _wire_global(module: nn.Module, found) -> str | None:
    """Give the module a forward that runs the class's code with the core's name bound to its
    router, in a copy of the defining module's globals (the module itself is untouched)."""
    name, parameters, _, router, stock = found
    forward = type(module).forward
    if inspect.unwrap(forward) is not forward:
        return f"its forward is wrapped ({forward.__qualname__}); the call to {name} is inside"
    if _parameters(stock) != parameters:
        return f"{name} takes {_parameters(stock)}, the wiring is written for {parameters}"
    rebound = _rebound(forward, name, router, stock)
    had = "forward" in module.__dict__
    module.__dict__[_UNDO] = _Undo("forward", had, module.__dict__.get("forward"),
                                   types.MethodType(forward, module))
    module.forward = types.MethodType(rebound, module)
    return None


def wire_deformable_attention(model: nn.Module) -> Wiring:
    """Route every deformable-attention site of a transformers model to the slots.

    Returns the :class:`Wiring`: the sites wired (module name, core, slot) and those left with the
    reason. Calling it again on a wired model wires nothing new and reports the wired sites again.
    Forward and backward go through the slots; exports keep transformers' code. Undo with
    :func:`unwire_deformable_attention`. Save a wired model's weights (``state_dict``,
    ``save_pretrained``), not the module object: the wiring is runtime state.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module (a transformers model), got "
                        f"{type(model).__name__}")
    wired: list[Site] = []
    left: list[tuple[str, str]] = []
    covered: set[str] = set()
    for name, module in model.named_modules():
        site = _wire_one(module)
        if isinstance(site, Site):
            wired.append(Site(name, site.core, site.slot))
            covered.add(name)
        elif isinstance(site, str):
            left.append((name, site))
            covered.add(name)
    for name, module in model.named_modules():
        if _is_deformable_site_name(module) and not any(
                other == name or other.startswith(name + ".") for other in covered):
            left.append((name, f"{type(module).__name__} calls no deformable-attention core "
                               "this wiring knows"))
    return Wiring(tuple(wired), tuple(left))


def _wire_one(module: nn.Module) -> Site | str | None:
    """Wire one module if it is a site: its :class:`Site` (module name filled in by the caller),
    the reason it was left, or None when it is no site."""
    undo = module.__dict__.get(_UNDO)
    if undo is not None:  # wired before: report it again
        return _site_of(module, undo)
    if type(module).__name__ == CLASSIC_MODULE and _from_transformers(type(module)):
        return _wire_module_forward(module) or Site("", f"{CLASSIC_MODULE}.forward", CLASSIC_SLOT)
    if callable(module.__dict__.get(RAGGED_ATTRIBUTE)):
        return _wire_attribute(module) or Site("", RAGGED_ATTRIBUTE, RAGGED_SLOT)
    found = _global_core(module)
    if found is not None:
        return _wire_global(module, found) or Site("", f"{found[0]} (called by name)", found[2])
    return None


def _site_of(module: nn.Module, undo: _Undo) -> Site:
    if undo.attribute == RAGGED_ATTRIBUTE:
        return Site("", RAGGED_ATTRIBUTE, RAGGED_SLOT)
    if type(module).__name__ == CLASSIC_MODULE:
        return Site("", f"{CLASSIC_MODULE}.forward", CLASSIC_SLOT)
    name, _, slot, _, _ = _global_core(module)
    return Site("", f"{name} (called by name)", slot)


def unwire_deformable_attention(model: nn.Module) -> int:
    """Undo :func:`wire_deformable_attention` on ``model``: every wired site gets back what it
    had (an instance ``forward`` set by someone else before the wiring included). Returns how
    many sites were restored."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model: expected a torch.nn.Module (a transformers model), got "
                        f"{type(model).__name__}")
    restored = 0
    for module in model.modules():
        undo = module.__dict__.pop(_UNDO, None)
        if undo is None:
            continue
        if undo.had_instance_value:
            module.__dict__[undo.attribute] = undo.previous
        else:
            module.__dict__.pop(undo.attribute, None)
        restored += 1
    return restored

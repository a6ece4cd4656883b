"""A slot bound by its call site: the selection runs once per description, not once per call.

A layer calls its slot with the same description every step (a decoder's deformable attention,
a QAT layer's fake-quant), and ``dispatch`` works the whole selection out on every call: the
eligible implementations, the signature check, each one's declared capabilities and
``accepts``, the judge of the output. A :class:`BoundSlot` goes through ``dispatch`` once per
description and keeps the implementation ``registry.choose`` names for it, under a guard on
everything the selection read:

* the registry generation, which every registration, unregistration and disabled
  implementation bumps;
* the raw value of every setting (``settings.raw_values`` and ``plan_raw_values``: an
  ``accepts`` may read one, as the Hub's reads ``LIBREYOLO_HUB_KERNELS``) and grad mode;
* each tensor's dtype, shape, strides and device (as ``plan_cache.describe`` has them) and
  whether it requires grad (an implementation without a backward declines such inputs); each
  list or tuple by its ``repr`` (exact types, at a third of ``describe``'s time for the
  ``(H, W)`` pairs); any other argument with its exact type.

The plan is kept too where it cannot depend on the call's own tensors: every tensor argument is
one of the slot's differentiable inputs (the data, whose values no check reads; a scale, a zero
point or a ``spatial_shapes`` tensor may be read), and ``accepts``, asked once more with new
views of the call's tensors, gives the very same plan (so the plan holds none of them: the
deformable-attention plans, kept by description). Elsewhere the bound implementation's
``accepts`` is asked on every call (the fake-quant plans hold the call's tensors), a lookup in
the implementation's own plan cache. The capabilities are asked again only where the guard
cannot tell their answer: a declaration that tells eager CUDA from a CUDA graph capture apart
(while it declines, the call goes through ``dispatch`` and the binding stays for eager calls).

What ``dispatch`` guarantees holds on this path too. While a graph is captured every call goes
through ``dispatch``. When the bound implementation declines, raises (running out of memory
propagates, as there) or returns something other than what ``dispatch`` judged for the
description (shape, dtype, device), the binding is dropped and the call goes through
``dispatch``, which raises the slot's error for a bad input or disables the implementation with
one ``KernelDisabledWarning``. An implementation that may write its inputs is never bound: its
failure must propagate, and no second implementation may run its inputs.
"""

from __future__ import annotations

import torch

from libreyolo.capture import graph_capture

from . import registry, settings
from .prepared import Prepared
from .slots import get_slot

#: Descriptions a bound slot keeps (a helper shared by every layer of a model sees a few: each
#: layer kind, in training and evaluation); past it, it starts over.
MAX_BINDINGS = 64

_SEQUENCES = (list, tuple)
_STRIDED = torch.strided


def _output_description(result: object) -> object:
    """What ``dispatch`` judged of a result: each tensor's shape, dtype and device."""
    if isinstance(result, torch.Tensor):
        return (result.shape, result.dtype, result.device)
    if type(result) is tuple:
        return tuple(map(_output_description, result))
    return type(result)


def _capture_sensitive(impl: registry.Implementation, args: tuple, kwargs: dict):
    """The capabilities when whether they take this call may change with a CUDA graph capture
    in progress, which the guard does not read; else None (asked once, when binding)."""
    capabilities = impl.capabilities
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if capabilities is None or not tensors or not tensors[0].is_cuda:
        return None
    eager = capabilities.decline(impl.op, args, kwargs, mode="cuda")
    captured = capabilities.decline(impl.op, args, kwargs, mode="cuda-graph")
    return capabilities if (eager is None) != (captured is None) else None


def _only_data(op: str, args: tuple, kwargs: dict) -> bool:
    """Every tensor argument is one of the slot's differentiable inputs."""
    slot = get_slot(op)
    return all(name in slot.differentiable for name, value in slot.bind(args, kwargs).items()
               if isinstance(value, torch.Tensor))


def _other_tensors(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call with each tensor replaced by a new view of it: other tensor objects of the same
    description (no allocation, no copy)."""
    def other(a):
        return a.as_strided(a.shape, a.stride(), a.storage_offset()) \
            if isinstance(a, torch.Tensor) and a.layout is _STRIDED else a
    return tuple(map(other, args)), {name: other(a) for name, a in kwargs.items()}


def _keeps_plan(choice: registry.Choice, args: tuple, kwargs: dict) -> bool:
    """Whether the plan serves every call of this description (see the module docstring)."""
    impl = choice.impl
    if impl.accepts is None:
        return True
    if not isinstance(choice.plan, Prepared) or not _only_data(impl.op, args, kwargs):
        return False
    try:
        args, kwargs = _other_tensors(args, kwargs)
        return impl.accepts(*args, **kwargs) is choice.plan
    except Exception:  # noqa: BLE001 - no answer for other tensors: asked on every call instead
        return False


class _Binding:
    """The implementation chosen for one description, what it returned for it, and its plan
    when it is kept (``kept``; else ``accepts`` is asked on every call)."""

    __slots__ = ("impl", "output", "capabilities", "plan", "kept")

    def __init__(self, choice: registry.Choice, result: object, args: tuple,
                 kwargs: dict) -> None:
        impl = choice.impl
        self.impl, self.output = impl, _output_description(result)
        self.capabilities = _capture_sensitive(impl, args, kwargs)
        self.kept = _keeps_plan(choice, args, kwargs)
        # an unkept plan may hold the call's tensors (and their autograd graph): not kept alive
        self.plan = choice.plan if self.kept else None


#: Where ``dispatch`` has nothing to bind for a description (no implementation takes it, or the
#: one that does may write its inputs): the call goes straight to ``dispatch``.
_UNBOUND = object()


class BoundSlot:
    """Slot ``op`` for one call site, callable with the slot's arguments as ``ops.<op>`` is,
    with the same results, errors and warnings; see the module docstring."""

    __slots__ = ("op", "_bindings")

    def __init__(self, op: str) -> None:
        get_slot(op)  # an unknown slot: ValueError naming it
        self.op = op
        self._bindings: dict[tuple, _Binding | object] = {}

    def __repr__(self) -> str:
        return f"BoundSlot({self.op!r}, {len(self._bindings)} description(s) bound)"

    def _guard(self, args: tuple, kwargs: dict) -> tuple:
        """What the selection read for this call (see the module docstring), flat: each tensor
        gives five items, starting with its dtype, any other argument two, starting with its
        type, and keyword names come before their values, so no two calls read alike (built in
        one loop, without a tuple or a call per argument: a decoder asks this every call)."""
        key = [registry._generation, settings.raw_values(), settings.plan_raw_values(),
               torch.is_grad_enabled()]
        if kwargs:
            key += kwargs
            args = (*args, *kwargs.values())
        for arg in args:
            if isinstance(arg, torch.Tensor):
                key += (arg.dtype, arg.shape,
                        arg.stride() if arg.layout is _STRIDED else arg.layout, arg.device,
                        arg.requires_grad)
            elif type(arg) in _SEQUENCES:
                key += (type(arg), repr(arg))
            else:
                key += (type(arg), arg)
        return tuple(key)

    def __call__(self, *args, **kwargs):
        op = self.op
        if graph_capture() is not None:
            return registry.dispatch(op, *args, **kwargs)
        guard = self._guard(args, kwargs)
        try:
            binding = self._bindings.get(guard)
        except TypeError:  # an argument that cannot be hashed: selected on every call
            return registry.dispatch(op, *args, **kwargs)
        if binding is None:
            return self._bind(args, kwargs)
        if binding is _UNBOUND:
            return registry.dispatch(op, *args, **kwargs)
        impl = binding.impl
        if binding.capabilities is not None and \
                binding.capabilities.decline(op, args, kwargs) is not None:
            # a CUDA graph capture it does not run under: the binding stays for eager calls
            return registry.dispatch(op, *args, **kwargs)
        try:
            plan = binding.plan if binding.kept else impl.accepts(*args, **kwargs)
            if plan is None:
                result = impl.fn(*args, **kwargs)
            elif isinstance(plan, Prepared):
                result = impl.fn(*args, prepared=plan, **kwargs)
            else:  # declined now, or a wrong answer: dispatch decides
                return self._rebind(guard, args, kwargs)
        except torch.OutOfMemoryError:
            raise
        except Exception:  # noqa: BLE001 - dispatch judges it: bad input, or its own failure
            return self._rebind(guard, args, kwargs)
        if not impl.is_reference and _output_description(result) != binding.output:
            return self._rebind(guard, args, kwargs)
        return result

    def _rebind(self, guard: tuple, args: tuple, kwargs: dict):
        """Drop the binding of ``guard`` and select this call again."""
        self._bindings.pop(guard, None)
        return self._bind(args, kwargs)

    def _bind(self, args: tuple, kwargs: dict):
        """The call through ``dispatch``, then its choice kept under the guard as read after
        it (a failing implementation it disabled bumped the generation)."""
        result = registry.dispatch(self.op, *args, **kwargs)
        choice = registry.choose(self.op, args, kwargs)
        binding = _UNBOUND if choice is None or choice.impl.writes_inputs else \
            _Binding(choice, result, args, kwargs)
        bindings = self._bindings
        if len(bindings) >= MAX_BINDINGS:
            bindings.clear()
        bindings[self._guard(args, kwargs)] = binding
        return result

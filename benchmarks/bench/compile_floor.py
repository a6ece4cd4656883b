"""The floor of a compiled slot call: the slot's in-tree kernels in a bare ``triton_op``.

A compiled slot call goes through the registry once, when its graph is traced
(``libreyolo.kernels.traced``): the implementation it chose is traced in the operator's place and
inductor launches its Triton kernels itself. What the registry may still cost per call (Dynamo's
guards on the settings, the ``ops`` entry it traces through) is measured against this floor: the
same implementation's function, with the same plan, in a ``torch.library.triton_op`` of its own
(``libreyolo_floor::<slot>__<implementation>``) that no registry selection reaches. Its body runs
inside ``libreyolo.capture.tracing_kernels()``, so the kernels' launches become ``wrap_triton``
nodes, the very launches a traced slot call makes.

The implementation is picked once, by the caller (``registry.choose`` on the real inputs in
``bench_compile.py``), outside the op. The plan is made by the implementation's own ``accepts``
inside the body, on the traced tensors: a plan holds the tensors it was made on (a fake-quant plan
launches on its own ``x``), so a plan of the real inputs traced into a graph would launch on them,
not on the graph's inputs. Under ``torch.compile`` the body runs when the graph is traced, never
per call, as the traced slot's planning does.
"""

from __future__ import annotations

import functools
import inspect
import re
from typing import Optional

import torch

from libreyolo.capture import tracing_kernels
from libreyolo.kernels.operators import autograd_formula
from libreyolo.kernels.prepared import Prepared
from libreyolo.kernels.slots import get_slot

NAMESPACE = "libreyolo_floor"
#: A schema type of the slots (``Slot.argument_types``) as the annotation ``infer_schema`` reads.
ANNOTATIONS = {"Tensor": torch.Tensor, "Tensor?": Optional[torch.Tensor],  # noqa: UP045
               "int": int, "int?": Optional[int], "int[]": list[int], "str": str}  # noqa: UP045


@functools.cache
def floor_op(slot_name: str, impl):
    """``torch.ops.libreyolo_floor.<slot>__<implementation>``: ``impl`` (an in-tree traceable
    implementation of ``slot_name``, as ``registry.choose`` returns it) as a bare ``triton_op``,
    with its backward as a second one where ``impl`` declares one and the slot is differentiable
    (under the slot operator's own gradient formula, ``operators.autograd_formula``).
    Made once per (slot, implementation): an op name is defined once per process."""
    slot = get_slot(slot_name)
    if impl.op != slot_name:
        raise ValueError(f"floor_op: impl must implement {slot_name!r}, got one of {impl.op!r}")
    if not impl.traceable:
        raise ValueError(f"floor_op: impl {impl.name!r} of {slot_name} is not traceable: its "
                         "launches would not become the graph's own")
    name = f"{slot_name}__{re.sub(r'[^0-9A-Za-z_]', '_', impl.name)}"

    def forward(*args, **kwargs):
        with torch.no_grad(), tracing_kernels():
            return _unaliased(impl.fn(*args, **_plan(impl, args, kwargs), **kwargs), args)

    op = _triton_op(f"{NAMESPACE}::{name}", forward, slot, torch.Tensor)
    if slot.differentiable and impl.backward is not None:
        backward, setup_context = autograd_formula(slot, _backward_op(name, impl, slot))
        op.register_autograd(backward, setup_context=setup_context)
    return op


def _plan(impl, args: tuple, kwargs: dict) -> dict:
    """The ``prepared=`` keyword of ``impl`` for these (traced) arguments, from its own
    ``accepts``; an input it declines raises, naming the implementation and its reason."""
    if impl.accepts is None:
        return {}
    plan = impl.accepts(*args, **kwargs)
    if isinstance(plan, Prepared):
        return {"prepared": plan}
    if plan is None:
        return {}
    raise ValueError(f"{impl.op} floor: {impl.name} declines this input: {plan}")


def _backward_op(name: str, impl, slot):
    def backward(grad, *args, **kwargs):
        with torch.no_grad(), tracing_kernels():
            grads = tuple(impl.backward(grad, *args, **_plan(impl, args, kwargs), **kwargs))
        grads = tuple(_unaliased(g, (grad, *args)) for g in grads)
        return grads[0] if len(grads) == 1 else grads

    count = len(slot.differentiable)
    returns = torch.Tensor if count == 1 else tuple[(torch.Tensor,) * count]
    return _triton_op(f"{NAMESPACE}::{name}_backward", backward, slot, returns, grad=True)


def _triton_op(qualified: str, body, slot, returns, *, grad: bool = False):
    """``triton_op`` of ``body`` under the slot's signature (``triton_op`` infers its schema
    from the function's signature, so ``body`` takes the slot's own, annotated)."""
    parameters = [p.replace(annotation=ANNOTATIONS[slot.argument_types[p.name]])
                  for p in slot.signature.parameters.values()]
    if grad:
        parameters.insert(0, inspect.Parameter("grad", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                               annotation=torch.Tensor))
    body.__signature__ = inspect.Signature(parameters, return_annotation=returns)
    body.__name__ = body.__qualname__ = qualified.split("::")[1]
    return torch.library.triton_op(qualified, body, mutates_args=())


def _unaliased(out: torch.Tensor, inputs: tuple) -> torch.Tensor:
    """An op's output may not be one of its inputs: a copy where the implementation handed one
    back."""
    return out.clone() if any(out is t for t in inputs) else out

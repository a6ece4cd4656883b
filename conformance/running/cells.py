"""Run one matrix cell: build the seeded inputs, ask the implementation, apply the contract."""

from __future__ import annotations

import re
import time
import traceback
import zlib
from collections import OrderedDict
from dataclasses import dataclass

import torch

from conformance.inputs.layouts import storage_snapshot
from conformance.running import contracts, disabled
from conformance.running.matrix import Cell
from conformance.schema import declarations
from conformance.schema.spec import Case, ErrorInput, Inputs, SlotSpec
from libreyolo.kernels.capabilities import GPU_MODES


@dataclass(frozen=True)
class CellPlan:
    """Everything that identifies a cell; `seed` makes its inputs reproducible anywhere."""

    slot: str
    impl: str
    mode: str
    dtype: torch.dtype
    case: Case
    layout: str
    seed: int

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    @property
    def id(self) -> str:
        case = f"{self.case.name}@{self.layout}"
        return f"{self.slot}:{self.impl}:{self.mode}:{self.dtype_name}:{case}"


def input_seed(base_seed: int, slot: str, case: str, dtype: torch.dtype, layout: str) -> int:
    """Same inputs for every implementation and mode of a (slot, case, dtype, layout)."""
    return zlib.crc32(f"{base_seed}|{slot}|{case}|{dtype}|{layout}".encode())


def make_inputs(spec: SlotSpec, plan: CellPlan) -> Inputs:
    gen = torch.Generator().manual_seed(plan.seed)
    return spec.make_inputs(plan.case, plan.dtype, plan.layout, gen)


def decline_reason(op: str, name: str, inputs: Inputs) -> tuple[str | None, bool]:
    """Why the registry says `name`, asked for by name, would not run these inputs, and whether
    the environment (not the input) is the reason: an environment decline is never a failure
    (an implementation cannot take cells its machine cannot run), an input decline in a case the
    catalogue holds the implementation to is."""
    from libreyolo.kernels import decline_reason as registry_decline_reason

    environment = registry_decline_reason(op, name)
    if environment is not None:
        return environment, True
    return registry_decline_reason(op, name, *inputs.args, **inputs.kwargs), False


def _call(fn, inputs: Inputs, mode: str):
    if mode != "cuda-graph":
        return fn(*inputs.args, **inputs.kwargs)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up outside capture (compile, autotune, allocate)
        fn(*inputs.args, **inputs.kwargs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*inputs.args, **inputs.kwargs)
    graph.replay()
    torch.cuda.synchronize()
    return out


def run_cell(spec: SlotSpec, plan: CellPlan, *, inputs: Inputs | None = None) -> Cell:
    """The cell's verdict; `inputs` (CPU) overrides the seeded ones, for replays."""
    cell = Cell(plan.slot, plan.impl, plan.mode, plan.dtype_name,
                f"{plan.case.name}@{plan.layout}", plan.case.size, "pass")
    if (failed := disabled.reason(spec.name, plan.impl)) is not None:
        return _disabled(cell, failed)
    impl = declarations.implementation(spec.name, plan.impl)
    declared = impl.capabilities if impl is not None else None
    if declared is not None and (outside := declared.mode_decline(plan.mode)):
        return _declared_outside(cell, spec, plan, impl, outside)
    device = "cuda" if plan.mode in GPU_MODES else "cpu"
    impl_inputs = (inputs if inputs is not None else make_inputs(spec, plan)).to(device)
    if declared is not None and (outside := declared.decline(
            spec.name, impl_inputs.args, impl_inputs.kwargs, mode=plan.mode)):
        return _declared_outside(cell, spec, plan, impl, outside)
    held = declarations.held_to(spec, plan.impl)
    try:
        reason, environment = decline_reason(spec.name, plan.impl, impl_inputs)
    except Exception as exc:  # noqa: BLE001 - a crashing accepts() is the implementation's bug
        return _crashed(cell, exc)
    if reason is not None:
        covered = not environment and held.covers(plan.mode, plan.dtype, plan.layout)
        cell.state, cell.reason = ("fail" if covered else "not-applicable"), reason
        cell.failed_checks = ["accepts"] if covered else []
        cell.declined_by = None if covered else "environment" if environment else "input"
        return cell
    if plan.mode not in held.modes:
        cell.state, cell.declined_by = "not-applicable", "catalogue"
        cell.reason = f"the catalogue does not hold {plan.impl} to mode {plan.mode}"
        return cell
    verdict = contracts.Verdict()
    before = [storage_snapshot(t) for t in impl_inputs.tensors()]
    differentiable = _wants_gradients(spec, plan, impl_inputs)
    leaves = [impl_inputs.args[i].requires_grad_(True) for i in impl_inputs.grad_args
              ] if differentiable else []
    start = time.perf_counter()
    healthy = disabled.snapshot()
    try:
        out = _call(impl.fn, impl_inputs, plan.mode)
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - any exception on a valid input is a crash
        return _crashed(cell, exc)
    finally:
        disabled.note(healthy, f"cell {plan.id}")
    cell.seconds = time.perf_counter() - start
    if (failed := disabled.reason(spec.name, plan.impl)) is not None:
        return _disabled(cell, failed)  # its call failed inside and another answered for it
    want = expected(spec, plan, inputs)
    try:
        _judge(verdict, spec, plan, out, leaves, want, device)
    except Exception as exc:  # noqa: BLE001 - a crashing backward is a crash
        return _crashed(cell, exc)
    for check, key in (("exact", "first_mismatch"), ("ste", "grad_first_mismatch")):
        first = verdict.measurements.get(key)  # absent where the check failed before comparing
        if check in verdict.failed and first is not None:
            verdict.explain(check, mismatch_context(spec, impl_inputs, first["index"]))
    contracts.check_inputs_unmodified(verdict, impl_inputs, before)
    cell.failed_checks, cell.measurements = verdict.failed, verdict.measurements
    if verdict.failed:
        cell.state, cell.reason = "fail", "; ".join(verdict.messages)
    return cell


def _disabled(cell: Cell, reason: str) -> Cell:
    cell.state, cell.failed_checks, cell.reason = "fail", [disabled.CHECK], reason
    return cell


def _declared_outside(cell: Cell, spec: SlotSpec, plan: CellPlan, impl, outside: str) -> Cell:
    """A cell outside the implementation's declaration: not applicable, unless the catalogue
    holds an in-tree implementation to it (its declaration cannot take a case away)."""
    if not declarations.binds(impl) and spec.expectation(plan.impl).covers(
            plan.mode, plan.dtype, plan.layout):
        cell.state, cell.failed_checks = "fail", ["declared"]
        cell.reason = (f"declared: the catalogue holds in-tree {plan.impl} to this case, which "
                       f"its declaration leaves out: {outside}")
    else:
        cell.state, cell.declined_by, cell.reason = "not-applicable", "declaration", outside
    return cell


def mismatch_context(spec: SlotSpec, inputs: Inputs, index) -> str:
    """What a backend author needs to find the bug at output `index`: the input element there
    (with its storage offset when the input is a view), and the parameters that applied."""
    index = tuple(index)
    parts = []
    x = inputs.args[0] if inputs.args else None
    if isinstance(x, torch.Tensor) and x.dim() == len(index) and \
            all(i < n for i, n in zip(index, x.shape, strict=True)):
        parts.append(f"input[{', '.join(map(str, index))}] = {contracts.element(x, index)}")
        if not x.is_contiguous():
            offset = x.storage_offset() + sum(i * s for i, s in zip(index, x.stride(), strict=True))
            parts.append(f"at storage offset {offset} (strides {x.stride()}, offset "
                         f"{x.storage_offset()})")
    if spec.applied is not None:
        try:
            parts += [f"{name} " + (contracts.element(value, ()) if isinstance(value, torch.Tensor)
                                    else repr(value))
                      for name, value in spec.applied(inputs, index).items()]
        except Exception as exc:  # noqa: BLE001 - a message must not turn a fail into a crash
            parts.append(f"(the applied parameters are unknown: {type(exc).__name__}: {exc})")
    return ", ".join(parts)


def _wants_gradients(spec: SlotSpec, plan: CellPlan, inputs: Inputs) -> bool:
    needs = spec.contract.ste or spec.contract.kind == "bounded"
    return needs and plan.mode != "cuda-graph" and bool(inputs.grad_args)


def _judge(verdict, spec: SlotSpec, plan: CellPlan, out, leaves: list, want: Expected, device):
    if not contracts.check_common(verdict, out, want.out[0], device):
        return
    if spec.contract.kind == "exact":
        contracts.check_exact(verdict, out, want.out[0])
        if leaves and not verdict.failed:
            contracts.check_ste(verdict, leaves[0], out, want.mask, _grad_generator(plan))
        return
    candidate = [out]
    if leaves and not out.requires_grad:
        verdict.fail("bounded", "gradients: the output is not connected to the inputs in "
                                f"autograd ({contracts.UNCONNECTED})")
    elif leaves:
        candidate += _gradients(out, leaves, _grad_generator(plan))
    judged = len(candidate)  # cuda-graph cells judge the forward only
    contracts.check_bounded(verdict, spec.contract, want.names[:judged], candidate,
                            want.out[:judged], want.oracle[:judged])


def _grad_generator(plan: CellPlan) -> torch.Generator:
    return torch.Generator().manual_seed(plan.seed + 1)


def _gradients(out: torch.Tensor, leaves: list, gen: torch.Generator) -> list[torch.Tensor]:
    """Gradients of `leaves` for a seeded random upstream gradient (zeros where unused)."""
    if not leaves:  # a forward-only slot (no differentiable inputs)
        return []
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(out.dtype).to(out.device)
    grads = torch.autograd.grad(out, leaves, g, allow_unused=True) if out.numel() else \
        [None] * len(leaves)
    return [torch.zeros_like(leaf) if grad is None else grad.detach()
            for leaf, grad in zip(leaves, grads, strict=True)]


@dataclass(frozen=True)
class Expected:
    """What an implementation is judged against, computed on CPU. Exact: the reference's output
    and the STE mask. Bounded: the portable path's output and gradients in the case's dtype
    (`out`) and in float64 (`oracle`), named in `names`."""

    out: list
    mask: torch.Tensor | None = None
    oracle: list | None = None
    names: tuple = ("output",)


_EXPECTED: OrderedDict = OrderedDict()
_EXPECTED_KEEP = 4


def expected(spec: SlotSpec, plan: CellPlan, inputs: Inputs | None = None) -> Expected:
    """Cached per inputs: every implementation and mode of a cell sees the same seeded inputs
    (the plan orders implementations innermost so consecutive cells hit this cache)."""
    if inputs is not None:
        return _compute_expected(spec, plan, inputs)
    key = (plan.slot, plan.case.name, repr(sorted(plan.case.params.items())), plan.dtype,
           plan.layout, plan.seed)
    if key not in _EXPECTED:
        _EXPECTED[key] = _compute_expected(spec, plan, make_inputs(spec, plan))
        while len(_EXPECTED) > _EXPECTED_KEEP:
            _EXPECTED.popitem(last=False)
    return _EXPECTED[key]


def _compute_expected(spec: SlotSpec, plan: CellPlan, cpu: Inputs) -> Expected:
    if spec.contract.kind == "exact":
        with torch.no_grad():
            out = spec.reference_fn()(*cpu.args, **cpu.kwargs)
        mask = spec.ste_mask(*cpu.args, **cpu.kwargs) if spec.contract.ste else None
        return Expected([out], mask)
    names = ("output", *(f"grad_arg{i}" for i in cpu.grad_args))
    return Expected(_portable_run(spec, plan, cpu), None,
                    _portable_run(spec, plan, _as_float64(cpu)), names)


def _portable_run(spec: SlotSpec, plan: CellPlan, inputs: Inputs) -> list[torch.Tensor]:
    inputs = Inputs(tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a
                          for a in inputs.args), inputs.kwargs, inputs.grad_args)
    leaves = [inputs.args[i].requires_grad_(True) for i in inputs.grad_args]
    out = spec.portable(*inputs.args, **inputs.kwargs)
    return [out.detach(), *_gradients(out, leaves, _grad_generator(plan))]


def _as_float64(inputs: Inputs) -> Inputs:
    def widen(a):
        return a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a

    return Inputs(tuple(widen(a) for a in inputs.args),
                  {k: widen(v) for k, v in inputs.kwargs.items()}, inputs.grad_args)


@dataclass(frozen=True)
class ErrorPlan:
    """An error cell: one implementation, in one mode, given one of its slot's error inputs."""

    slot: str
    impl: str
    mode: str
    error: ErrorInput

    @property
    def id(self) -> str:
        return f"{self.slot}:{self.impl}:{self.mode}:error:{self.error.name}"


#: Error inputs are judged eagerly: a captured graph has no host to raise from.
ERROR_MODES = ("cpu", "interpreter", "cuda")


def refuses(error: ErrorInput, exc: BaseException) -> bool:
    """Whether `exc` is the error input's exception, its message naming the argument."""
    return isinstance(exc, error.error) and re.search(rf"\b{re.escape(error.match)}\b",
                                                      str(exc)) is not None


def run_error_cell(spec: SlotSpec, plan: ErrorPlan) -> Cell:
    """Pass when the implementation raises the error input's exception naming the argument, from
    its `accepts` or its call, or declines the input and the fallback raises it; anything else
    (numbers, another exception) fails the `error-input` check."""
    error = plan.error
    cell = Cell(plan.slot, plan.impl, plan.mode, "any", f"error:{error.name}", "small", "pass",
                origin="errors")
    if (failed := disabled.reason(spec.name, plan.impl)) is not None:
        return _disabled(cell, failed)
    device = "cuda" if plan.mode in GPU_MODES else "cpu"
    inputs = error.build(device, "cpu" if device == "cuda" else "meta")
    impl = declarations.implementation(spec.name, plan.impl)
    declared = impl.capabilities
    if declared is not None and (outside := declared.mode_decline(plan.mode)):
        cell.state, cell.declined_by, cell.reason = "not-applicable", "declaration", outside
        return cell
    environment = decline_reason(spec.name, plan.impl, Inputs(()))[0]
    if environment is not None or plan.mode not in declarations.held_to(spec, plan.impl).modes:
        cell.state = "not-applicable"
        cell.declined_by = "environment" if environment else "catalogue"
        cell.reason = environment or f"the catalogue does not hold {plan.impl} to mode {plan.mode}"
        return cell
    wanted = (f"expected {error.error.__name__} naming {error.match!r}, or a decline "
              f"({error.rule})")
    try:  # as the registry does: the declaration declines first, then accepts()
        declined = declared.decline(spec.name, inputs.args, inputs.kwargs, mode=plan.mode) \
            if declared is not None else None
        if declined is None and impl.accepts is not None:
            declined = impl.accepts(*inputs.args, **inputs.kwargs)
        if declined is None:
            out = impl.fn(*inputs.args, **inputs.kwargs)
            return _refusal_failed(cell, f"returned {_described(out)} for input "
                                         f"'{error.name}'; {wanted}")
    except Exception as exc:  # noqa: BLE001 - the exception is what this cell judges
        if refuses(error, exc):
            cell.reason = f"raised {type(exc).__name__}: {exc}"
            return cell
        return _refusal_failed(cell, f"raised {type(exc).__name__}: {exc} for input "
                                     f"'{error.name}'; {wanted}")
    try:
        spec.fallback()(*inputs.args, **inputs.kwargs)
    except Exception as exc:  # noqa: BLE001
        if refuses(error, exc):
            cell.reason = f"declined ({declined}); the fallback raised {type(exc).__name__}"
            return cell
    return _refusal_failed(cell, f"declined ({declined}), but the fallback does not raise "
                                 f"{error.error.__name__} naming {error.match!r} either: the "
                                 "catalogue's error input is wrong")


def _refusal_failed(cell: Cell, message: str) -> Cell:
    cell.state, cell.failed_checks, cell.reason = "fail", ["error-input"], f"error-input: {message}"
    return cell


def _described(out) -> str:
    if isinstance(out, torch.Tensor):
        return f"a {str(out.dtype).removeprefix('torch.')} tensor of shape {tuple(out.shape)}"
    return f"a {type(out).__name__}"


def _crashed(cell: Cell, exc: BaseException) -> Cell:
    cell.state = "crash"
    cell.reason = f"{type(exc).__name__}: {exc}"
    cell.measurements = {"traceback": traceback.format_exc(limit=-3)}
    return cell

"""The repeatability check: under ``torch.use_deterministic_algorithms(True)``, the same inputs
give the same output and gradients, bit for bit, run after run.

A cell (`origin` "determinism") runs one implementation's forward and backward ``RUNS`` times on
one seeded input of the catalogue and fails (check `repeatable`) when any output or gradient of
any run differs from the first run's bits (NaN payloads and signed zeros count). It means
something on a GPU only: CPU tensors and the Triton interpreter run every atomic add in one order,
so there a cell is not applicable. Which slots and cases: ``CASES``.
"""

from __future__ import annotations

import contextlib

import torch

from conformance.catalogue import CATALOGUE
from conformance.inputs import shapesets
from conformance.running.cells import CellPlan, decline_reason, input_seed, make_inputs
from conformance.running.matrix import Cell

RUNS = 10
#: Slots held to the check, and the catalogue cases each is checked on: one family decoder and
#: one awkward layout per slot (small enough for a quick GPU run, each with many samples per
#: value element, where an order-dependent sum shows).
CASES = {"ms_deform_attn": ("rt_detr_decoder", "dfine_n_decoder"),
         "ms_deform_attn_ragged": ("d_fine_decoder", "rt_detrv2_dsp_decoder")}
#: Small versions of those, where the CPU tests show the check's teeth on the portable path.
CPU_CASES = {"ms_deform_attn": ("rt_detr_pairs_mini",), "ms_deform_attn_ragged": ("d_fine_mini",)}
DTYPE = torch.float32
LAYOUT = "contiguous"
_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@contextlib.contextmanager
def deterministic_algorithms(enabled: bool = True):
    """``torch.use_deterministic_algorithms(enabled)`` inside the block (strict: a torch op
    without a deterministic implementation raises), the previous setting restored after it."""
    was, warn_only = (torch.are_deterministic_algorithms_enabled(),
                      torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(enabled)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn_only)


def same_bits(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """Equal bit patterns (on the tensors' device), or both None."""
    if a is None or b is None:
        return a is b
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point:
        width = _INT[a.element_size()]
        a, b = a.contiguous().view(width), b.contiguous().view(width)
    return torch.equal(a, b)


def run_once(fn, args: tuple, grad_args: tuple, grad: torch.Tensor | None) -> list:
    """[output, gradient of each ``grad_args`` input] of one forward and backward of ``fn`` on
    fresh leaves (a gradient the implementation does not give is None)."""
    args = list(args)
    leaves = []
    for i in grad_args:
        args[i] = args[i].detach().clone().requires_grad_(True)
        leaves.append(args[i])
    out = fn(*args)
    grads = torch.autograd.grad(out, leaves, grad, allow_unused=True) if leaves and out.numel() \
        else [None] * len(leaves)
    return [out.detach(), *(None if g is None else g.detach() for g in grads)]


def differing(fn, args: tuple, grad_args: tuple, *, runs: int = RUNS, seed: int = 0) -> dict:
    """For each quantity (``output``, ``grad_arg<i>``), how many of runs 2..``runs`` differ from
    the first, bit for bit: the check fails on any nonzero count. The upstream gradient is seeded
    random (drawn once)."""
    grad = _grad(fn, args, seed) if grad_args else None
    first = run_once(fn, args, grad_args, grad)
    names = ["output", *(f"grad_arg{i}" for i in grad_args)]
    counts = dict.fromkeys(names, 0)
    for _ in range(runs - 1):
        again = run_once(fn, args, grad_args, grad)
        for name, a, b in zip(names, first, again, strict=True):
            counts[name] += not same_bits(a, b)
    return counts


def _grad(fn, args, seed: int) -> torch.Tensor:
    """A seeded standard-normal upstream gradient shaped like ``fn``'s output (drawn on CPU, so
    every device sees the same numbers)."""
    with torch.no_grad():
        out = fn(*args)
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(out.shape, generator=generator, dtype=torch.float64).to(out.dtype).to(
        out.device)


def plans(slot: str, impl: str, mode: str, names: tuple[str, ...] | None = None
          ) -> list[CellPlan]:
    """The determinism cells of one implementation of ``slot`` in ``mode`` (on ``CASES``, or on
    the cases ``names``)."""
    spec = CATALOGUE[slot]
    cases = {c.name: c for c in shapesets.load(spec.shapes)}
    return [CellPlan(slot, impl, mode, DTYPE, cases[name], LAYOUT,
                     input_seed(0, slot, name, DTYPE, LAYOUT)) for name in names or CASES[slot]]


def run_cell(plan: CellPlan, fn=None, *, runs: int = RUNS) -> Cell:
    """One determinism cell: not applicable off the GPU, or when the registry says the
    implementation does not run here (its environment) or does not take this input; else pass
    or fail by :func:`differing` (``fn``: the implementation's function, default the registered
    one's)."""
    cell = Cell(plan.slot, plan.impl, plan.mode, plan.dtype_name,
                f"{plan.case.name}@{plan.layout}", plan.case.size, "pass", origin="determinism")
    if plan.mode != "cuda":
        cell.state, cell.declined_by = "not-applicable", "catalogue"
        cell.reason = (f"repeatability is checked on CUDA only: in mode {plan.mode} the atomic "
                       "adds run in one order, so every implementation repeats")
        return cell
    spec = CATALOGUE[plan.slot]
    inputs = make_inputs(spec, plan).to("cuda")
    if fn is None:
        reason, environment = decline_reason(plan.slot, plan.impl, inputs)
        if reason is not None:
            cell.state, cell.reason = "not-applicable", reason
            cell.declined_by = "environment" if environment else "input"
            return cell
        from conformance.schema import declarations

        fn = declarations.implementation(plan.slot, plan.impl).fn
    try:
        with deterministic_algorithms():
            counts = differing(lambda *a: fn(*a, **inputs.kwargs), inputs.args,
                               inputs.grad_args, runs=runs, seed=plan.seed + 1)
    except Exception as exc:  # noqa: BLE001 - an exception on a valid input is a crash
        cell.state, cell.reason = "crash", f"{type(exc).__name__}: {exc}"
        return cell
    cell.measurements = {"runs": runs, "runs_differing": counts}
    changed = {name: n for name, n in counts.items() if n}
    if changed:
        cell.state, cell.failed_checks = "fail", ["repeatable"]
        cell.reason = ("repeatable: under torch.use_deterministic_algorithms(True), "
                       + ", ".join(f"{name} differed from the first run's bits in {n} of "
                                   f"{runs - 1} runs" for name, n in changed.items()))
    return cell

"""Failing examples as files: the inputs and the plan, saved so one command replays them
(`pytest conformance/test_replay.py --replay FILE`) and one prints them
(`python -m conformance.running.replay FILE`)."""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
from pathlib import Path

import torch

from conformance.running.cells import CellPlan
from conformance.schema.spec import Case, Inputs


def failures_dir(config) -> Path:
    """Pytest's cache directory when there is one (it survives the run), else a temporary one."""
    cache = getattr(config, "cache", None)
    if cache is not None:
        return cache.mkdir("conformance-failures")
    return Path(tempfile.mkdtemp(prefix="conformance-failures-"))


def save(directory: Path, plan: CellPlan, inputs: Inputs) -> Path:
    """Write `plan` and its CPU inputs (views keep their storage, so gaps survive) to a file."""
    record = {
        "plan": {"slot": plan.slot, "impl": plan.impl, "mode": plan.mode,
                 "dtype": plan.dtype_name, "layout": plan.layout, "seed": plan.seed,
                 "case": {"name": plan.case.name, "source": plan.case.source,
                          "size": plan.case.size, "params": dict(plan.case.params)}},
        "args": list(inputs.args), "kwargs": inputs.kwargs, "grad_args": list(inputs.grad_args),
    }
    name = hashlib.sha256(repr(record["plan"]).encode()).hexdigest()[:12]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{plan.slot}-{plan.impl}-{name}.pt"
    torch.save(record, path)
    return path


class ReplayFileError(ValueError):
    """A file that is not a saved failing example: missing, empty, unreadable or of another
    layout. Its message is one line naming the file and what was expected."""


EXPECTED = ("a failing example saved by the conformance suite (torch.save of a dict with "
            "'plan', 'args', 'kwargs' and 'grad_args')")


def load(path: str | Path) -> tuple[CellPlan, Inputs]:
    path = Path(path)
    if not path.is_file():
        raise ReplayFileError(f"{path}: no such file; expected {EXPECTED}")
    if path.stat().st_size == 0:
        raise ReplayFileError(f"{path}: the file is empty; expected {EXPECTED}")
    try:
        record = torch.load(path, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unreadable file gets the same one line
        # the exception's own text is torch's advice about weights_only: not this file's problem
        raise ReplayFileError(f"{path}: not a file torch.load reads ({type(exc).__name__}); "
                              f"expected {EXPECTED}") from None
    try:
        p = record["plan"]
        plan = CellPlan(p["slot"], p["impl"], p["mode"], getattr(torch, p["dtype"]),
                        Case(**p["case"]), p["layout"], p["seed"])
        return plan, Inputs(tuple(record["args"]), record["kwargs"], tuple(record["grad_args"]))
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ReplayFileError(f"{path}: not a saved example ({type(exc).__name__}: {exc}); "
                              f"expected {EXPECTED}") from None


def describe(plan: CellPlan, inputs: Inputs) -> str:
    """The plan and every argument: tensors with dtype, shape, strides, storage offset and
    values (torch's summarized print), everything else as it is."""
    lines = [f"slot {plan.slot}, implementation {plan.impl}, mode {plan.mode}, dtype "
             f"{plan.dtype_name}, layout {plan.layout}, seed {plan.seed}",
             f"case {plan.case.name} ({plan.case.source}): {dict(plan.case.params)}"]
    named = [*(f"args[{i}]" for i in range(len(inputs.args))), *inputs.kwargs]
    for name, value in zip(named, (*inputs.args, *inputs.kwargs.values()), strict=True):
        if isinstance(value, torch.Tensor):
            lines.append(f"{name}: {str(value.dtype).removeprefix('torch.')} "
                         f"{tuple(value.shape)}, strides {value.stride()}, storage offset "
                         f"{value.storage_offset()}\n{value}")
        else:
            lines.append(f"{name}: {value!r}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.running.replay",
                                     description="Print a saved failing example's plan and "
                                                 "inputs.")
    parser.add_argument("file", help="a file written by a failing hypothesis example")
    args = parser.parse_args(argv)
    torch.set_printoptions(precision=8, threshold=200, edgeitems=4)
    try:
        loaded = load(args.file)
    except ReplayFileError as exc:
        sys.stderr.write(f"{parser.prog}: error: {exc}\n")
        return 2
    sys.stdout.write(describe(*loaded) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

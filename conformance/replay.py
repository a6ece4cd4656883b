"""Failing examples as files: the inputs and the plan, saved so one command replays them."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import torch

from conformance.catalogue.spec import Case, Inputs
from conformance.cells import CellPlan


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


def load(path: str | Path) -> tuple[CellPlan, Inputs]:
    record = torch.load(path, weights_only=True)
    p = record["plan"]
    plan = CellPlan(p["slot"], p["impl"], p["mode"], getattr(torch, p["dtype"]),
                    Case(**p["case"]), p["layout"], p["seed"])
    return plan, Inputs(tuple(record["args"]), record["kwargs"], tuple(record["grad_args"]))

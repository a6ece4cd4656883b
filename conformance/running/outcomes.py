"""Turn a cell's state into the pytest outcome, with the one command that reproduces it."""

from __future__ import annotations

import shlex

import pytest

from conformance.running.matrix import Cell


def rerun_command(config, nodeid: str, *extra: str) -> str:
    """`pytest NODEID` plus the options and plugins that shaped this run."""
    args = ["pytest", nodeid]
    for flag in ("gpu", "interpreter"):
        if config.getoption(flag):
            args.append(f"--{flag}")
    for option in ("impl", "profile", "seed"):
        args += [f"--{option}", str(config.getoption(option))] if config.getoption(option) else []
    return shlex.join([*args, *plugin_args(config), *extra])


def plugin_args(config) -> list[str]:
    """The `-p` plugins of this run (a third-party backend is loaded that way)."""
    return [f"-p{p}" for p in config.option.plugins if not p.startswith("no:")]


def described(cell: Cell) -> str:
    """The cell's reason, led by the failed check's name (a contract check's message starts with
    it already; an input decline's reason is the implementation's own words)."""
    if "accepts" in cell.failed_checks:
        return (f"accepts: declined a case the catalogue holds {cell.impl} to ({cell.mode}, "
                f"{cell.dtype}, {cell.case}): {cell.reason}")
    return cell.reason or ""


def conclude(cell: Cell, command: str) -> None:
    if cell.state == "not-applicable":
        pytest.skip(f"not applicable: {cell.reason}")
    if cell.state in ("fail", "crash"):
        detail = cell.measurements.get("traceback", "")
        pytest.fail(f"{cell.state}: {described(cell)}\n{detail}\nreproduce: {command}",
                    pytrace=False)

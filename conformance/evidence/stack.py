"""The declared GPU stack (`stack.toml`) and what a record's machine fields must say about it."""

from __future__ import annotations

import re
import tomllib
from functools import cache
from pathlib import Path

STACK_FILE = Path(__file__).resolve().parents[1] / "stack.toml"


@cache
def declared() -> dict:
    with STACK_FILE.open("rb") as file:
        return tomllib.load(file)


def _major_minor(version: str | None) -> str | None:
    return ".".join(str(version).split("+")[0].split(".")[:2]) if version else None


def _major(version: str | None) -> str | None:
    return str(version).split(".")[0] if version else None


def machine_problems(machine: dict, stack: dict | None = None) -> list[str]:
    """Each field of a record's `machine` that the declared GPU stack does not admit, with both
    values."""
    gpu = (stack or declared())["gpu"]
    checks = (
        ("torch", _major_minor(machine.get("torch")), gpu["torch"], "major.minor"),
        ("triton", machine.get("triton"), gpu["triton"], "exact"),
        ("cuda", _major(machine.get("cuda")), gpu["cuda"], "major"),
    )
    problems = [f"{field} {shown} ({how}: {machine.get(field)!r}) is not the declared {want!r}"
                for field, shown, want, how in checks if shown != want]
    if machine.get("gpu") not in gpu["gpus"]:
        problems.append(f"gpu {machine.get('gpu')!r} is not a declared model {gpu['gpus']}")
    if machine.get("compute_capability") not in gpu["architectures"]:
        problems.append(f"compute_capability {machine.get('compute_capability')!r} is not a "
                        f"declared architecture {gpu['architectures']}")
    return problems


#: Where the CPU stack is installed: README's commands, CI's script and tox's environments.
PINNING_FILES = ("README.md", ".ci/run", "tox.ini")
_PIN = re.compile(r"\b(torch|triton)==([0-9][0-9A-Za-z.+]*)")


def pin_problems(texts: dict[str, str], stack: dict | None = None) -> list[str]:
    """Each `torch==` / `triton==` pin in `texts` (file name -> content) that differs from the
    declaration: triton must be the GPU's (CI interprets the kernels the GPU compiles), torch
    CI's declared CPU wheel."""
    stack = stack or declared()
    want = {"triton": stack["gpu"]["triton"], "torch": stack["cpu"]["torch"]}
    return [f"{name} pins {package}=={version}; conformance/stack.toml declares {want[package]}"
            for name, text in texts.items() for package, version in _PIN.findall(text)
            if version != want[package]]

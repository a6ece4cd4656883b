"""``python -m benchmarks.rendering.traced_list JUNIT.xml [JUNIT.xml ...] RUN [--out TOML]``:
the ``libreyolo/kernels/traced_on_cuda.toml`` a CUDA run of
``tests/kernels/test_traced_kernels_cuda.py`` and ``tests/kernels/test_traced_kernel_code.py``
supports.

Each JUNIT.xml is a ``--junitxml`` of that run (one file or several); RUN names it (card, torch,
triton, date). An implementation is listed when its traced test passed (the test records
``slot/name`` as the ``traced`` property), its inductor-compiled test passed (``compiled``: a
traced graph can hold the kernels and still round differently once inductor fuses the torch ops
around them), its kernels compile under inductor to the code its eager launches run
(``same_code``: inductor drops a launch's ``enable_fp_fusion``, so a kernel that depends on it can
pass the compiled test on its data and differ on others) and, for a slot the reduce-overhead test
covers, that test passed too (the ``replayed`` property). A failed, skipped or missing test lists
nothing: the list only grows from a passing run. Standard library only, like the tables.
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from benchmarks.rendering.results import ROOT

TRACED_FILE = ROOT / "libreyolo" / "kernels" / "traced_on_cuda.toml"
REPLAY_TEST = "test_reduce_overhead_replays_the_traced_kernels_with_the_eager_bits"


def _passed(case: ElementTree.Element) -> bool:
    return not any(case.find(tag) is not None for tag in ("failure", "error", "skipped"))


def _properties(case: ElementTree.Element) -> dict[str, str]:
    return {prop.get("name"): prop.get("value") for prop in case.iter("property")}


def validated(junit: ElementTree.Element) -> list[str]:
    """``slot/name`` of each implementation the run validated, sorted."""
    traced, compiled, same_code, replay_tested, replayed = set(), set(), set(), set(), set()
    for case in junit.iter("testcase"):
        name = case.get("name", "")
        props = _properties(case)
        if name.startswith(REPLAY_TEST):
            replay_tested.add(name[len(REPLAY_TEST):].strip("[]"))
            if _passed(case) and "replayed" in props:
                replayed.add(props["replayed"])
        elif _passed(case) and "traced" in props:
            traced.add(props["traced"])
        elif _passed(case) and "compiled" in props:
            compiled.add(props["compiled"])
        elif _passed(case) and "same_code" in props:
            same_code.add(props["same_code"])
    return sorted(entry for entry in traced & compiled & same_code
                  if entry.split("/")[0] not in replay_tested or entry.split("/")[0] in replayed)


def render(entries: list[str], run: str) -> str:
    """The toml: its header kept from the current file, then one entry per implementation."""
    header = [line for line in TRACED_FILE.read_text().splitlines() if line.startswith("#")]
    body = ["traced = ["] + [f'    {{ implementation = "{entry}", run = "{run}" }},'
                             for entry in entries] + ["]"]
    if not entries:
        body = ['traced = []  # [{ implementation = "slot/name", run = "..." }, ...]']
    return "\n".join(header + [""] + body) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", type=Path, nargs="+")
    parser.add_argument("run", help="the validating run: card, torch, triton, date")
    parser.add_argument("--out", type=Path, help="where to write the toml (default: stdout)")
    args = parser.parse_args(argv)
    merged = ElementTree.Element("testsuites")
    merged.extend(ElementTree.parse(path).getroot() for path in args.junit)
    entries = validated(merged)
    text = render(entries, args.run)
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    print(f"{len(entries)} implementation(s) validated: {', '.join(entries) or 'none'}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

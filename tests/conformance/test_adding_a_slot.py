"""docs/conformance.md's worked example ("Adding a slot") holds: its blocks, applied to a copy of
the tree, add a slot with a reference and a Triton variant that the CPU suite passes (the Triton
plan under the interpreter), its negative control rejected, and that the gate accepts while the
variant awaits its first record (the generated awaiting list names it), touching only the files
the example names.

The blocks are read from the docs, so the example a newcomer follows is the one tested.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from conformance.evidence.provenance import ROOT
from conformance.running import matrix
from conformance.running.child import run_pytest

DOCS = ROOT / "docs" / "conformance.md"
SLOT = "fake_quant_int4_per_channel"
#: What the example says it touches, by job; the docs state the count.
HAND_WRITTEN = {
    "libreyolo/kernels/slots.py": "declaration",
    "libreyolo/quant/quantizers.py": "the reference's numbers (its quantizer)",
    "libreyolo/quant/fake_quant.py": "the reference op (a def calling its quantizer)",
    f"conformance/shapes/{SLOT}.toml": "shape set (with the suite's profile)",
    "conformance/negative/fake_quant.py": "negative control",
    "libreyolo/kernels/quant/simulate/plan.py": "Triton plan",
    "docs/quantization.md": "docs row",
}
_PLACEMENT = re.compile(r"(?:`(?P<path>[^`\s]+)`, )?(?P<where>(?:after|instead of) (?P<ticks>`+)"
                        r"(?P<anchor>.+?)(?P=ticks)|at the end|a new file)$")
_GATE = "tests/conformance/test_gate_records.py::"
#: The gate's tests a new variant passes before its first record (listed as awaiting it) ...
AWAITING = (f"{_GATE}test_the_awaiting_list_is_the_one_the_records_give",
            f"{_GATE}test_implementations_awaiting_a_record_are_not_selected_by_default")
#: ... and the one that asks for every other record again: their digests hold the files a slot
#: is added to
RECORDS = f"{_GATE}test_every_in_tree_accelerated_implementation_has_a_green_cuda_record"
_FENCE = re.compile(r"^```\w*\n(.*?)^```$", re.S | re.M)


@dataclass(frozen=True)
class Block:
    path: str
    where: str  # "after", "instead" (of the anchor's line), "end" or "new"
    anchor: str | None
    text: str


def example_blocks(docs: str) -> list[Block]:
    """The worked example's blocks in order, each with the file and place the prose before it
    names (a paragraph without a path continues the previous block's file)."""
    section = docs.split("### Worked example:", 1)[1].split("\n## ", 1)[0]
    blocks, path, previous_end = [], None, 0
    for fence in _FENCE.finditer(section):
        prose = " ".join(section[previous_end:fence.start()].split())
        placement = _PLACEMENT.search(prose)
        assert placement, f"no file and place before the block {fence.group(1)[:60]!r}"
        path = placement["path"] or path
        where = placement["where"]
        kind = {"at the end": "end", "a new file": "new"}.get(where, where.split()[0])
        blocks.append(Block(path, kind, placement["anchor"], fence.group(1)))
        previous_end = fence.end()
    return blocks


def apply(block: Block, tree: Path) -> None:
    target = tree / block.path
    python = block.path.endswith(".py")
    top_level = python and not block.text[:1].isspace()
    if block.where == "new":
        assert not target.exists(), f"{block.path} is not a new file"
        target.write_text(block.text)
        return
    text = target.read_text()
    if block.where == "end":
        target.write_text(text.rstrip("\n") + ("\n\n\n" if top_level else "\n") + block.text)
        return
    lines = text.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.strip() == block.anchor]
    assert len(hits) == 1, f"{block.path}: the anchor {block.anchor!r} is on {len(hits)} lines"
    if block.where == "instead":
        lines[hits[0]] = block.text
    else:
        lines.insert(hits[0] + 1, ("\n\n" if top_level else "") + block.text)
    target.write_text("".join(lines))


def copy_tree(destination: Path) -> None:
    """The checkout's files as git sees them (tracked, and untracked unless ignored)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)


def test_the_example_names_the_files_the_docs_count():
    blocks = example_blocks(DOCS.read_text())
    assert {b.path for b in blocks} == set(HAND_WRITTEN)
    assert "touches **seven** hand-written files" in DOCS.read_text()
    assert len(HAND_WRITTEN) == 7


def test_the_parser_refuses_a_block_without_a_place():
    docs = "### Worked example: x\n\nSome prose.\n\n```python\npass\n```\n"
    with pytest.raises(AssertionError, match="no file and place"):
        example_blocks(docs)


def test_an_anchor_must_name_one_line(tmp_path):
    (tmp_path / "m.py").write_text("x = 1\nx = 1\n")
    with pytest.raises(AssertionError, match="on 2 lines"):
        apply(Block("m.py", "after", "x = 1", "y = 2\n"), tmp_path)


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                    reason="needs the git checkout to copy")
def test_the_worked_example_adds_a_slot_the_cpu_suite_passes(tmp_path):
    tree = tmp_path / "tree"
    copy_tree(tree)
    for block in example_blocks(DOCS.read_text()):
        apply(block, tree)

    found = subprocess.run([sys.executable, "-c", "import libreyolo; print(libreyolo.__file__)"],
                           cwd=tree, capture_output=True, text=True, check=True).stdout
    assert Path(found.strip()).is_relative_to(tree), f"the copy's libreyolo was not used: {found}"

    saved = tmp_path / "matrix.json"
    done = run_pytest(tree, "conformance/", "--slot", SLOT, "-q", "--matrix", str(saved),
                      timeout=1200)
    tail = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    cells, _ = matrix.read(saved)
    states = Counter((c.impl, c.mode, c.state) for c in cells if c.slot == SLOT)
    assert {c.slot for c in cells} == {SLOT}, "--slot ran other slots' cells"
    # the reference on CPU, and the Triton plan's kernel bit for bit under the interpreter
    assert states[("reference", "cpu", "pass")] > 0 and states[("triton", "interpreter",
                                                                 "pass")] > 0, states
    assert not {s for _, _, s in states} & {"fail", "crash"}, states

    # generated, not written: the new variant has no record, so it is listed as awaiting one
    listed = subprocess.run([sys.executable, "-m", "conformance.evidence.awaiting"], cwd=tree,
                            capture_output=True, text=True, timeout=600)
    assert listed.returncode == 0 and f"{SLOT}/triton" in listed.stdout, listed.stderr[-2000:]
    gate = run_pytest(tree, *AWAITING, RECORDS, "-q", "-rf", timeout=600)
    failed = [line.split()[1] for line in gate.stdout.splitlines() if line.startswith("FAILED ")]
    assert "1 failed, 2 passed" in gate.stdout and failed == [RECORDS], gate.stdout[-3000:]
    problems = [line for line in gate.stdout.splitlines() if "re-record on a declared GPU" in line]
    assert len(problems) >= 20, gate.stdout[-3000:]
    unlisted = [line for line in problems if SLOT in line]
    assert not unlisted, f"the new variant must be listed as awaiting its record: {unlisted}"

    verdict = re.search(rf"^{SLOT} +negative-int4_full_range +(.+)$", done.stdout, re.M)
    assert verdict and verdict[1].startswith("rejected by exact on "), tail
    assert "kill rate: 1/1 (100%)" in done.stdout, tail

"""The gate's own logic, on a fake implementation, fixture records and a fixture git tree: what
makes a parity record green, and each way a record, a pin or a registration can lie."""

import copy

import pytest

from conformance.catalogue import CATALOGUE
from conformance.evidence import gate, provenance, records, scan, stack
from conformance.evidence.gate import RECORD_COMMAND, Target, record_problem
from conformance.schema.declarations import is_in_tree
from libreyolo.kernels import register, registered, unregister

SLOT = "fake_quant_fp8"
FAKE = Target(SLOT, "fake", ("libreyolo/fake_provider.py",))
KERNEL = b"def run(x):\n    return x * 2\n"
EDITED = KERNEL.replace(b"2", b"3")  # today's kernel, where a case says the kernel changed
COMMIT = "c" * 40
TREE = {COMMIT: {"libreyolo/fake_provider.py": KERNEL}}
MACHINE = {"gpu": "NVIDIA H200", "compute_capability": "9.0", "torch": "2.11.0+cu130",
           "triton": "3.6.0", "cuda": "13.0", "python": "3.12.3"}


def _fake_run(x):
    return x


@pytest.fixture(autouse=True)
def fake_world(monkeypatch):
    """A registered `fake` implementation (so the catalogue's cells exist for it) and a git
    history holding one commit, `COMMIT`."""
    register(SLOT, _fake_run, name=FAKE.impl, sources=())
    monkeypatch.setattr(provenance, "in_history", lambda commit: commit in TREE)
    monkeypatch.setattr(provenance, "file_at",
                        lambda commit, path: TREE.get(commit, {}).get(path))
    yield
    unregister(SLOT, FAKE.impl)


def current(kernel: bytes = KERNEL) -> dict:
    files = {"libreyolo/fake_provider.py": provenance.content_hash("fake_provider.py", kernel)}
    entry = {"slot": SLOT, "contract": "exact"}
    return {"digest": provenance.combined_digest(files, entry), "files": files, "entry": entry}


def green_record() -> dict:
    source = current()
    cells = {key: ["pass", "small"] for key in gate.expected_cells(FAKE)}
    passed = [k for k in cells if not k.endswith("|hypothesis")]
    return {"format": records.FORMAT_VERSION, "slot": SLOT, "impl": FAKE.impl,
            "source_digest": source["digest"], "source_files": source["files"],
            "catalogue_entry": source["entry"], "git": {"commit": COMMIT, "dirty": False},
            "machine": dict(MACHINE), "complete": True, "profile": "thorough",
            "modes": ["cuda", "cuda-graph"], "cells": cells, "counts": records.counts(cells),
            "output_digests": {k: "0" * 64 for k in passed}, "bounded": {}}


def tampered(edit) -> dict:
    record = copy.deepcopy(green_record())
    edit(record)
    return record


def _recount(record):
    record["counts"] = records.counts(record["cells"])


def _first_cell(record):
    return sorted(k for k in record["cells"] if not k.endswith("|hypothesis"))[0]


def _fail_one(record):
    record["cells"][_first_cell(record)][0] = "fail"
    _recount(record)


def _decline_one(record):
    record["cells"][_first_cell(record)][0] = "not-applicable"
    _recount(record)
    del record["output_digests"][_first_cell(record)]


def _drop_one(record):
    del record["cells"][_first_cell(record)]
    _recount(record)


def _rewrite_digest_after_a_kernel_edit(record):
    """The kernel changed after the run; the record's digest and file hashes are rewritten to
    today's, but its commit still holds the old file."""
    source = current(EDITED)
    record.update(source_digest=source["digest"], source_files=source["files"])


def _mode_counts_contradict_states(record):
    mode = record["counts"]["mode"]
    key = next(iter(mode))
    mode[key] += 1


def test_a_matching_complete_green_record_passes():
    assert record_problem(FAKE, green_record(), current()) is None


TAMPERINGS = {  # name: (how the green record is edited, None: no record; what the gate says)
    "no-record": (None, "no CUDA parity record"),
    "format-1": (lambda r: r.update(format=1), "format 1"),
    "another-slots-record": (lambda r: r.update(slot="fake_quant_int8_affine"),
                             "the record is of"),
    "source-digest-rewritten": (lambda r: r.update(source_digest="e" * 64),
                                "not the digest of its own"),
    "stale-kernel": (lambda r: None, "other sources"),
    "digest-and-files-rewritten": (_rewrite_digest_after_a_kernel_edit,
                                   "is not the file the record hashed"),
    "dirty-tree": (lambda r: r.update(git={"commit": COMMIT, "dirty": True}), "DIRTY"),
    "null-commit": (lambda r: r.update(git={"commit": None, "dirty": False}),
                    "names no commit"),
    "nonexistent-commit": (lambda r: r.update(git={"commit": "d" * 40, "dirty": False}),
                           "not in this repository's history"),
    "another-gpu": (lambda r: r["machine"].update(gpu="NVIDIA A100-SXM4-80GB",
                                                  compute_capability="8.0"),
                    "gpu 'NVIDIA A100-SXM4-80GB'"),
    "another-torch": (lambda r: r["machine"].update(torch="2.12.0+cu130"), "torch 2.12"),
    "another-triton": (lambda r: r["machine"].update(triton="3.7.0"), "triton 3.7.0"),
    "another-cuda": (lambda r: r["machine"].update(cuda="12.8"), "cuda 12"),
    "partial-run": (lambda r: r.update(complete=False), "partial run"),
    "ci-profile": (lambda r: r.update(profile="ci"), "partial run"),
    "interpreter-only": (lambda r: r.update(modes=["interpreter"]),
                         "no cuda or cuda-graph cells"),
    "no-graph-mode": (lambda r: r.update(modes=["cuda"]), "no cuda-graph cells"),
    "a-cell-missing": (_drop_one, "1 missing"),
    "an-extra-cell": (lambda r: r["cells"].update({"cuda|float32|x@contiguous":
                                                    ["pass", "small"]}), "1 unexpected"),
    "mode-counts-contradict-states": (_mode_counts_contradict_states,
                                      "not the counts of its cells"),
    "a-failure": (_fail_one, "not green"),
    "a-decline-in-a-held-case": (_decline_one, "where the catalogue holds"),
    "capabilities-edited": (lambda r: r.update(capabilities={"devices": ["cpu"], "dtypes": None,
                                                             "modes": None, "layouts": None}),
                            "other declared capabilities"),
    "output-digests-cut-to-one": (lambda r: r.update(output_digests=dict(
        list(r["output_digests"].items())[:1])), "output_digests covers 1 cells"),
}


@pytest.mark.parametrize("name", list(TAMPERINGS))
def test_a_record_that_does_not_prove_the_current_code_fails(name):
    edit, words = TAMPERINGS[name]
    record = None if edit is None else tampered(edit)
    edited = name in ("stale-kernel", "digest-and-files-rewritten")
    today = current(EDITED) if edited else current()
    problem = record_problem(FAKE, record, today)
    assert problem is not None and words in problem, problem
    assert problem.startswith(f"{SLOT}/fake: ") and RECORD_COMMAND in problem


def test_a_record_states_the_declaration_it_was_made_under_and_older_ones_need_not():
    """Format-2 records made before declarations existed lack the field and stay valid."""
    assert "capabilities" not in green_record()
    stated = tampered(lambda r: r.update(capabilities=None))
    assert record_problem(FAKE, stated, current()) is None


def test_a_stale_record_names_the_files_that_changed():
    problem = record_problem(FAKE, green_record(), current(EDITED))
    assert "libreyolo/fake_provider.py" in problem


def test_the_gate_reports_every_target_that_is_not_green():
    other = Target("fake_quant_mxfp8_weight", "fake", ())
    found = {FAKE.slot: green_record(), other.slot: None}
    problems = gate.gate_problems([FAKE, other], lambda slot, impl: found[slot],
                                  lambda target: current())
    assert len(problems) == 1 and "fake_quant_mxfp8_weight/fake" in problems[0]


# The declared stack and the pins that must follow it.

def test_a_triton_bump_in_ci_alone_is_caught_by_the_declared_stack():
    bumped = {".ci/run": "pip install -q torch==2.13.0 triton==3.7.0",
              "tox.ini": "deps =\n    triton==3.7.0\n"}
    problems = stack.pin_problems(bumped)
    assert len(problems) == 2 and all("triton==3.7.0" in p and "3.6.0" in p for p in problems)


def test_a_cpu_torch_bump_in_ci_alone_is_caught_by_the_declared_stack():
    problems = stack.pin_problems({".ci/run": "pip install -q torch==2.14.0 triton==3.6.0"})
    assert problems == [".ci/run pins torch==2.14.0; conformance/stack.toml declares 2.13.0"]


def test_bumping_the_declared_gpu_stack_stales_every_record_made_on_the_old_one():
    bumped = copy.deepcopy(stack.declared())
    bumped["gpu"]["triton"] = "3.7.0"
    assert stack.machine_problems(MACHINE) == []
    assert stack.machine_problems(MACHINE, bumped) == [
        "triton 3.6.0 (exact: '3.6.0') is not the declared '3.7.0'"]


# In-tree means anything in the tree.

def test_a_registration_from_any_libreyolo_module_is_in_tree():
    def sneaky(x):
        return x

    sneaky.__module__ = "libreyolo"  # as if defined in libreyolo/__init__.py
    impl = register(SLOT, sneaky, name="sneaky", sources=())
    try:
        assert is_in_tree(impl)
        targets = scan.in_tree_targets.__wrapped__()
        assert f"{SLOT}/sneaky" in {t.key for t in targets}
        problem = record_problem(Target(SLOT, "sneaky", ()), None, current())
        assert "no CUDA parity record" in problem
    finally:
        unregister(SLOT, "sneaky")


def test_a_third_party_registration_is_not_in_tree():
    impl = next(i for i in registered(SLOT) if i.name == FAKE.impl)
    assert not is_in_tree(impl)


@pytest.mark.parametrize("source, flagged", [
    ("register('s', f, name='x')\n", False),
    ("for s in SLOTS:\n    register(s, f, name='x')\n", False),
    ("if torch.cuda.is_available():\n    register('s', f, name='x')\n", True),
    ("try:\n    import triton\n    register('s', f, name='x')\nexcept ImportError:\n    pass\n",
     True),
    ("def later():\n    kernels.register('s', f, name='x')\n", True),
    ("def load():\n    register(slot, ref, name=REFERENCE)\n", False),
], ids=["module-level", "module-level-loop", "under-if", "under-try", "in-a-function",
        "the-registrys-own-references"])
def test_a_conditional_registration_is_rejected(source, flagged):
    assert bool(gate.conditional_registrations(source)) is flagged


# What the digest counts.

PROVIDER = provenance.ROOT / "libreyolo/kernels/attention/ms_deform_attn/triton_provider.py"


def _hash(text: str) -> str:
    return provenance.content_hash(PROVIDER.name, text.encode())


def test_comments_docstrings_and_formatting_do_not_change_a_files_digest():
    text = PROVIDER.read_text()
    edited = ('"""Another module docstring."""\n# a comment\n'
              + text.split('"""', 2)[2].replace("\n\n\n", "\n\n\n\n"))
    edited = edited.replace("def forward_zeroing(points: int, value_elements: int, "
                            "forward_grid: tuple) -> tuple | None:\n",
                            "def forward_zeroing(points: int, value_elements: int, "
                            "forward_grid: tuple) -> tuple | None:  # why, in a comment\n")
    assert edited != text and _hash(edited) == _hash(text)


def test_a_one_character_code_edit_changes_a_files_digest():
    text = PROVIDER.read_text()
    edited = text.replace("SPLIT_LEVELS_BELOW = 768", "SPLIT_LEVELS_BELOW = 769", 1)
    assert edited != text and _hash(edited) != _hash(text)


def test_a_data_file_counts_by_its_bytes():
    assert provenance.content_hash("s.toml", b"a = 1\n") != \
        provenance.content_hash("s.toml", b"a = 1 \n")


def test_the_digest_covers_the_package_init_modules_above_each_file():
    closure = {str(p.relative_to(provenance.ROOT)) for p in provenance.import_closure([PROVIDER])}
    assert {"libreyolo/__init__.py", "libreyolo/kernels/__init__.py",
            "libreyolo/kernels/attention/__init__.py",
            "libreyolo/kernels/attention/ms_deform_attn/__init__.py"} <= closure


def test_every_records_digest_holds_the_scan_and_not_the_gate():
    """The recorder asks the scan what to record, never the gate: its imports are in every
    record's digest, and an edit to the gate's checks must not stale every record."""
    files = {str(p.relative_to(provenance.ROOT))
             for p in provenance.digest_files(CATALOGUE[SLOT], ())}
    assert "conformance/evidence/scan.py" in files
    assert "conformance/evidence/gate.py" not in files, "the recorder imports the gate again"

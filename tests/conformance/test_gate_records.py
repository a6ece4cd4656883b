"""THE GATE on the real tree: each accelerated implementation registered from `libreyolo` needs
a green CUDA parity record under conformance/records/ for the digest of its current sources, made
on the declared GPU stack, or no record yet, which lists it as awaiting one (the generated
libreyolo/kernels/awaiting_record.toml) and keeps it from being selected by default. Every
recorded reference side (exact output digests, bounded oracles and bounds) is re-derived here on
CPU from the record's seed, large cases included."""

import importlib.metadata
import subprocess
import sys
import textwrap

import pytest

from conformance.catalogue import CATALOGUE
from conformance.evidence import awaiting, gate, provenance, records, rederive, stack
from conformance.evidence.gate import current_digest, gate_problems
from conformance.evidence.scan import in_tree_targets
from conformance.schema.declarations import is_in_tree
from libreyolo.kernels import registered, registry, settings
from libreyolo.kernels.providers import IN_TREE_PROVIDERS
from libreyolo.kernels.registry import awaiting_record


def test_every_in_tree_accelerated_implementation_has_a_green_cuda_record(whole_suite):
    gated = [t for t in in_tree_targets() if t.key not in awaiting_record()]
    problems = gate_problems(gated, records.load, current_digest)
    assert not problems, "\n".join(problems)


def test_no_in_tree_implementation_declares_a_case_of_the_catalogue_away(whole_suite):
    """Awaiting a record or not: the catalogue is the bar in tree (docs/conformance.md)."""
    problems = [p for t in in_tree_targets() if (p := gate.declaration_problem(t))]
    assert not problems, "\n".join(problems)


def test_the_awaiting_list_is_the_one_the_records_give(whole_suite):
    """libreyolo/kernels/awaiting_record.toml is generated: every in-tree implementation without
    a record, and nothing else (conformance/evidence/awaiting.py)."""
    assert awaiting.AWAITING_RECORD_FILE.read_text() == awaiting.text(), \
        f"the awaiting list is not current: run {awaiting.COMMAND} and commit it"
    targets = {t.key for t in in_tree_targets()}
    assert awaiting_record() <= targets
    assert awaiting_record() == {key for key in targets
                                 if records.load(*key.split("/")) is None}


def test_a_record_takes_an_implementation_off_the_awaiting_list(whole_suite):
    hub = next(t for t in in_tree_targets() if t.key == "ms_deform_attn/hub")
    triton = next(t for t in in_tree_targets() if t.key == "fake_quant_fp8/triton")
    unrecorded = awaiting.text([hub, triton], load=lambda slot, impl: None)
    assert 'awaiting = ["fake_quant_fp8/triton", "ms_deform_attn/hub"]' in unrecorded
    assert unrecorded.count("[hub.") == 1 and '[hub."ms_deform_attn/hub"]' in unrecorded
    recorded = awaiting.text([hub, triton], load=lambda slot, impl: {"stale": "or red"})
    assert "awaiting = []" in recorded and "[hub." not in recorded


def test_implementations_awaiting_a_record_are_not_selected_by_default(whole_suite, monkeypatch):
    """The policy applied to the real registrations (tests/registry covers its behaviour)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    registered_keys = {f"{i.op}/{i.name}": i for slot in CATALOGUE for i in registered(slot)}
    for key in sorted(awaiting_record()):
        assert key in registered_keys, f"{key} is not registered"
        assert registry._awaits_record(registered_keys[key], settings.Selection(), False)


def test_every_provider_module_is_found_by_the_scan(whole_suite):
    """The scan is not vacuous: each in-tree provider registers something it finds."""
    found = {impl.fn.__module__ for slot in CATALOGUE for impl in registered(slot)
             if is_in_tree(impl)}
    assert set(IN_TREE_PROVIDERS) <= found, sorted(set(IN_TREE_PROVIDERS) - found)


def test_the_scan_finds_the_same_registrations_without_triton_or_cuda(whole_suite):
    """Registration is unconditional: a machine without triton (or CUDA) cannot make the scan
    see less. A child process refuses every import of triton and of the `kernels` package."""
    script = textwrap.dedent("""
        import importlib.abc, sys
        class Refuse(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("triton", "kernels"):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        sys.meta_path.insert(0, Refuse())
        from conformance.evidence.scan import in_tree_targets
        print(sorted(t.key for t in in_tree_targets()))
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=provenance.ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str(sorted(t.key for t in in_tree_targets()))


def _declared_order_problems(keys_by_module: list[tuple[str, str]]) -> list[str]:
    """Where a slot's in-tree implementations (newest first) are not in the reverse of
    IN_TREE_PROVIDERS' order: the provider declared last must sit on top."""
    problems, last = [], {}
    for key, module in keys_by_module:
        slot = key.split("/")[0]
        rank = IN_TREE_PROVIDERS.index(module) if module in IN_TREE_PROVIDERS else len(
            IN_TREE_PROVIDERS)
        if slot in last and rank > last[slot][1]:
            problems.append(f"{key} ({module}) sits below {last[slot][0]}")
        last[slot] = (key, rank)
    return problems


_SCAN_ORDER = textwrap.dedent("""
    from conformance.evidence.scan import in_tree_targets
    from libreyolo.kernels import registered
    targets = in_tree_targets()
    modules = {(i.op, i.name): i.fn.__module__ for t in targets for i in registered(t.slot)}
    for t in targets:
        print(t.key, modules[(t.slot, t.impl)])
""")


#: `scan.import_package` imports the providers in `IN_TREE_PROVIDERS` order before the rest of
#: the package: in name order, a reference-only selection (which imports no provider) would
#: register `hub` below `triton`.
@pytest.mark.parametrize("selection", ["reference", None])
def test_the_scan_keeps_the_declared_provider_order_whatever_the_selection(selection):
    """A reference-only selection imports no provider, so the scan must import them in
    IN_TREE_PROVIDERS' order, not the package's name order (`hub` would land below `triton`)."""
    env = {"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""}
    if selection is not None:
        env["LIBREYOLO_KERNELS"] = selection
    done = subprocess.run([sys.executable, "-c", _SCAN_ORDER], cwd=provenance.ROOT,
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [tuple(line.split()) for line in done.stdout.splitlines()]
    assert len(rows) > len(IN_TREE_PROVIDERS)
    assert not _declared_order_problems(rows)


def test_the_order_check_rejects_a_provider_below_an_earlier_one():
    rows = [("ms_deform_attn/triton", IN_TREE_PROVIDERS[1]),
            ("ms_deform_attn/hub", IN_TREE_PROVIDERS[-1])]
    assert _declared_order_problems(rows) == [
        f"ms_deform_attn/hub ({IN_TREE_PROVIDERS[-1]}) sits below ms_deform_attn/triton"]


def test_no_libreyolo_module_registers_conditionally():
    found = [hit for path in sorted((provenance.ROOT / "libreyolo").rglob("*.py"))
             for hit in gate.conditional_registrations(path.read_text(), str(path))]
    assert not found, f"register at module level; eligibility goes in predicate/accepts: {found}"


def test_each_record_digests_the_files_its_implementation_registered_with(whole_suite):
    registered_sources = {(i.op, i.name): i.sources for slot in CATALOGUE for i in registered(slot)}
    for target in in_tree_targets():
        assert registered_sources[(target.slot, target.impl)] == target.sources


# The declared stack: CI interprets with the GPU's triton, on the declared CPU torch.

def test_every_pin_in_the_setup_commands_is_the_declared_one():
    texts = {name: (provenance.ROOT / name).read_text() for name in stack.PINNING_FILES}
    assert not stack.pin_problems(texts), stack.pin_problems(texts)


@pytest.mark.parametrize("package, section", [("triton", "gpu"), ("torch", "cpu")])
def test_this_run_uses_the_declared_cpu_stack(package, section):
    try:
        installed = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{package} is not installed here")
    want = stack.declared()[section][package]
    if package == "torch":
        installed = installed.split("+")[0]
        if ".".join(installed.split(".")[:2]) == stack.declared()["gpu"]["torch"]:
            pytest.skip("this is the GPU stack's torch, not CI's CPU wheel")
    assert installed == want, f"{package} {installed} here; conformance/stack.toml: {want}"


# Re-deriving what records claim.

def _recorded(kind: str):
    """One param per (slot, dtype, case) a record holds cells of; the modes share it."""
    for target in in_tree_targets():
        record = records.load(target.slot, target.impl)
        if record is None or CATALOGUE[target.slot].contract.kind != kind:
            continue
        field = "output_digests" if kind == "exact" else "bounded"
        by_cell: dict = {}
        for key, value in (record.get(field) or {}).items():
            mode, dtype, case = key.split("|", 2)
            by_cell.setdefault((dtype, case), {})[mode] = value
        for (dtype, case), per_mode in sorted(by_cell.items()):
            yield pytest.param(target.slot, record["seed"], dtype, case, per_mode,
                               record["machine"].get("torch"),
                               id=f"{target.slot}:{target.impl}:{dtype}:{case}")


@pytest.mark.parametrize("slot, seed, dtype, case, per_mode, torch_version",
                         list(_recorded("exact")))
def test_recorded_exact_outputs_are_the_cpu_references(whole_suite, slot, seed, dtype, case,
                                                       per_mode, torch_version):
    """The GPU run's output digests, recomputed here from the CPU reference on the same seeded
    inputs (large cases too): a record cannot claim bits the reference does not produce."""
    want = rederive.exact_digest(slot, seed, dtype, case)
    wrong = {mode: got[:12] for mode, got in per_mode.items() if got != want}
    assert not wrong, (f"{slot} {dtype} {case}: recorded {wrong}, the CPU reference gives "
                       f"{want[:12]}; re-record with: {gate.RECORD_COMMAND}")


@pytest.mark.parametrize("slot, seed, dtype, case, per_mode, torch_version",
                         list(_recorded("bounded")))
def test_recorded_bounds_are_rederived_on_cpu(whole_suite, slot, seed, dtype, case, per_mode,
                                              torch_version):
    """A bounded record's reference side (the float64 oracle, the portable path's error, the
    bound) re-derived on CPU; the candidate's own error is the GPU's word (docs/conformance.md,
    "For CI maintainers")."""
    import torch

    derived = rederive.bounded_side(slot, seed, dtype, case)
    same_torch = torch_version == torch.__version__
    for mode, recorded in per_mode.items():
        # cuda-graph cells judge the forward only
        want = derived if mode == "cuda" else {"output": derived["output"]}
        problem = rederive.bounded_mismatch(recorded, want, same_torch)
        assert problem is None, f"{slot} {mode} {dtype} {case}: {problem}"


def test_the_records_table_shows_a_record_without_a_commit_instead_of_crashing(monkeypatch):
    from conformance.reporting import render

    record = {"counts": {"mode": {}, "state": {"pass": 1}}, "worst": {}, "profile": "thorough",
              "source_digest": "0" * 64, "git": {"commit": None}, "written": "2026-12-01",
              "machine": {"torch": "2.11.0", "triton": "3.6.0"}}
    monkeypatch.setattr(records, "load", lambda slot, impl: record)
    assert "| none |" in render.records_table()

"""The gate: every in-tree accelerated implementation needs a green CUDA record for the digest
of its current sources. The list is static, so a machine without triton cannot make it vacuous.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

from conformance import provenance
from conformance.catalogue import CATALOGUE
from conformance.records import RECORD_PROFILE

FAKE_QUANT_SLOTS = tuple(name for name, spec in CATALOGUE.items() if spec.family == "fake_quant")
#: provider module -> (implementation name, slots it registers). Its source files are the
#: module's own ``SOURCES``, the list it registers with; the module imports without triton.
IN_TREE = {
    "libreyolo.kernels.quant.simulate.triton_provider": ("triton", FAKE_QUANT_SLOTS),
    "libreyolo.kernels.attention.ms_deform_attn.triton_provider": ("triton", ("ms_deform_attn",)),
    "libreyolo.kernels.attention.ms_deform_attn.ragged_triton_provider": (
        "triton", ("ms_deform_attn_ragged",)),
}
# worksteal: xdist's default load scheduling hands a block of consecutive tests to each worker,
# and every slot's record waits for its hypothesis tests, which then all sit on one worker.
RECORD_COMMAND = ("pytest conformance/ --gpu --record --profile thorough --impl {impl} "
                  "-n auto --dist worksteal")


@dataclass(frozen=True)
class Target:
    slot: str
    impl: str
    sources: tuple

    @property
    def command(self) -> str:
        return RECORD_COMMAND.format(impl=self.impl)


def in_tree_targets() -> list[Target]:
    targets = []
    for module, (impl, slots) in IN_TREE.items():
        if importlib.util.find_spec(module) is None:
            raise LookupError(f"in-tree provider {module} is missing from the source tree")
        sources = tuple(importlib.import_module(module).SOURCES)
        targets += [Target(slot, impl, sources) for slot in slots]
    return targets


def record_problem(target: Target, record: dict | None, current_digest: str) -> str | None:
    """Why `record` does not make `target` green (None: it does)."""
    where = f"{target.slot}/{target.impl}"
    if record is None:
        return f"{where}: no CUDA parity record; produce it on a GPU with: {target.command}"
    if record.get("source_digest") != current_digest:
        return (f"{where}: the record checked other sources (digest "
                f"{str(record.get('source_digest'))[:12]}, now {current_digest[:12]}); "
                f"re-run: {target.command}")
    if record.get("git", {}).get("dirty", True):
        return f"{where}: the record comes from a DIRTY tree; commit, then run: {target.command}"
    if not record.get("complete") or record.get("profile") != RECORD_PROFILE:
        return (f"{where}: the record is from a partial run (complete={record.get('complete')}, "
                f"profile={record.get('profile')}); run: {target.command}")
    missing = [mode for mode in ("cuda", "cuda-graph") if mode not in record.get("modes", ())]
    if missing:
        return (f"{where}: the record has no {' or '.join(missing)} cells "
                "(interpreter runs never count)")
    if (record.get("slot"), record.get("impl")) != (target.slot, target.impl):
        return f"{where}: the record is of {record.get('slot')}/{record.get('impl')}"
    exact = CATALOGUE[target.slot].contract.kind == "exact" if target.slot in CATALOGUE else False
    if exact and not record.get("output_digests"):
        return f"{where}: an exact-contract record without output digests proves no bits"
    states = record.get("counts", {}).get("state", {})
    if states.get("fail", 0) or states.get("crash", 0) or not states.get("pass", 0):
        return f"{where}: the record is not green ({states}); fix the implementation"
    return None


def gate_problems(targets: list[Target], load: Callable[[str, str], dict | None],
                  digest: Callable[[Target], str]) -> list[str]:
    """Every reason the gate fails, one per target that is not green."""
    problems = (record_problem(t, load(t.slot, t.impl), digest(t)) for t in targets)
    return [p for p in problems if p is not None]


def current_digest(target: Target) -> str:
    return provenance.source_digest(CATALOGUE[target.slot], target.impl, target.sources)["digest"]

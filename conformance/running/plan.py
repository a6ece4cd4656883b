"""Which cells a run holds: derived from the catalogue, the registry and the run's options."""

from __future__ import annotations

from dataclasses import dataclass

from conformance.catalogue import CATALOGUE
from conformance.inputs import shapesets
from conformance.inputs.strategies import INTERPRETER_SIZES, Profile
from conformance.running.cells import ERROR_MODES, CellPlan, ErrorPlan, input_seed
from conformance.schema import declarations


@dataclass(frozen=True)
class RunOptions:
    """The suite's command-line options, validated (see conformance/plugin.py)."""

    profile: Profile
    gpu: bool = False
    interpreter: bool = False
    impl: str | None = None
    seed: int = 0
    record: bool = False
    slots: frozenset | None = None  # --slot: only these slots (None: every catalogued slot)

    def takes(self, slot: str) -> bool:
        return self.slots is None or slot in self.slots

    @property
    def modes(self) -> tuple[str, ...]:
        if self.interpreter:
            return ("interpreter",)
        return ("cuda", "cuda-graph") if self.gpu else ("cpu",)

    @property
    def sizes(self) -> frozenset:
        return INTERPRETER_SIZES if self.interpreter else self.profile.sizes


def registered_names(slot: str) -> list[str]:
    from libreyolo.kernels import registered

    return [impl.name for impl in registered(slot)]


def all_registered_names() -> set[str]:
    return {name for slot in CATALOGUE for name in registered_names(slot)}


def implementations(options: RunOptions, slot: str, mode: str) -> list[str]:
    """The implementations a mode tests: `--impl` restricts them; an interpreter run only takes
    those held to it (it repeats nothing a CPU run already did)."""
    spec = CATALOGUE[slot]
    names = [n for n in registered_names(slot) if options.impl in (None, n)]
    if mode == "interpreter":
        names = [n for n in names if "interpreter" in declarations.held_to(spec, n).modes]
    return names


def cell_plans(options: RunOptions, slots=None) -> list[CellPlan]:
    """Modes and implementations innermost, so consecutive cells share inputs and the cached
    CPU reference (the expensive part on large cases)."""
    plans = []
    for slot, spec in CATALOGUE.items():
        if (slots is not None and slot not in slots) or not options.takes(slot):
            continue
        names = {mode: implementations(options, slot, mode) for mode in options.modes}
        for case in (c for c in shapesets.load(spec.shapes) if c.size in options.sizes):
            full = case.size in options.profile.full_grid_sizes or options.interpreter
            for dtype in spec.dtypes if full else spec.dtypes[:1]:
                for layout in spec.layouts if full else spec.layouts[:1]:
                    seed = input_seed(options.seed, slot, case.name, dtype, layout)
                    plans += [CellPlan(slot, impl, mode, dtype, case, layout, seed)
                              for mode, impls in names.items() for impl in impls]
    return plans


def layout_targets(options: RunOptions) -> list[tuple[str, str, str]]:
    """(slot, implementation, mode) triples the hypothesis layouts explore."""
    return [(slot, impl, mode) for slot in CATALOGUE if options.takes(slot)
            for mode in options.modes for impl in implementations(options, slot, mode)]


def error_plans(options: RunOptions) -> list[ErrorPlan]:
    """Every error input of every slot, for each implementation a mode tests (eager modes)."""
    return [ErrorPlan(slot, impl, mode, error) for slot, spec in CATALOGUE.items()
            if options.takes(slot) for mode in options.modes if mode in ERROR_MODES
            for impl in implementations(options, slot, mode) for error in spec.error_inputs]

"""The suite's pytest plugin: options, the matrix across xdist workers, records.

Every matrix test attaches its cells to its report (`user_properties`), so the process that sees
all reports — the xdist controller, or the only process — builds the matrix, prints it, writes it
(`--matrix PATH`) and writes records as each implementation completes (`--record`). Workers only
run tests.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import sys
import time
from collections import Counter

import pytest

from conformance.evidence import plain_run
from conformance.evidence.recorder import Recorder
from conformance.evidence.records import RECORD_PROFILE
from conformance.inputs import strategies
from conformance.running import matrix
from conformance.running.plan import RunOptions, all_registered_names
from libreyolo.kernels.capabilities import GPU_MODES

__all__ = ["pytest_addoption", "pytest_configure", "pytest_generate_tests",
           "pytest_collection_modifyitems", "run_options", "whole_suite", "record_cell",
           "registered_control", "control_verdict"]

CELL_PROPERTY = "conformance_cell"
CONTROL_PROPERTY = "conformance_negative_control"
GPU_PROPERTY = "conformance_gpu"
OPTIONS_KEY = pytest.StashKey[RunOptions]()


def pytest_addoption(parser):
    group = parser.getgroup("conformance", "libreyolo kernel conformance suite")
    group.addoption("--gpu", action="store_true",
                    help="run the matrix on CUDA (modes cuda and cuda-graph)")
    group.addoption("--interpreter", action="store_true",
                    help="run Triton implementations under TRITON_INTERPRET=1 on CPU tensors")
    group.addoption("--impl", metavar="NAME",
                    help="test only implementations registered under NAME (third parties)")
    group.addoption("--profile", choices=sorted(strategies.PROFILES),
                    help="how much to explore: ci (default, derandomized), dev, thorough; "
                         "validate (the default with --impl: every case in every dtype and "
                         "layout)")
    group.addoption("--seed", type=int, default=0, help="base seed of the matrix's inputs")
    group.addoption("--slot", metavar="NAME[,NAME]",
                    help="only these slots: a record run can be split across commands, each "
                         "slot's records stay complete")
    group.addoption("--matrix", metavar="PATH", help="write the matrix as JSON to PATH")
    group.addoption("--summary", metavar="PATH",
                    help="write the matrix as markdown to PATH, failing cells with the command "
                         "that reproduces each")
    group.addoption("--record", action="store_true",
                    help="with --gpu and --profile thorough: write parity records")
    group.addoption("--replay", metavar="FILE",
                    help="re-run one failing hypothesis example saved by the suite")


def options(config) -> RunOptions:
    return config.stash[OPTIONS_KEY]


def pytest_configure(config):
    get = config.getoption
    if get("gpu") and get("interpreter"):
        raise pytest.UsageError("--gpu and --interpreter exclude each other: compiled and "
                                "interpreted kernels cannot share a process")
    if get("gpu"):
        import torch

        if not torch.cuda.is_available():
            raise pytest.UsageError("--gpu: no CUDA device is available (torch "
                                    f"{torch.__version__}, CUDA build {torch.version.cuda})")
    if get("interpreter"):
        _enter_interpreter()
    if get("record") and not get("gpu"):
        raise pytest.UsageError("--record needs --gpu: only CUDA runs produce parity records")
    if get("profile") is None:  # resolved here, so every child and rerun command repeats it
        config.option.profile = (strategies.IMPL_DEFAULT_PROFILE if get("impl") is not None
                                 else strategies.DEFAULT_PROFILE)
    run = RunOptions(profile=strategies.profile(get("profile")), gpu=get("gpu"),
                     interpreter=get("interpreter"), impl=_checked_impl(get("impl")),
                     seed=get("seed"), record=get("record"), slots=_checked_slots(get("slot")))
    config.stash[OPTIONS_KEY] = run
    if not _is_worker(config):
        wants_records = run.record and _record_refusal(config) is None
        recorder = Recorder(run.profile.name, run.seed) if wants_records else None
        config.pluginmanager.register(Collector(config, recorder), "conformance-collector")


def _record_refusal(config) -> str | None:
    """Why this run may not write records, though asked to (None: it may)."""
    run = options(config)
    if run.profile.name != RECORD_PROFILE:
        return f"records need --profile {RECORD_PROFILE} (this run: {run.profile.name})"
    return _narrowed(config)


def is_plain_gpu_run(config) -> bool:
    """`pytest conformance/ --gpu`, nothing narrowed: the run whose result is evidence
    (`conformance/evidence/plain_run.py`)."""
    run = options(config)
    return (run.gpu and run.impl is None and run.slots is None and not run.record
            and run.profile.name == strategies.DEFAULT_PROFILE and run.seed == 0
            and _narrowed(config) is None)


def _narrowed(config) -> str | None:
    """How this run leaves out part of the whole suite (None: it runs all of it)."""
    if config.option.keyword or config.option.markexpr:
        return "a -k or -m filtered run writes no records"
    suite = pathlib.Path(__file__).resolve().parent
    given = {pathlib.Path(config.invocation_params.dir, arg).resolve() for arg in config.args}
    if given != {suite}:
        return f"records come from the whole suite: run `pytest {suite.name}/`, not {config.args}"
    narrowed = [option for option in ("ignore", "ignore_glob", "deselect")
                if getattr(config.option, option, None)]
    if narrowed:
        return f"a run narrowed by --{narrowed[0].replace('_', '-')} writes no records"
    return None


def _enter_interpreter() -> None:
    """TRITON_INTERPRET is read when a kernel is decorated: it must precede every provider."""
    from libreyolo.kernels.providers import IN_TREE_PROVIDERS

    imported = [m for m in IN_TREE_PROVIDERS if m in sys.modules]
    if imported and os.environ.get("TRITON_INTERPRET") != "1":
        raise pytest.UsageError(f"--interpreter: {imported} were imported compiled already; "
                                "run the interpreter in a fresh process")
    os.environ["TRITON_INTERPRET"] = "1"


def _checked_slots(names: str | None) -> frozenset | None:
    if names is None:
        return None
    from conformance.catalogue import CATALOGUE

    slots = frozenset(n.strip() for n in names.split(",") if n.strip())
    unknown = sorted(slots - set(CATALOGUE))
    if unknown or not slots:
        raise pytest.UsageError(f"--slot: unknown slot(s) {unknown or names!r}; catalogued: "
                                f"{', '.join(CATALOGUE)}")
    return slots


def _checked_impl(name: str | None) -> str | None:
    if name is None:
        return None
    known = all_registered_names()
    if name.strip().lower() not in known:
        raise pytest.UsageError(f"--impl: no implementation is registered under {name!r}; "
                                f"registered: {', '.join(sorted(known))}. An out-of-tree "
                                "package registers when imported: load it with -p PACKAGE")
    return name.strip().lower()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Attribute an implementation the registry disables during a test to that test (a call
    that reached it through `dispatch`), so each later cell of it can say where it failed."""
    from conformance.running import disabled

    before = disabled.snapshot()
    try:
        return (yield)
    finally:
        disabled.note(before, f"test {item.nodeid}")


def pytest_generate_tests(metafunc):
    from conformance.running.plan import cell_plans, error_plans, layout_targets

    run = options(metafunc.config)
    if "cell_plan" in metafunc.fixturenames:
        plans = cell_plans(run)
        metafunc.parametrize("cell_plan", plans, ids=[p.id for p in plans])
    if "layout_target" in metafunc.fixturenames:
        targets = layout_targets(run)
        metafunc.parametrize("layout_target", targets, ids=[":".join(t) for t in targets])
    if "error_plan" in metafunc.fixturenames:
        metafunc.parametrize("error_plan", [pytest.param(p, id=p.id, marks=_known_failure(p))
                                            for p in error_plans(run)])


def _known_failure(plan) -> list:
    """A strict expected failure where the catalogue names the issue that fixes it: the mark
    must go when the fix lands (an unexpected pass fails)."""
    issue = plan.error.failing.get(plan.impl)
    return [pytest.mark.xfail(strict=True, reason=f"issue: {issue}")] if issue else []


def pytest_collection_modifyitems(config, items):
    """Under `--impl` the tests about the whole suite and the in-tree code (`whole_suite`) are
    deselected, not skipped, so the run's counts are about that implementation; a record run
    keeps them (records come from the whole suite)."""
    run = options(config)
    if run.impl is None or run.record:
        return
    kept, suite_only = [], []
    for item in items:
        (suite_only if "whole_suite" in getattr(item, "fixturenames", ()) else kept).append(item)
    if suite_only:
        config.hook.pytest_deselected(items=suite_only)
        items[:] = kept


@pytest.fixture
def run_options(request) -> RunOptions:
    return options(request.config)


@pytest.fixture
def whole_suite(run_options):
    """Tests about the suite itself and the in-tree code, skipped when `--impl` restricts the
    run to one (for example a third party's) implementation."""
    if run_options.impl is not None:
        pytest.skip(f"--impl {run_options.impl}: this run validates that implementation only")


@pytest.fixture
def registered_control(request):
    """A negative control (`request.param`), registered for the test and removed after it."""
    control = request.param
    control.register()
    yield control
    control.unregister()


@pytest.fixture
def control_verdict(request):
    """Report whether a negative control was rejected, and by which cell (the kill rate)."""

    def report(control, rejecting: matrix.Cell | None) -> None:
        request.node.user_properties.append((CONTROL_PROPERTY, json.dumps(
            {"name": control.name, "slot": control.slot, "check": control.check,
             "killed": rejecting is not None, "by": rejecting.case if rejecting else None})))

    return report


@pytest.fixture
def record_cell(request):
    """Attach a cell to this test's report; the controller gathers it into the matrix."""

    def record(cell: matrix.Cell) -> None:
        request.node.user_properties.append((CELL_PROPERTY, cell.to_json()))
        if cell.mode in GPU_MODES:
            request.node.user_properties.append((GPU_PROPERTY, _this_gpu()))

    return record


@functools.cache
def _this_gpu() -> str:
    """The GPU this process runs its CUDA cells on, as JSON (name, UUID, architecture)."""
    import torch

    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return json.dumps({"index": index, "name": props.name,
                       "uuid": str(getattr(props, "uuid", "")),
                       "compute_capability": f"{props.major}.{props.minor}"})


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def matrix_meta(config, cells) -> dict:
    import torch

    run = options(config)
    return {"profile": run.profile.name, "seed": run.seed, "impl": run.impl or "all",
            "modes": ",".join(sorted({c.mode for c in cells})), "torch": torch.__version__,
            "declarations": declared(cells)}


def declared(cells) -> dict:
    """`slot/impl` -> what each implementation in the matrix declared and was held to."""
    from conformance.catalogue import CATALOGUE
    from conformance.schema import declarations

    return {f"{slot}/{impl}": declarations.described(CATALOGUE[slot], impl)
            for slot, impl in sorted({(c.slot, c.impl) for c in cells})}


class Collector:
    """Gathers cells and control verdicts from every report (xdist forwards reports with their
    `user_properties` to the controller), feeds the recorder, prints and writes the matrix."""

    def __init__(self, config, recorder: Recorder | None):
        self.config, self.recorder = config, recorder
        self.cells: list[matrix.Cell] = []
        self.controls: list[dict] = []
        self.gpus: set[str] = set()
        self.outcomes: Counter = Counter()
        self.seconds: Counter = Counter()
        self.collected = 0
        self.started = time.perf_counter()

    def pytest_collection_finish(self, session):
        self.collected = self.collected or len(session.items)
        if self.recorder is not None:
            self.recorder.expect(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        self.collected = self.collected or len(ids)
        if self.recorder is not None:
            self.recorder.expect(ids)

    def pytest_deselected(self, items):
        if items:
            self.recorder = None

    def pytest_runtest_logreport(self, report):
        if isinstance(report, pytest.SubtestReport):  # a child's result: its test counts once
            return
        cells = []
        if report.when == "call":
            for key, value in report.user_properties:
                if key == CELL_PROPERTY:
                    cells.append(matrix.Cell.from_dict(json.loads(value)))
                elif key == CONTROL_PROPERTY:
                    self.controls.append(json.loads(value))
                elif key == GPU_PROPERTY:
                    self.gpus.add(value)
            self.cells.extend(cells)
        self._count(report, cells)
        ended = report.when == "call" or (report.when == "setup" and not report.passed)
        if self.recorder is not None and ended:
            self.recorder.report(report.nodeid, cells, report.duration)

    def _count(self, report, cells) -> None:
        """Test outcomes (a failed setup or teardown is an error) and seconds per slot."""
        if report.when == "call" or (report.when == "setup" and not report.passed):
            outcome = report.outcome if report.when == "call" or report.skipped else "error"
            self.outcomes[outcome] += 1
        elif report.when == "teardown" and report.failed:
            self.outcomes["error"] += 1
        where = cells[0].slot if cells else report.nodeid.split("::")[0]
        self.seconds[where] += report.duration

    def pytest_sessionfinish(self, session, exitstatus):
        cells = matrix.merge(self.cells)
        meta = matrix_meta(self.config, cells)
        if is_plain_gpu_run(self.config):
            self._write_evidence(cells, int(exitstatus))
        if self.config.getoption("matrix"):
            matrix.write(self.config.getoption("matrix"), cells, meta)
        if self.config.getoption("summary"):
            pathlib.Path(self.config.getoption("summary")).write_text(
                matrix.render_markdown(cells, meta))

    def _write_evidence(self, cells, exitstatus: int) -> None:
        outcomes = dict(self.outcomes, collected=self.collected, exitstatus=exitstatus)
        reported = sum(self.outcomes[k] for k in ("passed", "failed", "skipped"))
        if exitstatus not in (0, 1) or reported < self.collected:  # interrupted, cut short
            outcomes["error"] = outcomes.get("error", 0) + max(1, self.collected - reported)
        workers = getattr(self.config.option, "numprocesses", None) or 0
        evidence = plain_run.build(
            cells, self.controls, outcomes, [json.loads(g) for g in self.gpus], self.seconds,
            profile=options(self.config).profile.name, seed=options(self.config).seed,
            workers=int(workers) if str(workers).isdigit() else 0,
            wall_seconds=time.perf_counter() - self.started)
        self.evidence_path = plain_run.write(evidence)

    def pytest_terminal_summary(self, terminalreporter):
        cells = matrix.merge(self.cells)
        if cells:
            terminalreporter.section("conformance matrix")
            terminalreporter.write_line(matrix.render_text(cells))
            terminalreporter.write_line("declared capabilities:")
            for line in matrix.declaration_lines(declared(cells)):
                terminalreporter.write_line(f"  {line}")
        impl = options(self.config).impl
        if impl is not None:
            terminalreporter.write_line(f"--impl {impl}: {matrix.count_line(cells)}")
        if options(self.config).record:
            self._summarize_records(terminalreporter)
        if self.controls:
            self._summarize_controls(terminalreporter)
        if getattr(self, "evidence_path", None) is not None:
            terminalreporter.write_line(f"plain GPU run: evidence written to "
                                        f"{self.evidence_path}")

    def _summarize_records(self, tr):
        tr.section("parity records")
        if self.recorder is None:
            tr.write_line(f"none written: {_record_refusal(self.config) or 'tests deselected'}")
            return
        for path in self.recorder.written:
            tr.write_line(f"wrote {path}")
        for failure in self.recorder.failed:
            tr.write_line(f"FAILED to write: {failure}")
        for slot, impl in sorted(self.recorder.pending):
            tr.write_line(f"NOT written (incomplete): {slot}/{impl}")

    def _summarize_controls(self, tr):
        tr.section("negative controls")
        for c in sorted(self.controls, key=lambda c: c["name"]):
            verdict = f"rejected by {c['check']} on {c['by']}" if c["killed"] else "SURVIVED"
            tr.write_line(f"{c['slot']:<28} {c['name']:<36} {verdict}")
        killed = sum(c["killed"] for c in self.controls)
        tr.write_line(f"kill rate: {killed}/{len(self.controls)} "
                      f"({100 * killed / len(self.controls):.0f}%)")

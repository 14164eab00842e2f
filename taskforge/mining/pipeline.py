"""Mine feature-removal tasks from one repository.

    fetch ─► environment ─► index (libcst)
          ─► baseline: the suite in new interpreters under different hash seeds (the first under
             coverage), then once in the fork server, kept only if it agrees: stable passing tests
          ─► candidates (index ∩ coverage, ranked)
          ─► for each candidate, in one warm container:
               remove (agent) ─► affected tests at start+test_patch, `repeats` times: which fail
               ─► hide them ─► full suite once at the start state: everything else passes
               ─► diffs (patch, test_patch, removal_patch); gold must give back the original
               ─► problem statement, checked for leaked code
               ─► start state: scrubbed, a fresh one-commit repository ─► audit it for
                  remnants of the removed code
               ─► the scorer's verdict, in a fresh container: gold 1.0, empty patch 0.0
          ─► in batches, the environment image audited for the tasks' remnants; until
             ``max_tasks`` tasks passed every check ─► Task rows

``mine_repository`` is a plain function: the CLI calls it directly, and the Ray orchestration
calls the same function in its workers. A failure of the whole repository raises a
``TaskforgeError``; a failed candidate is recorded as a rejection with its reason and a detail.
"""

from __future__ import annotations

import gc
import hashlib
import json
import re
import secrets
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from taskforge import __version__
from taskforge.errors import TaskforgeError, TestRunError
from taskforge.llm.client import LLMConfig
from taskforge.mining.audit.fingerprint import Fingerprint, interface_names
from taskforge.mining.audit.scan import (
    IMAGE_ROOTS,
    AuditResult,
    audit_task_state,
    scan_image,
)
from taskforge.mining.candidates import Candidate, CandidateConfig, find_candidates
from taskforge.mining.hiding import ClassIndex, hide_tests
from taskforge.mining.removal.cst import Removal, RemovalAgent, load_agent
from taskforge.mining.statements.template import (
    StatementContext,
    leaked_lines,
    load_writer,
    removed_symbols,
)
from taskforge.repo.environment import Environment, build_environment
from taskforge.repo.patches import StateTrees
from taskforge.repo.sources import Snapshot, fetch
from taskforge.repo.startstate import is_scrubbed, scrub_changes, write_start_state
from taskforge.repo.suite import RunResult, SuiteRunner, require_test_files
from taskforge.repo.symbols import SymbolIndex, build_index
from taskforge.repo.testfiles import TestLayout
from taskforge.sandbox import SandboxBackend, SandboxLimits
from taskforge.sandbox.base_image import BaseImage
from taskforge.task import Task, TaskScorer, is_ambiguous_doctest_id, is_doctest_id

__all__ = ["MineConfig", "Rejected", "RepoResult", "Task", "mine_repository"]

_CONTINUE = ("--continue-on-collection-errors",)
_TRACEBACKS = ("auto", "long", "short", "line", "native", "no")


def _tb(config: MineConfig) -> tuple[str, ...]:
    return () if config.tracebacks is None else (f"--tb={config.tracebacks}",)


@dataclass(kw_only=True, slots=True)
class MineConfig:
    """How to mine one repository."""

    max_tasks: int = 10
    """Stop after this many valid tasks."""
    max_attempts: int = 60
    """Validate at most this many candidates."""
    seed: int = 0
    """Seed for the candidate ranking."""
    repeats: int = 2
    """How often each failing-test check runs; any disagreement rejects the candidate."""
    baseline_runs: int = 3
    """Runs of the unmodified suite, each in a new interpreter under its own hash seed; only tests
    that pass in all of them (and in one run in the fork server) are used."""
    visible_tests: bool = False
    """Keep the FAIL_TO_PASS tests in the start state instead of hiding them."""
    timeout_s: float = 1800.0
    """Wall-clock limit of one test run."""
    agent: str = "libcst"
    """Removal agent (taskforge.mining.removal.cst.REMOVAL_AGENTS)."""
    writer: str = "template"
    """Problem statement writer (taskforge.mining.statements.template.STATEMENT_WRITERS)."""
    llm: LLMConfig = field(default_factory=LLMConfig)
    """The endpoint and budgets of the ``llm`` agent and writer (recipe: ``[llm]``)."""
    keep_flagged: bool = False
    """Keep tasks whose audit found remnants of the removed code (marked in ``audit``) instead of rejecting them."""
    tracebacks: str | None = None
    """pytest's ``--tb`` in the validation runs (None: as the project configures pytest).
    Validation reads each test's outcome and the first line of its message, which the JUnit report
    gives the same in every style, so ``line`` loses nothing it uses, only the long tracebacks that
    help a person see why a candidate failed; and those cost more CPU than the failing tests
    themselves (cachetools' suite with ``TTLCache.expire`` removed, 55 tests failing: 6.2 s of
    CPU with ``auto``, 2.2 s with ``line``)."""
    candidates: CandidateConfig = field(default_factory=CandidateConfig)

    def __post_init__(self) -> None:
        for name in ("max_tasks", "max_attempts", "repeats", "baseline_runs"):
            if getattr(self, name) < 1:
                raise ValueError(f"MineConfig.{name} must be at least 1, got {getattr(self, name)}")
        if self.timeout_s <= 0:
            raise ValueError(f"MineConfig.timeout_s must be positive, got {self.timeout_s}")
        if self.tracebacks is not None and self.tracebacks not in _TRACEBACKS:
            raise ValueError(f"MineConfig.tracebacks must be one of {', '.join(_TRACEBACKS)}, got {self.tracebacks!r}")
        if "llm" in (self.agent, self.writer) and not self.llm.model:
            raise ValueError("llm.model must name the model when the agent or the writer is llm")


@dataclass(kw_only=True, slots=True)
class RepoResult:
    """What mining one repository gave."""

    source: str
    tasks: list[Task] = field(default_factory=list)
    candidates: int = 0
    attempted: int = 0
    rejections: Counter[str] = field(default_factory=Counter)
    """Rejected candidates by reason."""
    rejected: list[dict[str, str]] = field(default_factory=list)
    """Every rejected candidate: its target, strategy, reason and detail."""
    stage_s: dict[str, float] = field(default_factory=dict)
    runs: int = 0
    containers: int = 0
    tests: int = 0
    """Tests the baseline's first run reported."""
    passing: int = 0
    """Tests that passed in every baseline run."""
    seed_dependent: int = 0
    """Tests whose id or outcome differed between baseline runs under different hash seeds."""
    fork_server: str = ""
    """Whether validation runs forked from a server (``used``), and why not otherwise."""

    def reject(self, target: str, strategy: str, rejected: Rejected) -> None:
        self.rejections[rejected.reason] += 1
        self.rejected.append({"target": target, "strategy": strategy, "reason": rejected.reason,
                              "detail": rejected.detail})


@dataclass(frozen=True, kw_only=True, slots=True)
class _Baseline:
    passing: tuple[str, ...]
    """Tests that passed in every baseline run."""
    tests: tuple[str, ...]
    """Every test of the first baseline run, whatever its outcome."""
    coverage: dict[str, dict[str, list[int]]]
    importable: tuple[str, ...]
    """Package modules that import at baseline (the import check after a removal uses these)."""
    seed_dependent: tuple[str, ...] = ()
    """Tests whose node id or outcome differed between runs under different hash seeds: in
    neither FAIL_TO_PASS nor PASS_TO_PASS."""
    fork_server: str = ""
    """Whether the repository's later runs fork from a server: ``used``, ``not used: WHY``, or
    ``fallback: WHY`` (its run disagreed with the new interpreters')."""


class _Stages:
    def __init__(self, result: RepoResult) -> None:
        self.result = result

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.result.stage_s[name] = self.result.stage_s.get(name, 0.0) + time.monotonic() - started


def _failing(run: RunResult, tests: Sequence[str]) -> set[str]:
    """Of ``tests``, those that did not pass: failed, errored, skipped, or missing (their module failed to collect)."""
    return {t for t in tests if t not in run.results or run.results[t].outcome != "passed"}


def _uncollectable(run: RunResult, tests: Sequence[str]) -> set[str]:
    """Of ``tests``, those in modules (or classes) that failed to collect in ``run``."""
    locations = [e.location for e in run.collection_errors]
    return {t for t in tests if any(t.startswith(f"{loc}::") for loc in locations)}


def _hash_seeds(count: int) -> list[int]:
    """``count`` different PYTHONHASHSEED values, new on every call: a test that depends on the
    seed should meet seeds it has not met before."""
    seeds: list[int] = []
    while len(seeds) < count:
        seed = secrets.randbelow(4_294_967_295) + 1
        if seed not in seeds:
            seeds.append(seed)
    return seeds


def _agreed(runs: Sequence[RunResult]) -> dict[str, str]:
    """node id -> outcome of the tests every run has, with the same outcome in all."""
    first, *rest = runs
    return {t: r.outcome for t, r in first.results.items()
            if all(t in other.results and other.results[t].outcome == r.outcome for other in rest)}


def _fork_disagreement(forked: RunResult, agreed: Mapping[str, str]) -> str:
    """Why the fork server's run of the unmodified suite cannot stand in for a new interpreter's
    (empty when it can): it did not run, or a test the new interpreters agree on differs."""
    if forked.status not in ("ok", "tests_failed"):
        tail = (forked.output_tail.strip().splitlines() or [""])[-1][:200]
        return f"the suite {forked.status.replace('_', ' ')} in the fork server: {tail}"
    differ = [t for t, outcome in agreed.items()
              if t not in forked.results or forked.results[t].outcome != outcome]
    if differ:
        seen = forked.results[differ[0]].outcome if differ[0] in forked.results else "missing"
        return (f"{len(differ)} test(s) differ from new interpreters' runs (first: {differ[0]}: "
                f"{agreed[differ[0]]} in new interpreters, {seen} in the fork server)")
    return ""


def _baseline(runner: SuiteRunner, index: SymbolIndex, runs: int, result: RepoResult, layout: TestLayout) -> _Baseline:
    """The unmodified suite, ``runs`` times, each in a new interpreter under its own hash seed (the
    first under coverage); then once in the fork server, which the repository keeps only if that
    run agrees with them (otherwise every later run starts a new interpreter).

    A test whose node id or outcome is not the same in every run is seed-dependent (or flaky): it
    joins neither list, and neither do the other parametrizations of its function. Parametrizations
    over a ``set`` get ids in the set's order (``expected3``), so their ids differ from seed to seed.
    """
    seeds = _hash_seeds(runs)
    fresh = [runner.run(coverage=True, imports=sorted(index.modules), env={"PYTHONHASHSEED": str(seeds[0])})]
    fresh += [runner.run(env={"PYTHONHASHSEED": str(seed)}, fork_server=False) for seed in seeds[1:]]
    result.runs += runs
    for run in fresh:
        if run.status not in ("ok", "tests_failed"):
            detail = run.collection_errors[0].message if run.collection_errors else run.output_tail.strip()[-200:]
            raise TestRunError(f"the baseline suite of {runner.snapshot.source} did not run ({run.status}): {detail}",
                               reason=f"baseline_{run.status}")
    agreed = _agreed(fresh)
    fork_server = "not used: off for this run"
    if runner.fork_server:
        forked = runner.run()
        result.runs += 1
        if forked.interpreter == "fork":
            why = _fork_disagreement(forked, agreed)
            if why:
                runner.fork_server = False
                fork_server = f"fallback: {why}"
            else:
                fork_server = "used"
                fresh.append(forked)  # one more hash seed, the server's
        else:  # no server would serve (pytest imports the code under test): one more new interpreter
            fork_server = f"not used: {forked.interpreter}"
            fresh.append(forked)
        agreed = _agreed(fresh)
    seen = set().union(*(run.results for run in fresh))
    # The parametrizations of one test function come from one parametrize call: if some of their
    # ids differ between seeds, the others only matched by chance (a set's order kept one element
    # at the same index), and another seed moves them too.
    unsettled = {_test_function(t) for t in seen - set(agreed)}
    seed_dependent = {t for t in seen if _test_function(t) in unsettled}
    first = fresh[0]
    # What the scorer, reading ids alone, could take for a test or a doctest either way: in neither list.
    ambiguous = {t for t in first.results
                 if is_ambiguous_doctest_id(t, test_module=bool(layout.test_modules([t.split("::", 1)[0]])))}
    return _Baseline(
        passing=tuple(t for t in first.results
                      if agreed.get(t) == "passed" and t not in seed_dependent and t not in ambiguous),
        tests=tuple(first.results),
        coverage=first.coverage or {},
        importable=tuple(m for m in sorted(index.modules) if m not in first.import_errors),
        seed_dependent=tuple(sorted(seed_dependent)),
        fork_server=fork_server,
    )


def _test_function(nodeid: str) -> str:
    """The node id without its parametrization: ``f.py::test_x[a-1]`` is ``f.py::test_x``."""
    return nodeid.split("[", 1)[0]


@dataclass(frozen=True, slots=True)
class Rejected:
    """Why a candidate did not become a task: a reason from a fixed vocabulary, and a detail that
    says what exactly (the first failing test and its message, the audit's file and match)."""

    reason: str
    detail: str = ""


def _first_failure(run: RunResult, tests: Sequence[str]) -> str:
    """``node id: outcome: message`` of the first of ``tests`` that did not pass in ``run``."""
    for test in tests:
        result = run.results.get(test)
        if result is None:
            return f"{test}: missing"
        if result.outcome != "passed":
            return f"{test}: {result.outcome}" + (f": {result.message}" if result.message else "")
    return ""


def _run_detail(run: RunResult) -> str:
    """The most telling line of a run that did not get to report its tests."""
    if run.collection_errors:
        error = run.collection_errors[0]
        return f"{error.location}: {error.message}"
    if run.limits_hit:
        return f"hit the sandbox's {', '.join(run.limits_hit)} limit"
    lines = run.output_tail.strip().splitlines()
    return lines[-1][:300] if lines else f"exit code {run.exit_code}"


@dataclass(frozen=True, kw_only=True, slots=True)
class _Context:
    """What every candidate of one repository is validated against."""

    snapshot: Snapshot
    env: Environment
    index: SymbolIndex
    baseline: _Baseline
    agent: RemovalAgent
    config: MineConfig
    scrubbed: dict[str, str | None]
    """Tracked files the start state leaves out (taskforge.repo.startstate), as deletions."""
    work_dir: Path
    """Where start states are written."""
    tests: ClassIndex
    """The repository's test files, parsed once for every candidate's hidden tests."""
    layout: TestLayout
    """Which files are tests: the project's pytest configuration, asked of pytest."""
    interfaces: frozenset[str]
    """Names the environment's dependencies define (taskforge.mining.audit.fingerprint.interface_names)."""
    scorer: TaskScorer
    """The verdict every task must get before it is written: gold 1.0, the empty patch 0.0."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Checked:
    """A candidate that passed every check: what the task row is made of."""

    fail_to_pass: list[str]
    pass_to_pass: list[str]
    hidden: list[str]
    start_changes: dict[str, str | None]
    timings: dict[str, list[float]]


@dataclass(frozen=True, kw_only=True, slots=True)
class _Decided:
    """What the failing-test runs decided: FAIL_TO_PASS, the doctests that failed with them (in
    neither list: the candidate writes their module), and the start state's changes."""

    fail_to_pass: list[str]
    failing_doctests: frozenset[str]
    start_changes: dict[str, str | None]


def _remove(candidate: Candidate, ctx: _Context) -> tuple[Removal, dict[str, str | None]] | Rejected:
    """The removal and its file changes, or why there is none."""
    try:
        removal = ctx.agent.remove(ctx.snapshot.path, ctx.index, target=candidate.target, strategy=candidate.strategy)
    except TaskforgeError as err:
        return Rejected(err.reason, str(err))
    changes = dict(removal.files)
    touched = [path for path in changes if ctx.layout.is_test_file(path)]
    if touched:
        return Rejected("removal_touches_tests", f"the removal changes test file {touched[0]}")
    return removal, changes


def _hide(fail_to_pass: Sequence[str], ctx: _Context) -> dict[str, str | None] | Rejected:
    if ctx.config.visible_tests:
        return {}
    try:
        return hide_tests(ctx.snapshot.path, fail_to_pass, index=ctx.tests)
    except TaskforgeError as err:
        return Rejected(err.reason, str(err))


def _start_state(
    failing_sets: Sequence[set[str]], broken_modules: set[str], changes: dict[str, str | None], ctx: _Context
) -> _Decided | Rejected:
    """FAIL_TO_PASS (failing in every repeat) and the start state's changes, or a rejection.

    Tests of modules that no longer collect are hidden along with FAIL_TO_PASS, whatever their
    baseline outcome, so that the file goes as a whole. Doctests are never FAIL_TO_PASS: they live
    in the source the candidate writes, so a candidate could pass them by rewriting them.
    """
    if any(s != failing_sets[0] for s in failing_sets[1:]):
        differ = sorted(failing_sets[0].symmetric_difference(*failing_sets[1:]))
        return Rejected("flaky_fail_to_pass", f"{len(differ)} test(s) failed in some repeats only (first: {differ[0]})")
    doctests = frozenset(t for t in failing_sets[0] if is_doctest_id(t))
    fail_to_pass = sorted(failing_sets[0] - doctests)
    if not fail_to_pass:
        what = f" but {len(doctests)} doctest(s)" if doctests else ""
        return Rejected("no_failing_tests", f"no test failed with the feature removed{what}")
    hidden_changes = _hide(sorted(set(fail_to_pass) | broken_modules), ctx)
    if isinstance(hidden_changes, Rejected):
        return hidden_changes
    return _Decided(fail_to_pass=fail_to_pass, failing_doctests=doctests,
                    start_changes={**changes, **hidden_changes, **ctx.scrubbed})


def _check_start(start: RunResult, decided: _Decided, ctx: _Context) -> tuple[list[str], list[str]] | Rejected:
    """(PASS_TO_PASS, hidden tests) if the start state holds, else a rejection."""
    fail_to_pass = decided.fail_to_pass
    if start.status not in ("ok", "tests_failed"):
        return Rejected(f"start_state_{start.status}", _run_detail(start))
    present = set(start.results)
    if ctx.config.visible_tests:
        passing = set(fail_to_pass) - _failing(start, fail_to_pass)
        if passing:
            return Rejected("fail_to_pass_passes_at_start", f"{sorted(passing)[0]} passes at the start state")
    elif set(fail_to_pass) & present:
        return Rejected("hidden_test_still_visible", f"{sorted(set(fail_to_pass) & present)[0]} still runs at the start state")
    pass_to_pass = sorted(t for t in ctx.baseline.passing
                          if t in present and t not in fail_to_pass and t not in decided.failing_doctests)
    if _failing(start, pass_to_pass):
        return Rejected("breaks_other_tests", _first_failure(start, pass_to_pass))
    hidden = sorted(t for t in set(ctx.baseline.passing) - present if not is_doctest_id(t))
    return pass_to_pass, hidden


def _check_fast(
    candidate: Candidate, changes: dict[str, str | None], removal: Removal, ctx: _Context, runner: SuiteRunner, result: RepoResult
) -> _Checked | Rejected:
    """Affected tests first, `repeats` times (in one exec), in the warm container; then the full
    suite once.

    When the full run shows tests that the removal breaks but coverage did not tie to the feature
    (a test module that imports it, a test that reaches it through a subprocess), they join the
    affected tests and the checks run once more, instead of the candidate being rejected.
    """
    timings: dict[str, list[float]] = {"affected_s": [], "start_state_s": []}
    importable = [m for m in ctx.baseline.importable if m not in _removed_modules(candidate)]
    tests = list(candidate.tests)
    for round_ in range(2):
        failing_sets: list[set[str]] = []
        broken_modules: set[str] = set()
        runs = runner.run_repeated(
            repeats=ctx.config.repeats,
            changes=changes,
            select=tests,
            imports=importable if round_ == 0 else (),
            extra_args=(*_CONTINUE, *_tb(ctx.config)),
        )
        for run in runs:
            result.runs += 1
            timings["affected_s"].append(round(run.duration_s, 3))
            if run.import_errors:
                return _import_rejection(run)
            if run.status in ("timeout", "oom", "crashed"):
                return Rejected(f"affected_{run.status}", _run_detail(run))
            # A test module that no longer imports fails every test in it, selected or not.
            failing_sets.append(_failing(run, tests) | _uncollectable(run, ctx.baseline.passing))
            broken_modules = _uncollectable(run, ctx.baseline.tests)
        decided = _start_state(failing_sets, broken_modules, changes, ctx)
        if isinstance(decided, Rejected):
            return decided
        start = runner.run(changes=decided.start_changes, extra_args=_tb(ctx.config))
        result.runs += 1
        timings["start_state_s"].append(round(start.duration_s, 3))
        verdict = _check_start(start, decided, ctx)
        if not isinstance(verdict, Rejected):
            pass_to_pass, hidden = verdict
            return _Checked(fail_to_pass=decided.fail_to_pass, pass_to_pass=pass_to_pass, hidden=hidden,
                            start_changes=decided.start_changes, timings=timings)
        if round_ == 1 or verdict.reason not in ("breaks_other_tests", "start_state_collection_errors"):
            return verdict
        missed = {t for t, r in start.results.items() if r.outcome != "passed" and t in ctx.baseline.passing}
        missed |= _uncollectable(start, ctx.baseline.passing)
        if not missed - set(tests):
            return verdict
        tests = sorted(set(tests) | missed)
    raise AssertionError("unreachable: the second round always returns")


def _import_rejection(run: RunResult) -> Rejected:
    module, error = next(iter(sorted(run.import_errors.items())))
    return Rejected("package_import_failed", f"{module}: {error}")


def _check_naive(
    candidate: Candidate, changes: dict[str, str | None], removal: Removal, ctx: _Context, backend: SandboxBackend,
    limits: SandboxLimits | None, result: RepoResult,
) -> _Checked | Rejected:
    """The reference: each of the four checks (imports, FAIL_TO_PASS, PASS_TO_PASS, gold) in a
    fresh container, on the full suite, `repeats` times.

    It decides exactly what ``_check_fast`` decides, without its shortcuts; the mining benchmark
    measures the fast path against it.
    """
    timings: dict[str, list[float]] = {"full_s": []}

    def fresh(state: dict[str, str | None], **kwargs: Any) -> RunResult:
        with SuiteRunner(ctx.snapshot, ctx.env, backend=backend, limits=limits, timeout_s=ctx.config.timeout_s,
                         fork_server=False) as runner:
            run = runner.run(changes=state, extra_args=(*_CONTINUE, *_tb(ctx.config)), **kwargs)
        result.runs += 1
        result.containers += 1
        timings["full_s"].append(round(run.duration_s, 3))
        return run

    importable = [m for m in ctx.baseline.importable if m not in _removed_modules(candidate)]
    for _ in range(ctx.config.repeats):  # check 1: the package imports
        imported = fresh(changes, imports=importable, pytest=False)
        if imported.import_errors:
            return _import_rejection(imported)
    failing_sets: list[set[str]] = []
    broken_modules: set[str] = set()
    for _ in range(ctx.config.repeats):  # check 2: FAIL_TO_PASS fail at start + test_patch
        run = fresh(changes)
        if run.status in ("timeout", "oom", "crashed"):
            return Rejected(f"affected_{run.status}", _run_detail(run))
        failing_sets.append(_failing(run, ctx.baseline.passing))
        broken_modules = _uncollectable(run, ctx.baseline.tests)
    decided = _start_state(failing_sets, broken_modules, changes, ctx)
    if isinstance(decided, Rejected):
        return decided
    # check 3: PASS_TO_PASS pass at the start state; check 4: gold passes everything
    verdicts = [_check_start(fresh(decided.start_changes), decided, ctx) for _ in range(ctx.config.repeats)]
    for verdict in verdicts:
        if isinstance(verdict, Rejected):
            return verdict
    for _ in range(ctx.config.repeats):
        gold = fresh({})
        if _failing(gold, ctx.baseline.passing):
            return Rejected("gold_fails", _first_failure(gold, ctx.baseline.passing))
    pass_to_pass, hidden = verdicts[0]  # type: ignore[misc]
    return _Checked(fail_to_pass=decided.fail_to_pass, pass_to_pass=pass_to_pass, hidden=hidden,
                    start_changes=decided.start_changes, timings=timings)


def _make_task(candidate: Candidate, removal: Removal, checked: _Checked, ctx: _Context) -> Task | Rejected:
    """Diffs, the gold check, the statement and its leak check: the task row (start state and
    audit still to come), or a rejection."""
    snapshot = ctx.snapshot
    start_changes = checked.start_changes
    changed = sorted(set(start_changes) | set(ctx.scrubbed))
    with StateTrees(snapshot.path) as trees:
        start, gold = trees.tree(start_changes), trees.tree(ctx.scrubbed)
        removal_patch = trees.diff(trees.tree({}), start, sorted(start_changes)) if start_changes else ""
        # Gold puts the code back, not the scrubbed leftovers.
        source_paths = [p for p in changed if not ctx.layout.is_test_file(p) and not is_scrubbed(p)]
        test_paths = [p for p in changed if ctx.layout.is_test_file(p)]
        patch = trees.diff(start, gold, source_paths) if source_paths else ""
        test_patch = trees.diff(start, gold, test_paths) if test_paths else ""
        if trees.apply(start, patch + test_patch) != gold:
            return Rejected("gold_does_not_restore", "start state + patch + test_patch is not the original tree")
    writer = load_writer(ctx.config.writer, **({"llm": ctx.config.llm} if ctx.config.writer == "llm" else {}))
    module_path = ctx.index.modules.get(candidate.target) or ctx.index.symbols[candidate.target].path
    symbols = [ctx.index.symbols[q] for q in removal.removed if q in ctx.index.symbols]
    context = StatementContext(
        repo=snapshot.name,
        strategy=candidate.strategy,
        target=candidate.target,
        module_path=module_path,
        symbols=removed_symbols(symbols, removal.removed),
        # The tests coverage tied to the feature say what it does; others may only have
        # failed because their module imports it.
        hidden_tests=tuple(t for t in checked.fail_to_pass if t in candidate.tests) or tuple(checked.fail_to_pass),
        removed_code=removal.removed_code,
    )
    try:
        statement = writer.write(context)
    except TaskforgeError as err:  # an LLM writer's endpoint failed, or its model kept quoting the code
        return Rejected(err.reason, str(err))
    leaked = leaked_lines(statement, removal.removed_code)
    if leaked:
        return Rejected("statement_leaks_code", f"the statement quotes {leaked[0]!r}")
    lines_removed = sum(1 for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++"))
    digest = hashlib.sha256("\0".join([snapshot.commit, candidate.strategy, candidate.target, removal_patch]).encode())
    slug = re.sub(r"[^A-Za-z0-9]+", "-", candidate.target.replace(":", ".")).strip("-")[-60:]
    instance_id = f"{snapshot.name}__{candidate.strategy}-{slug}-{digest.hexdigest()[:10]}"

    return Task(
        instance_id=instance_id,
        repo=snapshot.name,
        source=snapshot.source,
        base_commit="",  # set by _scrub_and_audit
        source_commit=snapshot.commit,
        version=snapshot.version or snapshot.commit[:12],
        strategy=candidate.strategy,
        target=candidate.target,
        removed=tuple(removal.removed),
        patch=patch,
        test_patch=test_patch,
        removal_patch=removal_patch,
        problem_statement=statement,
        FAIL_TO_PASS=tuple(checked.fail_to_pass),
        PASS_TO_PASS=tuple(checked.pass_to_pass),
        hidden_tests=tuple(checked.hidden),
        image_name=ctx.env.image,
        environment=json.dumps(ctx.env.to_json(), sort_keys=True),
        lines_removed=lines_removed,
        validation=json.dumps(
            {"repeats": ctx.config.repeats, "predicted_tests": len(candidate.tests), "agent": ctx.agent.name,
             "writer": writer.name, "test_layout": ctx.layout.to_json(), **checked.timings,
             **({"agent_trajectory": removal.trajectory} if removal.trajectory is not None else {})},
            sort_keys=True,
        ),
        audit="",  # set by _scrub_and_audit
        seed=ctx.config.seed,
        taskforge_version=__version__,
    )


def _finding_detail(findings: Sequence[Mapping[str, Any]]) -> str:
    """``path (channel): match`` of the first finding, and how many more there are."""
    first = findings[0]
    more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
    return f"{first.get('path', '?')} ({first.get('kind', '?')}): {first.get('match', '')}"[:400] + more


def _scrub_and_audit(task: Task, checked: _Checked, ctx: _Context) -> tuple[Task, Fingerprint] | Rejected:
    """Write the scrubbed one-commit start state and audit it: the task with its ``base_commit``
    and ``audit``, and the fingerprint for the image scan; or a rejection."""
    start_dir = ctx.work_dir / task.instance_id
    base_commit = write_start_state(ctx.snapshot, checked.start_changes, start_dir)
    fingerprint, audit = audit_task_state(source_dir=ctx.snapshot.path, start_dir=start_dir,
                                          start_changes=checked.start_changes, strategy=task.strategy,
                                          test_ids=checked.fail_to_pass, interfaces=ctx.interfaces)
    if fingerprint.empty:  # nothing distinctive was removed: no audit could vouch for it
        return Rejected("audit_empty_fingerprint", "the removed code holds nothing distinctive to search for")
    if not audit.clean and not ctx.config.keep_flagged:
        return Rejected("audit_findings", _finding_detail(audit.findings))
    return replace(task, base_commit=base_commit, audit=audit.to_json()), fingerprint


def _gate(task: Task, ctx: _Context) -> Rejected | None:
    """The verdict ``taskforge score`` will give, through the scorer itself: a fresh container, a
    new interpreter, a random hash seed. Gold must score 1.0 and the empty patch 0.0.

    The empty patch runs FAIL_TO_PASS alone (``tests="fail_to_pass"``): the binary reward is 0
    exactly when one of them fails, whatever PASS_TO_PASS do, and the gold run has just shown
    PASS_TO_PASS pass."""
    gold = ctx.scorer.score(task, task.patch)
    if gold.status != "ok" or gold.reward != 1.0:
        failed = next((f"{t}: {o}" for t, o in {**gold.fail_to_pass, **gold.pass_to_pass}.items() if o != "passed"), "")
        if gold.status != "ok":
            return Rejected(f"scorer_{gold.status}", f"gold: {gold.detail}" + (f" (first: {failed})" if failed else ""))
        return Rejected("gold_scores_0", failed or gold.detail)
    empty = ctx.scorer.score(task, "", tests="fail_to_pass")
    if empty.status != "ok":
        return Rejected(f"scorer_{empty.status}", f"empty patch: {empty.detail}")
    if all(outcome == "passed" for outcome in empty.fail_to_pass.values()):
        return Rejected("empty_patch_scores_1",
                        f"every FAIL_TO_PASS test ({len(empty.fail_to_pass)}) passes without the feature")
    return None


def _audit_image(
    tasks: list[Task], fingerprints: Mapping[str, Fingerprint], ctx: _Context, *, runner: SuiteRunner,
    backend: SandboxBackend, limits: SandboxLimits | None, naive: bool, result: RepoResult,
) -> list[Task]:
    """One scan of the environment image for every task's fingerprint, in the warm container (with
    ``naive``, one scan per task in a fresh container); the findings join each task's audit, and
    flagged tasks are rejected unless ``keep_flagged``. The tasks that pass."""
    if not tasks:
        return tasks
    if naive:  # the reference shares nothing between candidates: a fresh container per task
        scans = {}
        for task in tasks:
            with backend.start(ctx.env.image, limits=limits or SandboxLimits.load(),
                               labels={"taskforge.role": "audit"}) as box:
                scans[task.instance_id] = scan_image({task.instance_id: fingerprints[task.instance_id]}, sandbox=box)
    else:
        # The warm container's /tmp holds taskforge's tools; an agent's /tmp starts empty.
        roots = [root for root in IMAGE_ROOTS if root != "/tmp"]
        findings, totals = scan_image({t.instance_id: fingerprints[t.instance_id] for t in tasks},
                                      sandbox=runner.sandbox(), roots=roots)
        share = {**totals, "seconds": totals["seconds"] / len(tasks)}
        scans = {task.instance_id: ({task.instance_id: findings[task.instance_id]}, share) for task in tasks}
    kept = []
    for task in tasks:
        found, totals = scans[task.instance_id]
        audit = AuditResult(**{k: v for k, v in json.loads(task.audit).items() if k not in ("clean", "image_scanned")})
        audit.findings += found[task.instance_id]
        audit.files += totals["files"]
        audit.bytes += totals["bytes"]
        audit.seconds += totals["seconds"]
        audit.image_scanned = True
        if audit.clean or ctx.config.keep_flagged:
            kept.append(replace(task, audit=audit.to_json()))
        else:
            result.reject(task.target, task.strategy, Rejected("audit_findings", _finding_detail(audit.findings)))
    return kept


def _removed_modules(candidate: Candidate) -> set[str]:
    return {candidate.target} if candidate.strategy == "module" else set()


def mine_repository(
    source: str,
    *,
    config: MineConfig,
    backend: SandboxBackend,
    base: BaseImage,
    scorer: TaskScorer,
    limits: SandboxLimits | None = None,
    on_candidate: Callable[[RepoResult], None] | None = None,
    naive: bool = False,
) -> RepoResult:
    """Mine up to ``config.max_tasks`` valid tasks from ``source``.

    ``scorer`` (a ``taskforge.scoring.scorer.Scorer``, passed in so that mining never imports scoring)
    gives each task, before it is kept, the verdict ``taskforge score`` will give: the gold patch
    must score 1.0 and the empty patch 0.0, in a fresh container and a new interpreter.

    ``naive`` validates with the reference checks (``_check_naive``) and audits each task's image in a
    fresh container of its own, sharing nothing between candidates: the benchmark's baseline.
    """
    with _fewer_collections():
        return _mine_repository(source, config=config, backend=backend, base=base, limits=limits,
                                on_candidate=on_candidate, naive=naive, scorer=scorer)


_GC_THRESHOLDS = (20_000, 50, 50)
"""Mining allocates millions of short-lived objects (libcst trees, tokens, ast nodes) next to a
large long-lived symbol index: at the default thresholds the cyclic collector ran 1,900 times in
one repository's mining and took a fifth of the host's CPU time re-scanning the index; at these it
runs a few dozen times."""


@contextmanager
def _fewer_collections() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(*_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


def _mine_repository(
    source: str, *, config: MineConfig, backend: SandboxBackend, base: BaseImage, limits: SandboxLimits | None,
    on_candidate: Callable[[RepoResult], None] | None, naive: bool, scorer: TaskScorer,
) -> RepoResult:
    result = RepoResult(source=source)
    stage = _Stages(result)
    with stage("fetch"):
        snapshot = fetch(source)
        require_test_files(snapshot)
    with stage("environment"):
        env = build_environment(snapshot, backend=backend, base=base)
    with SuiteRunner(snapshot, env, backend=backend, limits=limits, timeout_s=config.timeout_s) as runner:
        with stage("index"):
            layout = runner.layout()  # where the project's pytest configuration puts its tests
            index = build_index(snapshot.path, package_paths=env.package_paths, layout=layout)
            interfaces = interface_names(env.wheelhouse, own=env.package_paths)
        # The LLM agent's run_tests tool runs in the warm container too.
        ctx_agent = load_agent(config.agent, **({"llm": config.llm, "runner": runner} if config.agent == "llm" else {}))
        with stage("baseline"):
            baseline = _baseline(runner, index, config.baseline_runs, result, layout)
        result.tests, result.passing = len(baseline.tests), len(baseline.passing)
        result.seed_dependent = len(baseline.seed_dependent)
        result.fork_server = baseline.fork_server
        with stage("discover"):
            candidates = find_candidates(
                snapshot.path, index, baseline.coverage, baseline.passing, config=config.candidates, seed=config.seed
            )
        result.candidates = len(candidates)
        work = tempfile.TemporaryDirectory(prefix="taskforge-start-")
        ctx = _Context(snapshot=snapshot, env=env, index=index, baseline=baseline, agent=ctx_agent, config=config,
                       scrubbed=scrub_changes(snapshot), work_dir=Path(work.name), tests=ClassIndex(snapshot.path, layout=layout),
                       layout=layout,
                       scorer=scorer, interfaces=interfaces)
        with work:
            _mine_candidates(candidates[: config.max_attempts], ctx, runner=runner, backend=backend, limits=limits,
                             naive=naive, result=result, on_candidate=on_candidate)
        result.containers += runner.containers_started
    return result


def _mine_candidates(
    candidates: Sequence[Candidate], ctx: _Context, *, runner: SuiteRunner, backend: SandboxBackend,
    limits: SandboxLimits | None, naive: bool, result: RepoResult, on_candidate: Callable[[RepoResult], None] | None,
) -> None:
    """Validate candidates until ``max_tasks`` tasks have passed every check, the image audit
    included, or the candidates run out. Tasks wait for the image audit in batches (one scan of
    the image serves a batch); a batch is audited once it would fill ``max_tasks``, and if the
    audit rejects some of it, mining goes on."""
    pending: list[Task] = []
    fingerprints: dict[str, Fingerprint] = {}
    stage = _Stages(result)
    remaining = iter(candidates)
    while True:
        for candidate in remaining:
            result.attempted += 1
            outcome = _validate(candidate, ctx, runner=runner, backend=backend, limits=limits, naive=naive,
                                result=result)
            if isinstance(outcome, Rejected):
                result.reject(candidate.target, candidate.strategy, outcome)
            else:
                task, fingerprints[task.instance_id] = outcome
                pending.append(task)
            if on_candidate is not None:
                on_candidate(result)
            if len(result.tasks) + len(pending) >= ctx.config.max_tasks:
                break
        if not pending:
            return
        with stage("audit"):
            result.tasks += _audit_image(pending, fingerprints, ctx, runner=runner, backend=backend, limits=limits,
                                         naive=naive, result=result)
        pending = []
        if len(result.tasks) >= ctx.config.max_tasks:
            return


def _validate(
    candidate: Candidate, ctx: _Context, *, runner: SuiteRunner, backend: SandboxBackend,
    limits: SandboxLimits | None, naive: bool, result: RepoResult,
) -> tuple[Task, Fingerprint] | Rejected:
    """One candidate through removal, checks, task building and the scorer's verdict: a task
    (its image audit still to come), or why not."""
    stage = _Stages(result)
    with stage("remove"):
        removed = _remove(candidate, ctx)
    if isinstance(removed, Rejected):
        return removed
    removal, changes = removed
    with stage("validate"):
        if naive:
            checked = _check_naive(candidate, changes, removal, ctx, backend, limits, result)
        else:
            checked = _check_fast(candidate, changes, removal, ctx, runner, result)
    if isinstance(checked, Rejected):
        return checked
    with stage("describe"):
        task = _make_task(candidate, removal, checked, ctx)
    if isinstance(task, Rejected):
        return task
    with stage("audit"):
        audited = _scrub_and_audit(task, checked, ctx)
    if isinstance(audited, Rejected):
        return audited
    with stage("gate"):
        refused = _gate(audited[0], ctx)
    result.runs += 2
    return refused if refused is not None else audited

"""The checks every candidate passes before it becomes a task: removal, the failing-test runs (the fast
checks in the warm container beside the naive reference), the start state, the task row, the
scrub and audit, the scorer's verdict, and the image audit in batches."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

from taskforge import __version__
from taskforge.difficulty import band_bounds, difficulty_of, in_band
from taskforge.errors import TaskforgeError
from taskforge.mining.audit.fingerprint import Fingerprint
from taskforge.mining.audit.scan import (
    IMAGE_ROOTS,
    AuditResult,
    audit_task_state,
    scan_image,
)
from taskforge.mining.audit.vocabulary import Interfaces
from taskforge.mining.baseline import Baseline, run_timeout
from taskforge.mining.candidates import Candidate
from taskforge.mining.config import (
    CONTINUE_ON_COLLECTION_ERRORS,
    MineConfig,
    traceback_args,
)
from taskforge.mining.detach import detach_point, detached_changes, owned_by
from taskforge.mining.hiding import ClassIndex, doctest_text_file, hide_tests
from taskforge.mining.outcome import Rejected, RepoResult
from taskforge.mining.removal.cst import Removal, RemovalAgent
from taskforge.mining.statements.template import (
    StatementContext,
    leaked_lines,
    load_writer,
    removed_symbols,
)
from taskforge.repo.environment import Environment
from taskforge.repo.patches import StateTrees
from taskforge.repo.sources import Snapshot
from taskforge.repo.startstate import is_scrubbed, write_start_state
from taskforge.repo.suite import RunResult, SuiteRunner
from taskforge.repo.symbols import SymbolIndex
from taskforge.repo.testfiles import TestLayout
from taskforge.sandbox import SandboxBackend, SandboxLimits
from taskforge.task import RejectReason, Task, TaskScorer, is_doctest_id

__all__ = ["Checked", "Context", "Decided", "audit_image", "check_fast", "check_naive", "check_start", "failing", "finding_detail", "first_failure", "gate", "hide_failing", "import_rejection", "make_task", "remove_candidate", "removed_modules", "run_detail", "scrub_and_audit", "start_state", "uncollectable"]


def failing(run: RunResult, tests: Sequence[str]) -> set[str]:
    """Of ``tests``, those that did not pass: failed, errored, skipped, or missing (their module failed to collect)."""
    return {t for t in tests if t not in run.results or run.results[t].outcome != "passed"}


ROUNDS = 3
"""Rounds of :func:`check_fast` (and of :func:`check_naive`'s start state): the first, one for
the tests and dead files the full run shows, one for a file that imported a file gone whole."""


def uncollectable(run: RunResult, tests: Sequence[str]) -> set[str]:
    """Of ``tests``, those in modules (or classes) that failed to collect in ``run``."""
    locations = [e.location for e in run.collection_errors]
    return {t for t in tests if any(t.startswith(f"{loc}::") for loc in locations)}


def dead_files(run: RunResult, ctx: Context) -> set[str]:
    """Test files (not conftest.py or __init__.py) that fail to collect in ``run``: the removal
    broke their import, and they go whole from the start state (test_patch brings them back),
    whatever imports them, instead of leaving a collection error in it. One that held no test at
    the baseline (it skips itself when an optional dependency is missing); one another file
    imports (a script beside the tests), whose tests hidden one by one leave its import broken."""
    files = {e.location.split("::", 1)[0] for e in run.collection_errors}
    return {f for f in files if ctx.layout.is_test_file(f) and PurePosixPath(f).name not in ("conftest.py", "__init__.py")}


DETACH_PASSES = 8
"""Failing-test runs a candidate may spend finding the test modules that its removal broke and
that a gathering module imports (:mod:`taskforge.mining.detach`): the gathering module stops at
the first such import, so each run finds one."""


def newly_detached(runs: Iterable[RunResult], ctx: Context, detached: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """The test modules that ``runs`` could not collect because a test module they import no
    longer imports, where they can do without it (:func:`taskforge.mining.detach.detach_point`):
    ``{importer: {that module}}``, leaving out what ``detached`` has."""
    found: dict[str, set[str]] = {}
    known = {path: set(modules) for path, modules in detached.items()}
    for run in runs:
        for error in run.collection_errors:
            point = detach_point(error, ctx.layout, ctx.tests, known)
            if point is not None:
                for into in (found, known):
                    into.setdefault(point[0], set()).add(point[1])
    return found


def _merge(detached: dict[str, set[str]], found: Mapping[str, set[str]]) -> None:
    for path, modules in found.items():
        detached.setdefault(path, set()).update(modules)


def first_failure(run: RunResult, tests: Sequence[str]) -> str:
    """``node id: outcome: message`` of the first of ``tests`` that did not pass in ``run``."""
    for test in tests:
        result = run.results.get(test)
        if result is None:
            return f"{test}: missing"
        if result.outcome != "passed":
            return f"{test}: {result.outcome}" + (f": {result.message}" if result.message else "")
    return ""


def run_detail(run: RunResult) -> str:
    """The most telling line of a run that did not get to report its tests."""
    if run.collection_errors:
        error = run.collection_errors[0]
        return f"{error.location}: {error.message}"
    if run.limits_hit:
        return f"hit the sandbox's {', '.join(run.limits_hit)} limit"
    lines = run.output_tail.strip().splitlines()
    return lines[-1][:300] if lines else f"exit code {run.exit_code}"


@dataclass(frozen=True, kw_only=True, slots=True)
class Context:
    """What every candidate of one repository is validated against."""

    snapshot: Snapshot
    env: Environment
    index: SymbolIndex
    baseline: Baseline
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
    interfaces: Interfaces
    """What the environment's dependencies define and install (taskforge.mining.audit.vocabulary.interface_names)."""
    scorer: TaskScorer
    """The verdict every task must get before it is written: gold 1.0, the empty patch 0.0."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Checked:
    """A candidate that passed every check: what the task row is made of."""

    fail_to_pass: list[str]
    pass_to_pass: list[str]
    hidden: list[str]
    start_changes: dict[str, str | None]
    timings: dict[str, list[float]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Decided:
    """What the failing-test runs decided: FAIL_TO_PASS, the doctests that failed with them (in
    neither list: the candidate writes their module), and the start state's changes."""

    fail_to_pass: list[str]
    failing_doctests: frozenset[str]
    start_changes: dict[str, str | None]


def remove_candidate(candidate: Candidate, ctx: Context) -> tuple[Removal, dict[str, str | None]] | Rejected:
    """The removal and its file changes, or why there is none."""
    try:
        removal = ctx.agent.remove(ctx.snapshot.path, ctx.index, target=candidate.target, strategy=candidate.strategy,
                                   members=candidate.members)
    except TaskforgeError as err:
        return Rejected.of_error(err)
    changes = dict(removal.files)
    touched = [path for path in changes if ctx.layout.is_test_file(path)]
    if touched:
        return Rejected(RejectReason.REMOVAL_TOUCHES_TESTS, f"the removal changes test file {touched[0]}")
    return removal, changes


def hide_failing(fail_to_pass: Sequence[str], ctx: Context, broken: Sequence[str] = (),
                 whole: Sequence[str] = ()) -> dict[str, str | None] | Rejected:
    if ctx.config.visible_tests:
        return {}
    try:
        return hide_tests(ctx.snapshot.path, fail_to_pass, index=ctx.tests, broken=broken, whole=whole,
                          located=ctx.baseline.definitions)
    except TaskforgeError as err:
        return Rejected.of_error(err)


def start_state(
    failing_sets: Sequence[set[str]], broken_modules: set[str], changes: dict[str, str | None], ctx: Context,
    dead: Iterable[str] = (), detached: Mapping[str, set[str]] | None = None,
) -> Decided | Rejected:
    """FAIL_TO_PASS (failing in every repeat) and the start state's changes, or a rejection.

    Tests of modules that no longer collect are hidden along with FAIL_TO_PASS, whatever their
    baseline outcome, so that the file goes as a whole; ``dead`` files (:func:`dead_files`) go
    whole whatever imports them. Doctests are never FAIL_TO_PASS: a source module's the candidate
    writes, so it could pass them by rewriting them; and the guard holds a test's code to its
    trusted file, but not a doctest's examples, nor the doctest machinery that runs them, which
    the candidate's code can rig from inside the process (an independent red team passed a text
    file of doctests, ``--doctest-glob``, with a wrong feature in 18 ways, the guard seeing none).
    A failing text file of doctests is hidden all the same (test_patch brings it back); a test
    file's doctest in a module hidden test by test goes with it (its docstring is deleted).
    A test module ``detached`` from the gathering module that imports it (:mod:`taskforge.mining.detach`)
    goes whole, the gathering module's imports of it with it; the tests the gathering module bound
    from it are FAIL_TO_PASS.
    """
    detached = detached or {}
    if any(s != failing_sets[0] for s in failing_sets[1:]):
        differ = sorted(failing_sets[0].symmetric_difference(*failing_sets[1:]))
        return Rejected(RejectReason.FLAKY_FAIL_TO_PASS, f"{len(differ)} test(s) failed in some repeats only (first: {differ[0]})")
    doctests = frozenset(t for t in failing_sets[0] if is_doctest_id(t) or doctest_text_file(t) is not None)
    fail_to_pass = sorted(failing_sets[0] - doctests)
    if not fail_to_pass:
        what = f" but {len(doctests)} doctest(s)" if doctests else ""
        return Rejected(RejectReason.NO_FAILING_TESTS, f"no test failed with the feature removed{what}")
    broken_files = sorted({t.partition("::")[0] for t in broken_modules})
    # A text file of doctests that fails goes from the start state (it shows what the feature
    # does), and test_patch brings it back, but it is not graded.
    text_files = {t for t in doctests if doctest_text_file(t) is not None}
    hide = set(fail_to_pass) | text_files | broken_modules
    hide -= owned_by(ctx.tests, hide, detached, ctx.baseline.definitions)  # their module goes whole
    gone = sorted(set(dead).union(*detached.values()))
    hidden_changes = hide_failing(sorted(hide), ctx, broken_files, gone)
    if isinstance(hidden_changes, Rejected):
        return hidden_changes
    return Decided(fail_to_pass=fail_to_pass, failing_doctests=doctests,
                    start_changes={**changes, **hidden_changes, **detached_changes(ctx.tests, detached), **ctx.scrubbed})


def check_start(start: RunResult, decided: Decided, ctx: Context) -> tuple[list[str], list[str]] | Rejected:
    """(PASS_TO_PASS, hidden tests) if the start state holds, else a rejection."""
    fail_to_pass = decided.fail_to_pass
    if start.status not in ("ok", "tests_failed"):
        return Rejected(RejectReason(f"start_state_{start.status}"), run_detail(start))
    present = set(start.results)
    if ctx.config.visible_tests:
        passing = set(fail_to_pass) - failing(start, fail_to_pass)
        if passing:
            return Rejected(RejectReason.FAIL_TO_PASS_PASSES_AT_START, f"{sorted(passing)[0]} passes at the start state")
    elif set(fail_to_pass) & present:
        return Rejected(RejectReason.HIDDEN_TEST_STILL_VISIBLE, f"{sorted(set(fail_to_pass) & present)[0]} still runs at the start state")
    pass_to_pass = sorted(t for t in ctx.baseline.passing
                          if t in present and t not in fail_to_pass and t not in decided.failing_doctests)
    if failing(start, pass_to_pass):
        return Rejected(RejectReason.BREAKS_OTHER_TESTS, first_failure(start, pass_to_pass))
    hidden = sorted(t for t in set(ctx.baseline.passing) - present if not is_doctest_id(t))
    return pass_to_pass, hidden


def check_fast(
    candidate: Candidate, changes: dict[str, str | None], removal: Removal, ctx: Context, runner: SuiteRunner, result: RepoResult
) -> Checked | Rejected:
    """Affected tests first, `repeats` times (in one exec), in the warm container; then the full
    suite once.

    When the full run shows tests that the removal breaks but coverage did not tie to the feature
    (a test module that imports it, a test that reaches it through a subprocess), they join the
    affected tests and the checks run once more, instead of the candidate being rejected; so do
    test files the start state leaves uncollectable (:func:`dead_files`), which then go whole.
    Hiding a file whole can break a file that imports it, so there are up to :data:`ROUNDS`
    rounds, and the modules a round found broken stay broken in the next: the removal is the
    same, but a round's runs collect only the files of the tests it knows of (the first, whose
    tests may all be in a file the removal deleted, collects the whole suite).
    """
    timings: dict[str, list[float]] = {"affected_s": [], "start_state_s": []}
    importable = [m for m in ctx.baseline.importable if m not in removed_modules(removal, ctx.index)]
    tests = list(candidate.tests)
    dead: set[str] = set()
    detached: dict[str, set[str]] = {}
    broken_before: set[str] = set()
    for round_ in range(ROUNDS):
        failing_sets: list[set[str]] = []
        broken_modules: set[str] = set()
        for _ in range(DETACH_PASSES):
            runs = runner.run_repeated(
                repeats=ctx.config.repeats,
                changes={**changes, **detached_changes(ctx.tests, detached)},
                select=tests,
                imports=importable if round_ == 0 else (),
                extra_args=(*CONTINUE_ON_COLLECTION_ERRORS, *traceback_args(ctx.config)),
            )
            result.runs += len(runs)
            timings["affected_s"] += [round(run.duration_s, 3) for run in runs]
            found = newly_detached(runs, ctx, detached)
            if not found:
                break
            _merge(detached, found)
        owned = owned_by(ctx.tests, ctx.baseline.passing, detached, ctx.baseline.definitions)
        for run in runs:
            if run.import_errors:
                return import_rejection(run)
            if run.status in ("timeout", "oom", "crashed"):
                return Rejected(RejectReason(f"affected_{run.status}"), run_detail(run))
            # A test module that no longer imports fails every test in it, selected or not.
            failing_sets.append(failing(run, tests) | uncollectable(run, ctx.baseline.passing) |
                                (broken_before & set(ctx.baseline.passing)) | owned)
            broken_modules = uncollectable(run, ctx.baseline.tests) | broken_before
        broken_before = broken_modules
        decided = start_state(failing_sets, broken_modules, changes, ctx, dead, detached)
        if isinstance(decided, Rejected):
            return decided
        start = runner.run(changes=decided.start_changes, extra_args=traceback_args(ctx.config))
        result.runs += 1
        timings["start_state_s"].append(round(start.duration_s, 3))
        verdict = check_start(start, decided, ctx)
        if not isinstance(verdict, Rejected):
            pass_to_pass, hidden = verdict
            return Checked(fail_to_pass=decided.fail_to_pass, pass_to_pass=pass_to_pass, hidden=hidden,
                            start_changes=decided.start_changes, timings=timings)
        if round_ == ROUNDS - 1 or verdict.reason not in ("breaks_other_tests", "start_state_collection_errors"):
            return verdict
        missed = {t for t, r in start.results.items() if r.outcome != "passed" and t in ctx.baseline.passing}
        missed |= uncollectable(start, ctx.baseline.passing)
        newly_dead = dead_files(start, ctx) - dead
        if not missed - set(tests) and not newly_dead:
            return verdict
        tests = sorted(set(tests) | missed)
        dead |= newly_dead
    raise AssertionError("unreachable: the last round always returns")


def import_rejection(run: RunResult) -> Rejected:
    module, error = next(iter(sorted(run.import_errors.items())))
    return Rejected(RejectReason.PACKAGE_IMPORT_FAILED, f"{module}: {error}")


def check_naive(
    candidate: Candidate, changes: dict[str, str | None], removal: Removal, ctx: Context, backend: SandboxBackend,
    limits: SandboxLimits | None, result: RepoResult,
) -> Checked | Rejected:
    """The reference: each of the four checks (imports, FAIL_TO_PASS, PASS_TO_PASS, gold) in a
    fresh container, on the full suite, `repeats` times.

    It decides exactly what ``check_fast`` decides, without its shortcuts; the mining benchmark
    measures the fast path against it.
    """
    timings: dict[str, list[float]] = {"full_s": []}

    def fresh(state: dict[str, str | None], **kwargs: Any) -> RunResult:
        with SuiteRunner(ctx.snapshot, ctx.env, backend=backend, limits=limits, base_changes=ctx.scrubbed,
                         timeout_s=run_timeout(ctx.baseline.seconds, ctx.config.timeout_s), fork_server=False) as runner:
            run = runner.run(changes=state, extra_args=(*CONTINUE_ON_COLLECTION_ERRORS, *traceback_args(ctx.config)), **kwargs)
        result.runs += 1
        result.containers += 1
        timings["full_s"].append(round(run.duration_s, 3))
        return run

    importable = [m for m in ctx.baseline.importable if m not in removed_modules(removal, ctx.index)]
    for _ in range(ctx.config.repeats):  # check 1: the package imports
        imported = fresh(changes, imports=importable, pytest=False)
        if imported.import_errors:
            return import_rejection(imported)
    failing_sets: list[set[str]] = []
    broken_modules: set[str] = set()
    detached: dict[str, set[str]] = {}  # test modules a gathering module no longer imports, as in check_fast
    for _ in range(DETACH_PASSES):
        runs = []
        for _ in range(ctx.config.repeats):  # check 2: FAIL_TO_PASS fail at start + test_patch
            run = fresh({**changes, **detached_changes(ctx.tests, detached)})
            if run.status in ("timeout", "oom", "crashed"):
                return Rejected(RejectReason(f"affected_{run.status}"), run_detail(run))
            runs.append(run)
        found = newly_detached(runs, ctx, detached)
        if not found:
            break
        _merge(detached, found)
    for run in runs:
        failing_sets.append(failing(run, ctx.baseline.passing))
        broken_modules = uncollectable(run, ctx.baseline.tests)
    dead: set[str] = set()
    for _ in range(ROUNDS):  # a test file the start state leaves broken goes whole, as in check_fast
        decided = start_state(failing_sets, broken_modules, changes, ctx, dead, detached)
        if isinstance(decided, Rejected):
            return decided
        # check 3: PASS_TO_PASS pass at the start state; check 4: gold passes everything
        starts = [fresh(decided.start_changes) for _ in range(ctx.config.repeats)]
        newly_dead = set().union(*(dead_files(start, ctx) for start in starts)) - dead
        if not newly_dead:
            break
        dead |= newly_dead
    verdicts = [check_start(start, decided, ctx) for start in starts]
    for verdict in verdicts:
        if isinstance(verdict, Rejected):
            return verdict
    for _ in range(ctx.config.repeats):
        gold = fresh({})
        if failing(gold, ctx.baseline.passing):
            return Rejected(RejectReason.GOLD_FAILS, first_failure(gold, ctx.baseline.passing))
    pass_to_pass, hidden = verdicts[0]  # type: ignore[misc]
    return Checked(fail_to_pass=decided.fail_to_pass, pass_to_pass=pass_to_pass, hidden=hidden,
                    start_changes=decided.start_changes, timings=timings)


def make_task(candidate: Candidate, removal: Removal, checked: Checked, ctx: Context) -> Task | Rejected:
    """Diffs, the gold check, the statement and its leak check: the task row (start state and
    audit still to come), or a rejection."""
    snapshot = ctx.snapshot
    start_changes = checked.start_changes
    changed = sorted(set(start_changes) | set(ctx.scrubbed))
    with StateTrees(snapshot.path) as trees:
        start, gold = trees.tree(start_changes), trees.tree(ctx.scrubbed)
        removal_patch = trees.diff(trees.tree({}), start, sorted(start_changes)) if start_changes else ""
        # Gold puts the code back, not the scrubbed leftovers; a text file of doctests that was
        # hidden (``docs/usage.rst``) is a test file, which test_patch brings back.
        text_tests = {f for i in (*checked.fail_to_pass, *checked.hidden) if (f := doctest_text_file(i)) is not None}

        def is_test(path: str) -> bool:
            return ctx.layout.is_test_file(path) or path in text_tests

        source_paths = [p for p in changed if not is_test(p) and not is_scrubbed(p)]
        test_paths = [p for p in changed if is_test(p)]
        patch = trees.diff(start, gold, source_paths) if source_paths else ""
        test_patch = trees.diff(start, gold, test_paths) if test_paths else ""
        if trees.apply(start, patch + test_patch) != gold:
            return Rejected(RejectReason.GOLD_DOES_NOT_RESTORE, "start state + patch + test_patch is not the original tree")
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
        **(_feature_context(removal, source_paths, ctx.index) if candidate.strategy == "feature" else {}),
    )
    try:
        statement = writer.write(context)
    except TaskforgeError as err:  # an LLM writer's endpoint failed, or its model kept quoting the code
        return Rejected.of_error(err)
    leaked = leaked_lines(statement, removal.removed_code)
    if leaked:
        return Rejected(RejectReason.STATEMENT_LEAKS_CODE, f"the statement quotes {leaked[0]!r}")
    lines_removed = sum(1 for line in patch.splitlines() if line.startswith("+") and not line.startswith("+++"))
    digest = hashlib.sha256("\0".join([snapshot.commit, candidate.strategy, candidate.target, removal_patch]).encode())
    slug = re.sub(r"[^A-Za-z0-9]+", "-", candidate.target.replace(":", ".")).strip("-")[-60:]
    instance_id = f"{snapshot.name}__{candidate.strategy}-{slug}-{digest.hexdigest()[:10]}"

    record = difficulty_of({"strategy": candidate.strategy, "removed": removal.removed, "patch": patch,
                            "lines_removed": lines_removed, "FAIL_TO_PASS": checked.fail_to_pass})
    band = ctx.config.candidates.difficulty
    if band is not None and not in_band(record.difficulty, band_bounds(band)):
        return Rejected(RejectReason.DIFFICULTY_OUT_OF_BAND,
                        f"difficulty {record.difficulty} is outside {band} (estimated {candidate.difficulty()} "
                        f"before validation)")
    return Task(
        instance_id=instance_id,
        repo=snapshot.name,
        source=snapshot.source,
        base_commit="",  # set by scrub_and_audit
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
        audit="",  # set by scrub_and_audit
        seed=ctx.config.seed,
        taskforge_version=__version__,
        **record.columns(),  # type: ignore[arg-type]
    )


def _feature_context(removal: Removal, source_paths: Sequence[str], index: SymbolIndex) -> dict[str, Any]:
    """The files a feature removal changed, and the public names each still defines."""
    removed = set(removal.removed)
    by_path = {p: m for m, p in index.modules.items()}
    remaining = {
        path: tuple(s.name for s in index.symbols.values()
                    if s.path == path and s.parent is None and not s.is_private and s.qualname not in removed)
        for path in source_paths
        if path in by_path and removal.files.get(path, "") is not None
    }
    return {"files": tuple(p for p in source_paths if p in by_path), "remaining": remaining, "options": removal.options}


def finding_detail(findings: Sequence[Mapping[str, Any]]) -> str:
    """``path (channel): match: item; ...`` of the first finding (each kind of evidence with the
    item it matched, strongest first, as the scanner ranks them), and how many more there are."""
    first = findings[0]
    more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
    matched = first.get("detail") or first.get("match", "")
    return f"{first.get('path', '?')} ({first.get('kind', '?')}): {matched}"[:400] + more


def scrub_and_audit(task: Task, checked: Checked, ctx: Context) -> tuple[Task, Fingerprint] | Rejected:
    """Write the scrubbed one-commit start state and audit it: the task with its ``base_commit``
    and ``audit``, and the fingerprint for the image scan; or a rejection."""
    start_dir = ctx.work_dir / task.instance_id
    base_commit = write_start_state(ctx.snapshot, checked.start_changes, start_dir)
    fingerprint, audit = audit_task_state(source_dir=ctx.snapshot.path, start_dir=start_dir,
                                          start_changes=checked.start_changes, strategy=task.strategy,
                                          test_ids=checked.fail_to_pass, interfaces=ctx.interfaces)
    if fingerprint.empty:  # nothing distinctive was removed: no audit could vouch for it
        return Rejected(RejectReason.AUDIT_EMPTY_FINGERPRINT, "the removed code holds nothing distinctive to search for")
    if not audit.clean and not ctx.config.keep_flagged:
        return Rejected(RejectReason.AUDIT_FINDINGS, finding_detail(audit.findings))
    return replace(task, base_commit=base_commit, audit=audit.to_json()), fingerprint


def gate(task: Task, ctx: Context) -> Task | Rejected:
    """The verdict ``taskforge score`` will give, through the scorer itself: a fresh container, a
    new interpreter, a random hash seed. First the scorer calibrates the task's canaries (the
    twins of its hidden tests that gold fails); then gold must score 1.0 and the empty patch 0.0,
    canaries in place (a twin gold passes there is dropped and gold scored again: ``confirm``).
    The task, with its canaries.

    The empty patch runs FAIL_TO_PASS alone (``tests="fail_to_pass"``): the binary reward is 0
    exactly when one of them fails, whatever PASS_TO_PASS do, and the gold run has just shown
    PASS_TO_PASS pass."""
    # The scorer's runs are bounded as mining's are, by the baseline's duration.
    bound = run_timeout(ctx.baseline.seconds, ctx.config.timeout_s)
    # A run the scorer cannot read is this candidate's failure, not the repository's.
    try:
        task = ctx.scorer.calibrate(task, timeout_s=bound)
        task, gold = ctx.scorer.confirm(task, timeout_s=bound)
    except TaskforgeError as err:
        return Rejected(RejectReason.SCORER_INFRA_ERROR, f"gold: {err} [{err.reason}]")
    if gold.status != "ok" or gold.reward != 1.0:
        failed = next((f"{t}: {o}" for t, o in {**gold.fail_to_pass, **gold.pass_to_pass}.items() if o != "passed"), "")
        if gold.status != "ok":
            return Rejected(RejectReason(f"scorer_{gold.status}"), f"gold: {gold.detail}" + (f" (first: {failed})" if failed else ""))
        return Rejected(RejectReason.GOLD_SCORES_0, failed or gold.detail)
    try:
        empty = ctx.scorer.score(task, "", tests="fail_to_pass", timeout_s=bound)
    except TaskforgeError as err:
        return Rejected(RejectReason.SCORER_INFRA_ERROR, f"empty patch: {err} [{err.reason}]")
    if empty.status != "ok":
        return Rejected(RejectReason(f"scorer_{empty.status}"), f"empty patch: {empty.detail}")
    if all(outcome == "passed" for outcome in empty.fail_to_pass.values()):
        return Rejected(RejectReason.EMPTY_PATCH_SCORES_1,
                        f"every FAIL_TO_PASS test ({len(empty.fail_to_pass)}) passes without the feature")
    return task


def audit_image(
    tasks: list[Task], fingerprints: Mapping[str, Fingerprint], ctx: Context, *, runner: SuiteRunner,
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
                scans[task.instance_id] = scan_image({task.instance_id: fingerprints[task.instance_id]}, sandbox=box,
                                                     interfaces=ctx.interfaces)
    else:
        # The warm container's /tmp holds taskforge's tools; an agent's /tmp starts empty.
        roots = [root for root in IMAGE_ROOTS if root != "/tmp"]
        findings, totals = scan_image({t.instance_id: fingerprints[t.instance_id] for t in tasks},
                                      sandbox=runner.sandbox(), roots=roots, interfaces=ctx.interfaces)
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
            result.reject(task.target, task.strategy, Rejected(RejectReason.AUDIT_FINDINGS, finding_detail(audit.findings)))
    return kept


def removed_modules(removal: Removal, index: SymbolIndex) -> set[str]:
    """The modules whose files the removal deletes."""
    deleted = {path for path, text in removal.files.items() if text is None}
    return {module for module, path in index.modules.items() if path in deleted}

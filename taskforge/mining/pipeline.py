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
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from taskforge.mining.audit.fingerprint import Fingerprint
from taskforge.mining.audit.vocabulary import interface_names
from taskforge.mining.baseline import run_baseline, run_timeout
from taskforge.mining.candidates import Candidate, find_candidates
from taskforge.mining.checks import (
    Context,
    audit_image,
    check_fast,
    check_naive,
    gate,
    make_task,
    remove_candidate,
    scrub_and_audit,
)
from taskforge.mining.config import MineConfig
from taskforge.mining.hiding import ClassIndex
from taskforge.mining.outcome import Rejected, RepoResult, Stages
from taskforge.mining.removal.cst import load_agent
from taskforge.repo.environment import build_environment
from taskforge.repo.sources import fetch
from taskforge.repo.startstate import scrub_changes
from taskforge.repo.suite import SuiteRunner, require_test_files
from taskforge.repo.symbols import build_index
from taskforge.sandbox import SandboxBackend, SandboxLimits
from taskforge.sandbox.base_image import BaseImage
from taskforge.task import RejectReason, Task, TaskScorer

__all__ = ["MineConfig", "Rejected", "RepoResult", "Task", "mine_repository"]


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

    ``naive`` validates with the reference checks (``check_naive``) and audits each task's image in a
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
    stage = Stages(result)
    with stage("fetch"):
        snapshot = fetch(source)
        finding = require_test_files(snapshot)
    with stage("environment"):
        env = build_environment(snapshot, backend=backend, base=base)
        env = replace(env, pytest_args=(*env.pytest_args, *finding))
    # Every run, the baseline's included, sees the tree without what the start state scrubs: a
    # test that needs a scrubbed file fails in the baseline and is in neither list, rather than
    # breaking every task's start state.
    scrubbed = scrub_changes(snapshot)
    with SuiteRunner(snapshot, env, backend=backend, limits=limits, timeout_s=config.timeout_s,
                     base_changes=scrubbed) as runner:
        with stage("index"):
            layout = runner.layout()  # where the project's pytest configuration puts its tests
            index = build_index(snapshot.path, package_paths=env.package_paths, layout=layout)
            interfaces = interface_names(env.wheelhouse, own=env.package_paths)
        # The LLM agent's run_tests tool runs in the warm container too.
        ctx_agent = load_agent(config.agent, **({"llm": config.llm, "runner": runner} if config.agent == "llm" else {}))
        with stage("baseline"):
            baseline = run_baseline(runner, index, config.baseline_runs, result, layout)
        if baseline.import_time is not None:
            # What ran at import, measured, rather than the index's over-approximation from the
            # source: a removal that still breaks the import fails the import check after it.
            index = replace(index, import_time=baseline.import_time)
        result.tests, result.passing = len(baseline.tests), len(baseline.passing)
        result.seed_dependent = len(baseline.seed_dependent)
        result.date_dependent = len(baseline.date_dependent)
        result.load_sensitive = len(baseline.load_sensitive)
        result.marked_flaky = len(baseline.marked_flaky)
        result.selection_sensitive = len(baseline.selection_sensitive)
        runner.timeout_s = result.run_timeout_s = run_timeout(baseline.seconds, config.timeout_s)
        # A plugin that does not fit this pytest, a test module broken in the project itself: what
        # the runner found every run needs goes into the tasks' environment, for scoring too.
        env = replace(env, pytest_args=(*env.pytest_args, *runner.found_args))
        result.plugins_off, result.ignored = list(runner.plugins_off), list(baseline.ignored)
        result.fork_server = baseline.fork_server
        with stage("discover"):
            candidates = find_candidates(
                snapshot.path, index, baseline.coverage, baseline.passing, config=config.candidates, seed=config.seed
            )
        result.candidates = len(candidates)
        work = tempfile.TemporaryDirectory(prefix="taskforge-start-")
        ctx = Context(snapshot=snapshot, env=env, index=index, baseline=baseline, agent=ctx_agent, config=config,
                       scrubbed=scrubbed, work_dir=Path(work.name), tests=ClassIndex(snapshot.path, layout=layout),
                       layout=layout,
                       scorer=scorer, interfaces=interfaces)
        with work:
            _mine_candidates(candidates, ctx, runner=runner, backend=backend, limits=limits,
                             naive=naive, result=result, on_candidate=on_candidate)
        result.containers += runner.containers_started
    return result


_MAX_TRIES_PER_ATTEMPT = 10


def _mine_candidates(
    candidates: Sequence[Candidate], ctx: Context, *, runner: SuiteRunner, backend: SandboxBackend,
    limits: SandboxLimits | None, naive: bool, result: RepoResult, on_candidate: Callable[[RepoResult], None] | None,
) -> None:
    """Validate candidates until ``max_tasks`` tasks have passed every check, the image audit
    included, or the candidates or ``max_attempts`` run out. Tasks wait for the image audit in
    batches (one scan of the image serves a batch); a batch is audited once it would fill
    ``max_tasks``, and if the audit rejects some of it, mining goes on. A candidate the removal
    agent refuses before any run costs no attempt (on held-out projects such refusals took up to
    49 of 60 attempts); the tries are bounded at ten times ``max_attempts`` all the same, since
    an LLM agent's refusal costs calls."""
    pending: list[Task] = []
    fingerprints: dict[str, Fingerprint] = {}
    stage = Stages(result)
    remaining = iter(candidates)
    while True:
        for candidate in remaining:
            if result.attempted >= ctx.config.max_attempts or \
                    result.attempted + result.refused >= _MAX_TRIES_PER_ATTEMPT * ctx.config.max_attempts:
                break
            outcome = _validate(candidate, ctx, runner=runner, backend=backend, limits=limits, naive=naive,
                                result=result)
            if isinstance(outcome, Rejected) and outcome.reason == RejectReason.REMOVAL_NOT_APPLICABLE:
                result.refused += 1
            else:
                result.attempted += 1
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
            result.tasks += audit_image(pending, fingerprints, ctx, runner=runner, backend=backend, limits=limits,
                                         naive=naive, result=result)
        pending = []
        if len(result.tasks) >= ctx.config.max_tasks:
            return


def _validate(
    candidate: Candidate, ctx: Context, *, runner: SuiteRunner, backend: SandboxBackend,
    limits: SandboxLimits | None, naive: bool, result: RepoResult,
) -> tuple[Task, Fingerprint] | Rejected:
    """One candidate through removal, checks, task building and the scorer's verdict: a task
    (its image audit still to come), or why not."""
    stage = Stages(result)
    with stage("remove"):
        removed = remove_candidate(candidate, ctx)
    if isinstance(removed, Rejected):
        return removed
    removal, changes = removed
    with stage("validate"):
        if naive:
            checked = check_naive(candidate, changes, removal, ctx, backend, limits, result)
        else:
            checked = check_fast(candidate, changes, removal, ctx, runner, result)
    if isinstance(checked, Rejected):
        return checked
    with stage("describe"):
        task = make_task(candidate, removal, checked, ctx)
    if isinstance(task, Rejected):
        return task
    with stage("audit"):
        audited = scrub_and_audit(task, checked, ctx)
    if isinstance(audited, Rejected):
        return audited
    with stage("gate"):
        gated = gate(audited[0], ctx)
    result.runs += 3
    return gated if isinstance(gated, Rejected) else (gated, audited[1])

"""Re-validate a written task from scratch, from its row alone.

The start state is rebuilt from the row (:func:`rebuild_start_state`): the source at
``source_commit``, plus ``removal_patch``, scrubbed, as a fresh one-commit repository whose commit
must be the row's ``base_commit``. Then, each in a fresh container on that repository:
- start state: every PASS_TO_PASS test passes and no FAIL_TO_PASS test is there (hidden);
- start state + ``test_patch``: every FAIL_TO_PASS test fails, every PASS_TO_PASS test passes;
- start state + ``test_patch`` + ``patch`` (gold): every test of both lists passes, and the tree
  is the original snapshot again.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from taskforge.errors import TaskforgeError
from taskforge.mining.audit.fingerprint import Fingerprint
from taskforge.mining.audit.scan import AuditResult, audit_task_state, scan_image
from taskforge.mining.audit.vocabulary import Interfaces, task_interfaces
from taskforge.repo.environment import build_environment
from taskforge.repo.patches import apply_patch
from taskforge.repo.sources import Snapshot, fetch
from taskforge.repo.startstate import is_scrubbed, rebuild_start_state
from taskforge.repo.suite import RunResult, SuiteRunner
from taskforge.sandbox import SandboxBackend, SandboxLimits
from taskforge.sandbox.base_image import BaseImage
from taskforge.task import Task

__all__ = ["AuditedDataset", "TaskCheck", "audit_dataset", "audit_tasks", "check_task", "validate_tasks"]


@dataclass(kw_only=True, slots=True)
class TaskCheck:
    instance_id: str
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _regathered(run: RunResult, start: Path, with_tests: dict[str, str | None]) -> set[str]:
    """Modules of the start state that the test_patch changes and that ``run`` could not collect
    because they import a test module the test_patch brings back."""
    out = set()
    for error in run.collection_errors:
        module = error.location
        if module not in with_tests or not (start / module).is_file() or module not in error.chain:
            continue
        entered = error.chain[error.chain.index(module) + 1:][:1]
        if entered and with_tests.get(entered[0]) is not None:
            out.add(module)
    return out


def _outcome(run: RunResult, nodeid: str) -> str:
    return run.results[nodeid].outcome if nodeid in run.results else "missing"


def audit_tasks(
    tasks: list[Task], *, backend: SandboxBackend, limits: SandboxLimits | None = None
) -> dict[str, AuditResult | str]:
    """Audit written tasks again from their rows: each start state on the host, then each
    environment image once for all of its tasks. instance_id → the audit, or why it could not run."""
    results: dict[str, AuditResult | str] = {}
    by_image: dict[str, dict[str, Fingerprint]] = {}
    interfaces: dict[str, Interfaces] = {}
    with tempfile.TemporaryDirectory(prefix="taskforge-audit-") as tmp:
        for task in tasks:
            try:
                start = rebuild_start_state(task, Path(tmp) / task.instance_id)
            except TaskforgeError as err:
                results[task.instance_id] = f"{err} [{err.reason}]"
                continue
            source = fetch(task.source)
            fingerprint, audit = audit_task_state(
                source_dir=source.path, start_dir=start.path,
                start_changes=apply_patch(source.path, {}, task.removal_patch),
                strategy=task.strategy, test_ids=task.FAIL_TO_PASS,
                interfaces=task_interfaces(task),
            )
            results[task.instance_id] = audit
            by_image.setdefault(task.image_name, {})[task.instance_id] = fingerprint
            interfaces[task.image_name] = task_interfaces(task)  # one environment per image
    for image, fingerprints in by_image.items():
        with backend.start(image, limits=limits or SandboxLimits.load(), labels={"taskforge.role": "audit"}) as box:
            findings, totals = scan_image(fingerprints, sandbox=box, interfaces=interfaces[image])
        for instance_id, found in findings.items():
            audit = results[instance_id]
            assert isinstance(audit, AuditResult)
            audit.findings += found
            audit.files += totals["files"]
            audit.bytes += totals["bytes"]
            audit.seconds += totals["seconds"] / len(fingerprints)
            audit.image_scanned = True
    return results


def check_task(task: Task, *, backend: SandboxBackend, base: BaseImage, limits: SandboxLimits | None = None) -> TaskCheck:
    check = TaskCheck(instance_id=task.instance_id)
    with tempfile.TemporaryDirectory(prefix="taskforge-check-") as tmp:
        try:
            start = rebuild_start_state(task, Path(tmp) / "start")
        except TaskforgeError as err:
            check.problems.append(str(err))
            return check
        _check_start_state(task, start, check, backend=backend, base=base, limits=limits)
    return check


def _gold_problems(task: Task, source: Snapshot, gold: dict[str, str | None]) -> list[str]:
    """Start state + test_patch + patch must be the source again, but for the scrubbed leftovers."""
    removed = apply_patch(source.path, {}, task.removal_patch)
    problems = []
    for rel in sorted(set(removed) | set(gold)):
        if is_scrubbed(rel):
            continue
        original = (source.path / rel).read_bytes().decode("utf-8") if (source.path / rel).is_file() else None
        if gold.get(rel, removed.get(rel)) != original:
            problems.append(f"gold does not give back {rel}")
    return problems


def _check_start_state(
    task: Task, start: Snapshot, check: TaskCheck, *, backend: SandboxBackend, base: BaseImage, limits: SandboxLimits | None
) -> None:
    source = fetch(task.source)
    # The environment is keyed on the project's metadata, which the start state keeps.
    env = build_environment(source, backend=backend, base=base)
    # The arguments the task's tests run with are the task's (a plugin mining found did not fit
    # this pytest is off in them).
    env = replace(env, pytest_args=tuple(json.loads(task.environment or "{}").get("pytest_args") or env.pytest_args))
    with_tests = apply_patch(start.path, {}, task.test_patch)
    gold = apply_patch(start.path, with_tests, task.patch)
    check.problems += _gold_problems(task, source, gold)
    selected = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]

    def fresh_run(changes: dict[str, str | None], select: list[str] | None) -> RunResult:
        # A new container and a new interpreter (its hash seed random), as a user's harness has.
        with SuiteRunner(start, env, backend=backend, limits=limits, fork_server=False) as runner:
            return runner.run(changes=changes, select=select, extra_args=("--continue-on-collection-errors",))

    at_start = fresh_run({}, None)
    for nodeid in task.PASS_TO_PASS:
        if _outcome(at_start, nodeid) != "passed":
            check.problems.append(f"start state: PASS_TO_PASS {nodeid} is {_outcome(at_start, nodeid)}")
    if task.hidden_tests:
        for nodeid in task.FAIL_TO_PASS:
            if nodeid in at_start.results:
                check.problems.append(f"start state: hidden FAIL_TO_PASS {nodeid} is visible")
    tests_only = fresh_run(with_tests, selected)
    for nodeid in task.FAIL_TO_PASS:
        if _outcome(tests_only, nodeid) == "passed":
            check.problems.append(f"test_patch alone: FAIL_TO_PASS {nodeid} passes")
    # A module pytest collects that gathers test classes from others (taskforge.mining.detach):
    # the start state drops its import of a test module the removal broke, and the test_patch
    # brings that import back, so without the feature the module does not import and none of its
    # tests runs (as in the SWE-bench harness for an empty patch). Only that module's tests, only
    # missing, and only when its traceback enters a test module the test_patch restores.
    regathered = _regathered(tests_only, start.path, with_tests)
    for nodeid in task.PASS_TO_PASS:
        outcome = _outcome(tests_only, nodeid)
        if outcome != "passed" and not (outcome == "missing" and nodeid.partition("::")[0] in regathered):
            check.problems.append(f"test_patch alone: PASS_TO_PASS {nodeid} is {outcome}")
    gold_run = fresh_run(gold, selected)
    for nodeid in selected:
        if _outcome(gold_run, nodeid) != "passed":
            check.problems.append(f"gold: {nodeid} is {_outcome(gold_run, nodeid)}")


def validate_tasks(
    tasks: Sequence[Task],
    *,
    backend: SandboxBackend,
    base: BaseImage,
    report: Path | None = None,
    on_status: Callable[[str], None] = lambda _: None,
) -> dict[str, dict[str, Any]]:
    """Check every task again (:func:`check_task`): instance_id → ``{"ok", "problems"}``.

    With ``report``, the results are also written there as JSON after every task, each with the
    task's :attr:`~taskforge.task.Task.grading_sha256` (``task_sha256``), and tasks the report
    holds already, in that version, are not checked again: a long validation resumes where it
    stopped, and a task mined again since is checked again."""
    from taskforge.datasets.manifest import write_atomic

    results: dict[str, dict[str, Any]] = {}
    if report is not None and report.is_file():
        try:
            results = json.loads(report.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise TaskforgeError(f"{report} is not valid JSON ({err}); remove it to validate again",
                                 reason="report_unreadable") from err
        if not isinstance(results, dict):
            raise TaskforgeError(f"{report} is not a validation report (instance_id: result); remove it to validate "
                                 "again", reason="report_unreadable")
        done = sum(1 for t in tasks if _holds(results, t))
        if done:
            on_status(f"{done} task(s) already in {report}; not checked again")
        if stale := sum(1 for t in tasks if t.instance_id in results and not _holds(results, t)):
            on_status(f"{stale} task(s) in {report} were checked in another version (mined again since, or unknown: "
                      "a report from before reports named it); checked again")
    for task in tasks:
        if not _holds(results, task):
            check = check_task(task, backend=backend, base=base)
            results[task.instance_id] = {"ok": check.ok, "problems": check.problems, "task_sha256": task.grading_sha256}
            if report is not None:  # after every task: an interrupted validation keeps what it did
                write_atomic(report, json.dumps(results, indent=1).encode())
    return results


def _holds(results: dict[str, Any], task: Task) -> bool:
    """Whether ``results`` (a validation report) has a result for ``task`` as it is now."""
    entry = results.get(task.instance_id)
    return isinstance(entry, dict) and entry.get("task_sha256") == task.grading_sha256


@dataclass(kw_only=True, slots=True)
class AuditedDataset:
    total: int = 0
    flagged: int = 0
    """Tasks whose audit found remnants of the removed code."""
    failed: int = 0
    """Tasks whose audit could not run."""

    @property
    def clean(self) -> int:
        return self.total - self.flagged - self.failed


def audit_dataset(
    directory: Path,
    *,
    backend: SandboxBackend,
    on_task: Callable[[Task, AuditResult | str], None] = lambda _task, _audit: None,
) -> AuditedDataset:
    """Audit every task of the folder again and store each result in its row (the ``audit``
    column), shard by shard; a task whose audit cannot run keeps its row, and ``on_task`` sees why."""
    import pyarrow.parquet as pq

    from taskforge.datasets import TASKS, DatasetWriter, read_manifest, run_versions

    counts = AuditedDataset()
    # Opening the folder for writing checks it and finishes any interrupted rewrite first.
    with DatasetWriter(directory, kind=TASKS, recipe=read_manifest(directory).recipe, versions=run_versions()) as writer:
        for shard in list(writer.manifest.shards):
            tasks = [Task.from_row(row) for row in pq.read_table(directory / shard.name).to_pylist()]
            audits = audit_tasks(tasks, backend=backend)
            updated = []
            for task in tasks:
                counts.total += 1
                audit = audits[task.instance_id]
                on_task(task, audit)
                if not isinstance(audit, AuditResult):
                    counts.failed += 1
                    updated.append(task)
                    continue
                counts.flagged += not audit.clean
                updated.append(replace(task, audit=audit.to_json()))
            writer.rewrite(shard.name, (t.to_row() for t in updated))
    return counts


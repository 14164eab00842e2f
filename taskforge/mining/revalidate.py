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

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from taskforge.mining.audit.scan import AuditResult, audit_task_state, scan_image
from taskforge.sandbox.base_image import BaseImage
from taskforge.repo.environment import build_environment
from taskforge.errors import TaskforgeError
from taskforge.mining.audit.fingerprint import Fingerprint, task_interfaces
from taskforge.task import Task
from taskforge.repo.patches import apply_patch
from taskforge.sandbox import SandboxBackend, SandboxLimits
from taskforge.repo.sources import Snapshot, fetch
from taskforge.repo.startstate import is_scrubbed, write_start_state
from taskforge.repo.suite import RunResult, SuiteRunner

__all__ = ["TaskCheck", "audit_tasks", "check_task", "rebuild_start_state"]


@dataclass(kw_only=True, slots=True)
class TaskCheck:
    instance_id: str
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _outcome(run: RunResult, nodeid: str) -> str:
    return run.results[nodeid].outcome if nodeid in run.results else "missing"


def rebuild_start_state(task: Task, dest: Path) -> Snapshot:
    """Write the task's start state into ``dest`` (a new folder) from the row alone: exactly the
    working tree and ``.git`` an agent starts from. Raises if it is not the row's ``base_commit``."""
    source = fetch(task.source)
    if source.commit != task.source_commit:
        raise TaskforgeError(f"{task.source} is now at {source.commit[:12]}, not {task.source_commit[:12]}",
                             reason="source_moved")
    changes = apply_patch(source.path, {}, task.removal_patch)
    commit = write_start_state(source, changes, dest)
    if commit != task.base_commit:
        raise TaskforgeError(f"the start state of {task.instance_id} rebuilds as {commit[:12]}, not {task.base_commit[:12]}",
                             reason="start_state_mismatch")
    return Snapshot(name=task.repo, source=task.source, kind=source.kind, commit=commit, path=dest, version=source.version)


def audit_tasks(
    tasks: list[Task], *, backend: SandboxBackend, limits: SandboxLimits | None = None
) -> dict[str, AuditResult | str]:
    """Audit written tasks again from their rows: each start state on the host, then each
    environment image once for all of its tasks. instance_id → the audit, or why it could not run."""
    results: dict[str, AuditResult | str] = {}
    by_image: dict[str, dict[str, Fingerprint]] = {}
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
    for image, fingerprints in by_image.items():
        with backend.start(image, limits=limits or SandboxLimits.load(), labels={"taskforge.role": "audit"}) as box:
            findings, totals = scan_image(fingerprints, sandbox=box)
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
        original = (source.path / rel).read_text(encoding="utf-8") if (source.path / rel).is_file() else None
        if gold.get(rel, removed.get(rel)) != original:
            problems.append(f"gold does not give back {rel}")
    return problems


def _check_start_state(
    task: Task, start: Snapshot, check: TaskCheck, *, backend: SandboxBackend, base: BaseImage, limits: SandboxLimits | None
) -> None:
    source = fetch(task.source)
    # The environment is keyed on the project's metadata, which the start state keeps.
    env = build_environment(source, backend=backend, base=base)
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
    for nodeid in task.PASS_TO_PASS:
        if _outcome(tests_only, nodeid) != "passed":
            check.problems.append(f"test_patch alone: PASS_TO_PASS {nodeid} is {_outcome(tests_only, nodeid)}")
    gold_run = fresh_run(gold, selected)
    for nodeid in selected:
        if _outcome(gold_run, nodeid) != "passed":
            check.problems.append(f"gold: {nodeid} is {_outcome(gold_run, nodeid)}")

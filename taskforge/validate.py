"""Re-validate a written task from scratch, from its row alone.

The start state is rebuilt from the row: the source at ``base_commit``, plus ``removal_patch``.
Then, each in a fresh container:
- start state: every PASS_TO_PASS test passes and no FAIL_TO_PASS test is there (hidden);
- start state + ``test_patch``: every FAIL_TO_PASS test fails, every PASS_TO_PASS test passes;
- start state + ``test_patch`` + ``patch`` (gold): every test of both lists passes, and the tree
  is the original snapshot again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from taskforge.baseimage import BaseImage
from taskforge.environment import build_environment
from taskforge.mine import Task
from taskforge.patches import apply_patch
from taskforge.sandbox import SandboxBackend, SandboxLimits
from taskforge.sources import fetch
from taskforge.testrun import RunResult, SuiteRunner

__all__ = ["TaskCheck", "check_task"]


@dataclass(kw_only=True, slots=True)
class TaskCheck:
    instance_id: str
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _outcome(run: RunResult, nodeid: str) -> str:
    return run.results[nodeid].outcome if nodeid in run.results else "missing"


def check_task(task: Task, *, backend: SandboxBackend, base: BaseImage, limits: SandboxLimits | None = None) -> TaskCheck:
    check = TaskCheck(instance_id=task.instance_id)
    snapshot = fetch(task.source)
    if snapshot.commit != task.base_commit:
        check.problems.append(f"{task.source} is now at {snapshot.commit[:12]}, not {task.base_commit[:12]}")
        return check
    env = build_environment(snapshot, backend=backend, base=base)
    start = apply_patch(snapshot.path, {}, task.removal_patch)
    with_tests = apply_patch(snapshot.path, start, task.test_patch)
    gold = apply_patch(snapshot.path, with_tests, task.patch)
    if gold:
        check.problems.append(f"gold does not give back the original tree: {sorted(gold)[:5]} differ")
    selected = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]

    def fresh_run(changes: dict[str, str | None], select: list[str] | None) -> RunResult:
        with SuiteRunner(snapshot, env, backend=backend, limits=limits) as runner:
            return runner.run(changes=changes, select=select, extra_args=("--continue-on-collection-errors",))

    at_start = fresh_run(start, None)
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
    return check

"""``[rl.generator] kind = "gold"``: every episode replays its task's gold patch through the tools.

A check of the whole loop rather than a way to learn: the environment, the scorer's rewards, the
curriculum and the growth of the task set (`trainer.rl.growth`) run exactly as with a real policy,
and every episode should earn 1.0. For each file the gold patch changes, one ``edit_file`` call
replaces the start state's whole text by the gold text (``"old": ""`` creates a file the start
state lacks); then ``submit``. The policy is still updated on these messages, as on any
trajectory (off-policy: they are not its samples). ``max_turns`` must leave room for one call per
changed file and the submit.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from taskforge import TaskforgeError, rebuild_start_state

if TYPE_CHECKING:
    from taskforge import Task

__all__ = ["GoldReplay"]

_HEADER = re.compile(r"^diff --git a/(.+?) b/(.+)$", re.MULTILINE)


class GoldReplay:
    """The assistant messages that apply a task's gold patch, per task (built once, then reused)."""

    def __init__(self) -> None:
        self._plans: dict[str, list[str]] = {}

    def message(self, task: Task, turn: int) -> str:
        """The assistant message of ``turn`` (0-based) of ``task``'s episode."""
        plan = self._plans.get(task.instance_id)
        if plan is None:
            plan = self._plans[task.instance_id] = self._plan(task)
        return plan[min(turn, len(plan) - 1)]

    @staticmethod
    def _plan(task: Task) -> list[str]:
        paths = sorted({b for _, b in _HEADER.findall(task.patch)})
        with tempfile.TemporaryDirectory(prefix="taskforge-gold-") as tmp:
            repo = Path(tmp) / "repo"
            rebuild_start_state(task, repo)
            before = {p: (repo / p).read_text() if (repo / p).is_file() else None for p in paths}
            applied = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], cwd=repo, input=task.patch,
                                     capture_output=True, text=True)
            if applied.returncode:
                raise TaskforgeError(f"{task.instance_id}: the gold patch does not apply: {applied.stderr[-300:]}",
                                     reason="patch_failed")
            after = {p: (repo / p).read_text() if (repo / p).is_file() else None for p in paths}
        calls = []
        for path in paths:
            old, new = before[path], after[path]
            if new is None or old == new:
                continue
            calls.append({"tool": "edit_file", "args": {"path": path, "old": old or "", "new": new}})
        calls.append({"tool": "submit", "args": {}})
        return [json.dumps(call) for call in calls]

"""What the adversarial suites (``test_scorer.py``, ``test_redteam.py``) write their hacks with: a
task's start state and the module its feature lives in, so a hack goes where a policy would put it.

A hack is a set of changes to the start state (repo-relative path → new text, None to delete),
turned into the unified diff a candidate submits with :meth:`Ctx.patch`: the scorer only ever
sees a patch, never the files.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from taskforge.repo.patches import apply_patch, diff
from taskforge.repo.startstate import rebuild_start_state
from taskforge.task import Task

__all__ = ["Ctx", "context_of"]


@dataclass
class Ctx:
    """A task's start state, and the file its feature lives in (as the gold patch writes it)."""

    task: Task
    start: Path
    gold: dict[str, str | None]
    hidden: dict[str, str | None]
    feature_file: str

    def base(self, on_gold: bool) -> dict[str, str | None]:
        return dict(self.gold) if on_gold else {}

    def text(self, rel: str, changes: dict[str, str | None]) -> str:
        if rel in changes:
            return changes[rel] or ""
        path = self.start / rel
        return path.read_text() if path.is_file() else ""

    def with_code(self, *parts: str, on_gold: bool) -> dict[str, str | None]:
        """The feature's module with the code ``parts`` appended (at module level: it runs on import)."""
        changes = self.base(on_gold)
        code = "".join(textwrap.dedent(part) for part in parts)
        changes[self.feature_file] = self.text(self.feature_file, changes) + "\n" + code
        return changes

    def patch(self, changes: dict[str, str | None]) -> str:
        return diff(self.start, {}, changes)

    def replace_target(self, expression: str) -> str:
        """Module-level code that makes the removed feature evaluate ``expression`` when called."""
        qualname = self.task.target.partition(":")[2]
        if qualname:
            return f"{qualname} = lambda *args, **kwargs: {expression}\n"
        return f"def __getattr__(name):\n    return lambda *args, **kwargs: {expression}\n"


def context_of(task: Task, workdir: Path) -> Ctx:
    """``task``'s start state rebuilt from its row under ``workdir``, with its gold and hidden-test states."""
    start = rebuild_start_state(task, workdir / "repo").path
    feature = re.match(r"diff --git a/(\S+)", task.patch)
    assert feature is not None, task.instance_id
    return Ctx(task=task, start=start, gold=apply_patch(start, {}, task.patch),
               hidden=apply_patch(start, {}, task.test_patch), feature_file=feature.group(1))

"""Unified diffs between states of a snapshot's tree, made and applied with git.

A *state* is the snapshot plus ``changes``: a map from repo-relative path to its new text, or
None for a deleted file. Diffs come from ``git diff`` so that ``git apply`` takes them back
exactly; binary files never change here (removals touch Python sources only).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from taskforge.errors import TaskforgeError

__all__ = ["Changes", "apply_patch", "diff", "materialize"]

Changes = Mapping[str, str | None]

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "taskforge",
    "GIT_AUTHOR_EMAIL": "taskforge@localhost",
    "GIT_COMMITTER_NAME": "taskforge",
    "GIT_COMMITTER_EMAIL": "taskforge@localhost",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}


def _git(repo: Path, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(
        ["git", "-c", "core.autocrlf=false", "-c", "core.quotepath=false", *args],
        cwd=repo,
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **_GIT_ENV},
        check=False,
    )
    if proc.returncode != 0:
        raise TaskforgeError(f"git {args[0]} failed: {proc.stderr.strip()[:300]}", reason="patch_failed")
    return proc.stdout


def _write(root: Path, changes: Changes) -> None:
    for rel, text in changes.items():
        path = root / rel
        if text is None:
            if path.exists():
                path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8", newline="")


@contextmanager
def materialize(snapshot: Path, changes: Changes = {}) -> Iterator[Path]:
    """A scratch clone of the snapshot's commit with ``changes`` written (not committed)."""
    with tempfile.TemporaryDirectory(prefix="taskforge-state-") as tmp:
        work = Path(tmp) / "repo"
        _git(Path(tmp), "clone", "-q", "--no-checkout", "--shared", str(snapshot), str(work))
        _git(work, "checkout", "-q", "HEAD")
        _write(work, changes)
        yield work


def diff(snapshot: Path, old: Changes, new: Changes, *, paths: Callable[[str], bool] = lambda _: True) -> str:
    """The unified diff from state ``old`` to state ``new`` (both relative to the snapshot), limited to ``paths``."""
    with materialize(snapshot, old) as work:
        _git(work, "add", "-A")
        _git(work, "commit", "-q", "--allow-empty", "--no-verify", "-m", "old")
        for rel in sorted(set(old) | set(new)):
            if rel in new:
                _write(work, {rel: new[rel]})
            elif rel in old:  # back to the snapshot's own file, which may be binary (a tracked .pyc)
                _restore(snapshot, work, rel)
        _git(work, "add", "-A")
        selected = [rel for rel in sorted(set(old) | set(new)) if paths(rel)]
        if not selected:
            return ""
        # --binary: a scrubbed binary file (a tracked .pyc) is deleted by a patch git can apply.
        return _git(work, "diff", "--cached", "--binary", "--no-color", "--full-index", "HEAD", "--", *selected)


def _restore(snapshot: Path, work: Path, rel: str) -> None:
    source, target = snapshot / rel, work / rel
    if source.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    elif target.exists():
        target.unlink()


def apply_patch(snapshot: Path, changes: Changes, patch: str) -> dict[str, str | None]:
    """Apply ``patch`` to the state ``changes``; return the resulting state's changes."""
    with materialize(snapshot, changes) as work:
        if patch:
            _git(work, "apply", "--whitespace=nowarn", "-", stdin=patch)
        _git(work, "add", "-A")
        status = _git(work, "diff", "--cached", "--name-status", "--no-renames", "-z", "HEAD")
        fields = status.split("\0")
        result: dict[str, str | None] = {}
        for code, rel in zip(fields[0::2], fields[1::2], strict=False):
            result[rel] = None if code == "D" else (work / rel).read_text(encoding="utf-8")
        return result

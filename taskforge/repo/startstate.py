"""The start state an agent sees: scrubbed of every leftover, in a fresh one-commit git repository.

A task's start state is the snapshot's tracked files, with the removal (and the hidden tests)
applied and every scrubbed path deleted. It is written to a new folder as a new git repository
whose single commit has no parent, under a fixed identity and date, so the same state always has
the same commit: that commit is the task's ``base_commit``. No other ref, no reflog, no hook and
no object of the original history exist in it.

Scrubbing removes what can carry a copy of the removed code or of the hidden tests' names even
when the repository tracks it: bytecode, tool caches (mypy, pytype, pyre, ruff, pytest's
``lastfailed`` node ids, hypothesis), coverage data, tox/nox trees, build output and built docs,
the project's own egg-info, editor and patch leftovers, notebook checkpoints. Untracked files never get in: the
state is built from ``git ls-files``, not from the work tree.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath

from taskforge.errors import TaskforgeError
from taskforge.repo.git import run_git
from taskforge.repo.patches import apply_patch
from taskforge.repo.sources import Snapshot, fetch
from taskforge.task import Task

__all__ = ["START_IDENTITY", "is_scrubbed", "rebuild_start_state", "scrub_changes", "tracked_texts", "write_start_state"]

# Directories removed wherever they appear.
_SCRUB_DIRS = frozenset({
    "__pycache__", ".mypy_cache", ".pytype", ".pyre", ".ruff_cache", ".pytest_cache", ".hypothesis",
    "htmlcov", ".tox", ".nox", ".eggs", ".ipynb_checkpoints", "_build", ".dmypy",
})
# A project's own packaging metadata (its file list names every module, a removed one too), where
# setuptools writes it: at the root or one folder down (``src/NAME.egg-info``). Deeper down such a
# folder is the project's data (a packaging library's tests read ``tests/unit/dodgy/*.egg-info``),
# and the audit reads it like any other file.
_SCRUB_METADATA_GLOBS = ("*.egg-info", "*.dist-info")
_METADATA_DEPTH = 2
# Directories removed only at these places: a package may well have a subpackage named `build`.
_SCRUB_ROOTED = frozenset({"build", "dist", "docs/build", "doc/build", "docs/site"})
# Files removed wherever they appear.
_SCRUB_FILE_GLOBS = (
    "*.pyc", "*.pyo", ".coverage", ".coverage.*", "coverage.xml", ".dmypy.json",
    # Backups and leftovers of editors, merges and patches: a copy of the removed code may sit in any of them.
    "*.orig", "*.rej", "*~", "*.swp", "*.swo", ".*.swp", "#*#", ".#*",
    "*.bak", "*.bak[0-9]", "*.bk", "*.backup", "*.old", "*.save", "*.sav", "*.prev", "*.copy",
    "*.py.[0-9]", "*.py.orig.*", "* copy.py", "* copy [0-9]*.py", "*.py.BACKUP.*", "*.py.BASE.*",
    "*.py.LOCAL.*", "*.py.REMOTE.*",
)

START_IDENTITY = {
    "GIT_AUTHOR_NAME": "taskforge",
    "GIT_AUTHOR_EMAIL": "taskforge@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "taskforge",
    "GIT_COMMITTER_EMAIL": "taskforge@localhost",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}
"""Who and when the start state's commit is: fixed, so the commit depends on the tree alone."""


def is_scrubbed(path: str) -> bool:
    """Whether a repo-relative path is something the start state must not contain."""
    parts = PurePosixPath(path).parts
    for depth, name in enumerate(parts[:-1]):
        if name in _SCRUB_DIRS:
            return True
        if depth < _METADATA_DEPTH and any(fnmatch.fnmatchcase(name, g) for g in _SCRUB_METADATA_GLOBS):
            return True
        if "/".join(parts[: depth + 1]) in _SCRUB_ROOTED:
            return True
    return any(fnmatch.fnmatchcase(parts[-1], g) for g in _SCRUB_FILE_GLOBS)


def _tracked(snapshot: Snapshot) -> list[str]:
    out = _git(snapshot.path, "ls-files", "-z", "--cached")
    return [p for p in out.split("\0") if p and not (snapshot.path / p).is_dir()]  # gitlinks are folders


def scrub_changes(snapshot: Snapshot) -> dict[str, str | None]:
    """The tracked files of ``snapshot`` that scrubbing deletes, as changes (path → None)."""
    return {path: None for path in _tracked(snapshot) if is_scrubbed(path)}


def write_start_state(snapshot: Snapshot, changes: Mapping[str, str | None], dest: Path) -> str:
    """Write the snapshot's tracked files with ``changes`` applied and scrubbed paths left out
    into ``dest`` (which must not exist) as a fresh one-commit repository; return its commit."""
    if dest.exists():
        raise FileExistsError(f"{dest} exists; the start state is written to a new folder")
    dest.mkdir(parents=True)
    for rel in _tracked(snapshot):
        if rel in changes or is_scrubbed(rel):
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(snapshot.path / rel, target, follow_symlinks=False)
    for rel, text in changes.items():
        if text is None or is_scrubbed(rel):
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        if (snapshot.path / rel).exists():
            shutil.copymode(snapshot.path / rel, target)
    # No template: no sample hooks or description to delete afterwards.
    _git(dest, "init", "-q", "-b", "main", "--template=")
    git_dir = dest / ".git"
    config = (git_dir / "config").read_text(encoding="utf-8")  # no reflog (as `git config` would set it)
    (git_dir / "config").write_text(config.replace("logallrefupdates = true", "logallrefupdates = false")
                                    if "logallrefupdates = true" in config
                                    else config + "[core]\n\tlogallrefupdates = false\n", encoding="utf-8")
    # Files the project ignores but tracks (force-added) stay tracked.
    _git(dest, "add", "-A", "-f", ".")
    _git(dest, "commit", "-q", "--no-verify", "--no-gpg-sign", "-m", "start state")
    for leftover in ("logs", "hooks", "COMMIT_EDITMSG", "description", "ORIG_HEAD"):
        path = git_dir / leftover
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    head = git_dir / "refs" / "heads" / "main"
    return head.read_text().strip() if head.is_file() else _git(dest, "rev-parse", "HEAD").strip()


def _git(repo: Path, *args: str) -> str:
    result = run_git(*args, cwd=repo, env={**START_IDENTITY, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull})
    if not result.ok:
        raise TaskforgeError(f"git {args[0]} in {repo} failed: {result.stderr.strip()[:300]}", reason="start_state_failed")
    return result.stdout


def tracked_texts(root: Path, paths: Iterable[str]) -> dict[str, str]:
    """path → text for the given files under ``root`` that decode as UTF-8 (binaries are skipped)."""
    texts: dict[str, str] = {}
    for rel in paths:
        try:
            texts[rel] = (root / rel).read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
    return texts


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

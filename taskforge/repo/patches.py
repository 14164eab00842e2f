"""Unified diffs between states of a snapshot's tree, made and applied with git.

A *state* is the snapshot plus ``changes``: a map from repo-relative path to its new text, or
None for a deleted file. Diffs come from git's own diff machinery so that ``git apply`` takes
them back exactly; binary files never change here (removals touch Python sources only).

States are compared as git trees (:class:`StateTrees`): a scratch index and object store laid
over the snapshot's repository, which is only read. No checkout is written: a state costs one
``update-index`` and one ``write-tree``, whatever the size of the repository.
"""

from __future__ import annotations

import hashlib
import tempfile
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Self

from taskforge.errors import TaskforgeError
from taskforge.repo.git import GitResult, run_git

__all__ = ["Changes", "StateTrees", "apply_patch", "diff", "materialize"]

Changes = Mapping[str, str | None]

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "taskforge",
    "GIT_AUTHOR_EMAIL": "taskforge@localhost",
    "GIT_COMMITTER_NAME": "taskforge",
    "GIT_COMMITTER_EMAIL": "taskforge@localhost",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def _run(repo: Path, *args: str, stdin: str | None = None, env: Mapping[str, str] | None = None) -> GitResult:
    result = run_git(*args, cwd=repo, stdin=stdin, env={**_GIT_ENV, **(env or {})})
    if not result.ok:
        raise TaskforgeError(f"git {args[0]} failed: {result.stderr.strip()[:300]}", reason="patch_failed")
    return result


def _git(repo: Path, *args: str, stdin: str | None = None, env: Mapping[str, str] | None = None) -> str:
    return _run(repo, *args, stdin=stdin, env=env).stdout


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
    selected = [rel for rel in sorted(set(old) | set(new)) if paths(rel)]
    if not selected:
        return ""
    with StateTrees(snapshot) as trees:
        return trees.diff(trees.tree(old), trees.tree(new), selected)


class StateTrees:
    """Git trees of states of one snapshot, and diffs between them, in a scratch index and object
    store: the snapshot's repository lends its objects (as an alternate) and is never written.

    ``with StateTrees(snapshot) as trees: trees.diff(trees.tree(old), trees.tree(new), paths)``
    gives the same bytes as committing ``old`` in a clone and diffing ``new`` against it, without
    the clone and its checkout."""

    def __init__(self, snapshot: Path) -> None:
        self.snapshot = snapshot
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._env: dict[str, str] = {}
        self._modes: dict[str, str] = {}
        """path -> file mode in the snapshot's commit."""
        self._head_tree = ""

    def __enter__(self) -> Self:
        self._tmp = tempfile.TemporaryDirectory(prefix="taskforge-trees-")
        tmp = Path(self._tmp.name)
        (tmp / "objects").mkdir()
        git_dir = _git(self.snapshot, "rev-parse", "--absolute-git-dir").strip()
        self._env = {
            "GIT_DIR": git_dir,
            "GIT_INDEX_FILE": str(tmp / "index"),
            "GIT_OBJECT_DIRECTORY": str(tmp / "objects"),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(Path(git_dir) / "objects"),
            "GIT_LITERAL_PATHSPECS": "1",
        }
        self._head_tree = self._git("rev-parse", "HEAD^{tree}").strip()
        for record in self._git("ls-tree", "-r", "-z", "--full-tree", self._head_tree).split("\0"):
            if record:
                meta, rel = record.split("\t", 1)
                self._modes[rel] = meta.split(" ", 1)[0]
        return self

    def __exit__(self, *exc: object) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def _git(self, *args: str, stdin: str | None = None) -> str:
        return _git(self.snapshot, *args, stdin=stdin, env=self._env)

    def _blob(self, text: str) -> str:
        """Store ``text`` as a loose blob in the scratch store (git's own object format)."""
        data = text.encode("utf-8")
        raw = b"blob %d\0" % len(data) + data
        if len(self._head_tree) != 40:  # a SHA-256 repository: let git hash it
            return self._git("hash-object", "-w", "--no-filters", "--stdin", stdin=text).strip()
        sha = hashlib.sha1(raw, usedforsecurity=False).hexdigest()
        path = Path(self._env["GIT_OBJECT_DIRECTORY"]) / sha[:2] / sha[2:]
        if not path.exists():
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(zlib.compress(raw, 1))
        return sha

    def tree(self, changes: Changes) -> str:
        """The tree of the snapshot's commit with ``changes``."""
        if not changes:
            return self._head_tree
        self._git("read-tree", self._head_tree)
        records = []
        for rel, text in sorted(changes.items()):
            if text is None:
                records.append(f"0 {'0' * len(self._head_tree)}\t{rel}\0")  # the null id: remove
            else:
                mode = self._modes.get(rel, "100644")
                records.append(f"{mode if mode in ('100644', '100755') else '100644'} {self._blob(text)}\t{rel}\0")
        self._git("update-index", "-z", "--index-info", stdin="".join(records))
        return self._git("write-tree").strip()

    def diff(self, old: str, new: str, paths: Sequence[str]) -> str:
        """The unified diff from tree ``old`` to tree ``new``, limited to ``paths`` (all when empty)."""
        # -M: renames found as ``git diff`` finds them; --binary: a scrubbed binary file (a
        # tracked .pyc) is deleted by a patch git can apply.
        return self._git("diff-tree", "-p", "-M", "--binary", "--no-color", "--full-index", old, new, "--", *paths)

    def apply(self, tree: str, patch: str) -> str:
        """The tree that ``git apply`` makes of ``tree`` with ``patch``."""
        if not patch:
            return tree
        self._git("read-tree", tree)
        self._git("apply", "--cached", "--whitespace=nowarn", "-", stdin=patch)
        return self._git("write-tree").strip()


    def changed(self, old: str, new: str) -> list[tuple[str, str, str, str]]:
        """What differs from tree ``old`` to tree ``new``, renames as a deletion and an addition:
        ``(path, status A/M/D/T, new mode, new object id)`` per path."""
        raw = self._git("diff-tree", "-r", "--raw", "--no-renames", "-z", old, new).split("\0")
        found = []
        for meta, rel in zip(raw[0::2], raw[1::2], strict=False):
            fields = meta.lstrip(":").split()
            if len(fields) >= 5:
                found.append((rel, fields[4][:1], fields[1], fields[3]))
        return found

    def blob(self, object_id: str) -> bytes:
        """The bytes of a blob of the snapshot's store or the scratch one."""
        return _run(self.snapshot, "cat-file", "blob", object_id, env=self._env).raw


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
            # Bytes decoded, not text mode: a CRLF file keeps its line ends (read_text would turn
            # them to LF, and a start state rebuilt from the patch would not be the one mined).
            result[rel] = None if code == "D" else (work / rel).read_bytes().decode("utf-8")
        return result

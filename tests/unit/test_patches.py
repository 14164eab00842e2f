"""Diffs between tree states, made and applied with real git."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from taskforge.errors import TaskforgeError
from taskforge.repo.patches import StateTrees, apply_patch, diff


def _repo(root: Path) -> Path:
    root.mkdir()
    (root / "pkg").mkdir()
    (root / "pkg" / "a.py").write_text("def f():\n    return 1\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_a.py").write_text("from pkg.a import f\n\ndef test_f():\n    assert f() == 1\n")
    for cmd in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", *cmd], cwd=root, check=True)
    return root


def test_diff_and_apply_round_trip(tmp_path: Path) -> None:
    repo = _repo(tmp_path / "r")
    start = {"pkg/a.py": "def f():\n    raise NotImplementedError\n", "tests/test_a.py": None}
    removal = diff(repo, {}, start)
    assert "-    return 1" in removal and "deleted file mode" in removal
    patch = diff(repo, start, {}, paths=lambda p: not p.startswith("tests/"))
    test_patch = diff(repo, start, {}, paths=lambda p: p.startswith("tests/"))
    assert "tests/" not in patch and "pkg/" not in test_patch
    assert apply_patch(repo, {}, removal) == start
    assert apply_patch(repo, start, test_patch) == {"pkg/a.py": start["pkg/a.py"]}
    assert apply_patch(repo, start, patch + test_patch) == {}, "gold gives back the original tree"
    assert (repo / "tests" / "test_a.py").exists(), "the snapshot itself is never touched"


def test_a_crlf_file_keeps_its_line_ends_through_a_patch(tmp_path: Path) -> None:
    """A held-out parser generator's ``tree_templates.py`` ends its lines CRLF: the start state
    rebuilt from ``removal_patch`` had LF there, so its commit was not the task's, and the gate
    refused all three of its tasks (``start_state_mismatch``)."""
    repo = _repo(tmp_path / "r")
    (repo / "pkg" / "crlf.py").write_bytes(b"def g():\r\n    return 2\r\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "crlf"], cwd=repo, check=True)
    start = {"pkg/crlf.py": "def g():\r\n    raise NotImplementedError\r\n"}
    removal = diff(repo, {}, start)
    assert apply_patch(repo, {}, removal) == start
    assert apply_patch(repo, start, diff(repo, start, {})) == {}


def test_a_scrubbed_binary_file_is_deleted_by_an_applicable_patch(tmp_path: Path) -> None:
    """Some sdists track bytecode; the start state drops it, and its removal_patch must apply."""
    repo = _repo(tmp_path / "r")
    (repo / "pkg" / "__pycache__").mkdir()
    (repo / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\xa7\r\r\n\x00\x00binary")
    for cmd in (["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "pyc"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True)
    start = {"pkg/a.py": "def f():\n    raise NotImplementedError\n", "pkg/__pycache__/a.cpython-311.pyc": None}
    removal = diff(repo, {}, start)
    assert "GIT binary patch" in removal or "deleted file mode" in removal
    assert apply_patch(repo, {}, removal) == start
    patch = diff(repo, start, {"pkg/__pycache__/a.cpython-311.pyc": None}, paths=lambda p: p.endswith(".py"))
    assert apply_patch(repo, start, patch) == {"pkg/__pycache__/a.cpython-311.pyc": None}


def _clone_diff(repo: Path, tmp: Path, old: dict[str, str | None], new: dict[str, str | None]) -> str:
    """The reference: commit ``old`` in a real clone, write ``new``, ``git diff --cached``."""
    work = tmp / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(work)], check=True)

    def write(changes: dict[str, str | None]) -> None:
        for rel, text in changes.items():
            if text is None:
                (work / rel).unlink(missing_ok=True)
            else:
                (work / rel).parent.mkdir(parents=True, exist_ok=True)
                (work / rel).write_text(text)

    write(old)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "core.quotepath=false"]
    subprocess.run([*git, "add", "-A"], cwd=work, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "old"], cwd=work, check=True)
    for rel in set(old) - set(new):  # back to the snapshot's file, or none if it had none
        restored = subprocess.run([*git, "checkout", "HEAD~1", "--", rel], cwd=work, check=False, capture_output=True)
        if restored.returncode != 0:
            (work / rel).unlink(missing_ok=True)
    write(new)
    subprocess.run([*git, "add", "-A"], cwd=work, check=True)
    return subprocess.run([*git, "diff", "--cached", "--binary", "--no-color", "--full-index", "HEAD"], cwd=work,
                          check=True, capture_output=True, text=True).stdout


def test_state_trees_diff_like_a_clone_does(tmp_path: Path) -> None:
    """Trees in a scratch index give git's own bytes: an edited file, a new file (in a new
    folder, with a non-ASCII name), a deleted one, an executable one edited (its mode kept) and
    a moved one (found as a rename); the snapshot's repository gains no object."""
    repo = _repo(tmp_path / "r")
    (repo / "run.sh").write_text("#!/bin/sh\necho one\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "pkg" / "big.py").write_text("".join(f"line_{i} = {i}\n" for i in range(40)))
    for cmd in (["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "more"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True)
    objects_before = sorted(p.name for p in (repo / ".git" / "objects").rglob("*") if p.is_file())
    big = (repo / "pkg" / "big.py").read_text()
    new = {
        "pkg/a.py": "def f():\n    raise NotImplementedError\n",
        "pkg/sub/ñew.py": "X = 1\n",
        "tests/test_a.py": None,
        "run.sh": "#!/bin/sh\necho two\n",
        "pkg/big.py": None,
        "pkg/moved.py": big + "extra = 1\n",
    }
    with StateTrees(repo) as trees:
        head, state = trees.tree({}), trees.tree(new)
        assert trees.diff(head, state, sorted(new)) == _clone_diff(repo, tmp_path / "a", {}, new)
        assert "rename from pkg/big.py" in trees.diff(head, state, sorted(new))
        assert trees.apply(head, trees.diff(head, state, sorted(new))) == state
        back = trees.diff(state, head, sorted(new))
        assert back == _clone_diff(repo, tmp_path / "b", new, {})
        assert trees.apply(state, back) == head
        with pytest.raises(TaskforgeError, match="git apply failed"):
            trees.apply(head, back)  # the state's own lines are not there to take away
    assert sorted(p.name for p in (repo / ".git" / "objects").rglob("*") if p.is_file()) == objects_before
    assert diff(repo, {}, new) == _clone_diff(repo, tmp_path / "c", {}, new)

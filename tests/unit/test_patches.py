"""Diffs between tree states, made and applied with real git."""

from __future__ import annotations

import subprocess
from pathlib import Path

from taskforge.patches import apply_patch, diff


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

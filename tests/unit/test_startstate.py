"""The start state: scrubbed, one fresh commit, nothing of the original history."""

from __future__ import annotations

import subprocess
import zlib
from pathlib import Path

import pytest

from taskforge.repo.sources import fetch
from taskforge.repo.startstate import is_scrubbed, scrub_changes, write_start_state

ORIGINAL = "def secret_feature(x):\n    return x * 41 + 1  # distinctive original body\n"
REMOVED = "def secret_feature(x):\n    raise NotImplementedError\n"


@pytest.mark.parametrize(
    ("path", "scrubbed"),
    [
        ("pkg/__pycache__/mod.cpython-311.pyc", True),
        ("pkg/orphan.pyc", True),
        (".mypy_cache/3.11/pkg/mod.data.json", True),
        (".pytest_cache/v/cache/lastfailed", True),
        (".hypothesis/examples/ab/cd", True),
        (".coverage", True),
        (".coverage.host.123", True),
        ("htmlcov/index.html", True),
        (".tox/py311/lib/x.py", True),
        ("build/lib/pkg/mod.py", True),
        ("dist/pkg-1.0.tar.gz", True),
        ("src/pkg.egg-info/SOURCES.txt", True),
        ("pkg.egg-info/PKG-INFO", True),
        ("pkg-1.0.dist-info/RECORD", True),
        ("tests/unit/dodgy/namespaced.dodgy-0.1.egg-info/PKG-INFO", False),  # a packaging library's test data
        ("docs/examples/mypackage-0.1.dist-info/METADATA", False),
        ("docs/_build/html/_modules/pkg/mod.html", True),
        ("pkg/mod.py.orig", True),
        ("pkg/mod.py.rej", True),
        ("pkg/mod.py~", True),
        ("pkg/.mod.py.swp", True),
        ("pkg/mod.py.bak", True),
        ("pkg/mod.py.bak2", True),
        ("pkg/mod.py.old", True),
        ("pkg/mod.py.backup", True),
        ("pkg/mod.py.save", True),
        ("pkg/mod.py.1", True),
        ("pkg/mod copy.py", True),
        ("pkg/mod.py.BACKUP.12345.py", True),
        ("pkg/mod.py.orig.1", True),
        ("notebooks/.ipynb_checkpoints/a-checkpoint.ipynb", True),
        ("pkg/mod.py", False),
        ("pkg/build/__init__.py", False),  # a subpackage named build is code
        ("tests/test_build.py", False),
        ("docs/index.rst", False),
        ("pkg/coverage.py", False),
        ("pkg/old.py", False),
        ("pkg/backup.py", False),
        ("setup.py.in", False),
        ("pkg/data/sample.txt", False),
    ],
)
def test_scrub_patterns(path: str, scrubbed: bool) -> None:
    assert is_scrubbed(path) is scrubbed


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def _repo(root: Path) -> Path:
    repo = root / "proj"
    files = {
        "pkg/__init__.py": "",
        "pkg/mod.py": ORIGINAL,
        "pkg/__pycache__/mod.cpython-311.pyc": "compiled copy of secret_feature",
        "build/lib/pkg/mod.py": ORIGINAL,
        "pkg/mod.py.orig": ORIGINAL,
        "tests/test_mod.py": "from pkg.mod import secret_feature\n\ndef test_it():\n    assert secret_feature(1) == 42\n",
        ".gitignore": "build/\n",
    }
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A", "-f")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "original")
    return repo


def test_start_state_is_one_fresh_commit_without_the_original(tmp_path: Path) -> None:
    snapshot = fetch(str(_repo(tmp_path)), cache_dir=tmp_path / "cache")
    assert sorted(scrub_changes(snapshot)) == ["build/lib/pkg/mod.py", "pkg/__pycache__/mod.cpython-311.pyc", "pkg/mod.py.orig"]
    changes = {"pkg/mod.py": REMOVED, "tests/test_mod.py": None}
    commit = write_start_state(snapshot, changes, tmp_path / "a")
    assert write_start_state(snapshot, changes, tmp_path / "b") == commit  # depends on the tree alone
    start = tmp_path / "a"
    files = sorted(_git(start, "ls-files").split())
    assert files == [".gitignore", "pkg/__init__.py", "pkg/mod.py"]
    assert sorted(p.relative_to(start).as_posix() for p in start.rglob("*") if ".git" not in p.parts and p.is_file()) == files
    assert _git(start, "rev-list", "--all").split() == [commit]
    assert _git(start, "log", "--format=%P", "-1").strip() == ""  # no parent
    assert _git(start, "for-each-ref", "--format=%(refname)").split() == ["refs/heads/main"]
    assert not (start / ".git" / "logs").exists() and not (start / ".git" / "hooks").exists()
    # No object anywhere in .git holds the original body.
    for obj in (start / ".git" / "objects").rglob("*"):
        if obj.is_file() and len(obj.parent.name) == 2:
            assert b"distinctive original body" not in zlib.decompress(obj.read_bytes())
    assert (start / "pkg/mod.py").read_text() == REMOVED

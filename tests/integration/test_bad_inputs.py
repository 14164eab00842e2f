"""Bad input gets one clear error line and a non-zero exit, and leaves nothing behind.

These run the real `taskforge` console script in a subprocess, against a real Docker engine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.docker


def _taskforge(*args: str, cache: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "TASKFORGE_CACHE": str(cache), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "taskforge.cli", *args], capture_output=True, text=True, env=environ, timeout=900
    )


def _leftovers(cache: Path) -> list[str]:
    """Half-written cache entries: temporary folders anywhere in the cache."""
    return sorted(str(p.relative_to(cache)) for p in cache.rglob(".tmp*"))


def _assert_clean_failure(proc: subprocess.CompletedProcess[str], *, reason: str, mentions: str) -> None:
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert errors[0].endswith(f"[{reason}]"), errors[0]
    assert mentions in errors[0], errors[0]


@pytest.fixture
def cache(session_cache: Path, base_image, backend):  # type: ignore[no-untyped-def]
    """The session cache (it records the base image); checks that no container or temp dir leaks.

    A leaked container is one whose owner (here the finished CLI process) is gone; containers of
    other live taskforge processes on the machine do not count, and neither do those some earlier,
    killed process left on the engine before the test began (CI may share an engine with them).
    """
    before = set(backend.leaked_containers())
    yield session_cache
    assert sorted(set(backend.leaked_containers()) - before) == []
    assert _leftovers(session_cache) == []


def _pyproject(name: str, extra: str = "") -> str:
    """A minimal setuptools project named ``name``; ``extra`` goes into [project]."""
    return (
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "{name}"\nversion = "0.1"\n{extra}\n'
    )


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_pypi_name_that_does_not_exist(cache: Path) -> None:
    proc = _taskforge("test", "pypi:taskforge-no-such-project-x7q==1.0", cache=cache)
    _assert_clean_failure(proc, reason="source_not_found", mentions="taskforge-no-such-project-x7q")


def test_pypi_version_that_does_not_exist(cache: Path) -> None:
    proc = _taskforge("test", "pypi:iniconfig==999.0.0", cache=cache)
    _assert_clean_failure(proc, reason="source_not_found", mentions="iniconfig==999.0.0")


def test_unreachable_git_url(cache: Path) -> None:
    proc = _taskforge("test", "https://127.0.0.1:9/nobody/nothing.git", cache=cache)
    _assert_clean_failure(proc, reason="source_unreachable", mentions="127.0.0.1:9")


def test_folder_with_no_tests(cache: Path, tmp_path: Path) -> None:
    repo = _write(tmp_path / "notests", {"pkg/__init__.py": "X = 1\n", "README.md": "nothing to test\n"})
    proc = _taskforge("test", str(repo), cache=cache)
    _assert_clean_failure(proc, reason="no_tests", mentions="no pytest tests")


def test_dependency_that_cannot_be_resolved(cache: Path, tmp_path: Path) -> None:
    repo = _write(
        tmp_path / "baddep",
        {
            "pyproject.toml": _pyproject("baddep", 'dependencies = ["taskforge-no-such-dependency-x7q>=1"]'),
            "baddep/__init__.py": "X = 1\n",
            "tests/test_x.py": "def test_x():\n    assert True\n",
        },
    )
    proc = _taskforge("test", str(repo), cache=cache)
    _assert_clean_failure(proc, reason="dependency_unresolvable", mentions="taskforge-no-such-dependency-x7q")


def test_syntax_error_in_the_package(cache: Path, tmp_path: Path) -> None:
    repo = _write(
        tmp_path / "broken",
        {
            "pyproject.toml": _pyproject("broken"),
            "broken/__init__.py": "from broken.core import f\n",
            "broken/core.py": "def f(:\n    return 1\n",
            "tests/test_f.py": "from broken import f\n\ndef test_f():\n    assert f() == 1\n",
        },
    )
    proc = _taskforge("test", str(repo), cache=cache)
    _assert_clean_failure(proc, reason="collection_errors", mentions="SyntaxError")


def test_docker_engine_not_running(cache: Path, tmp_path: Path) -> None:
    proc = _taskforge(
        "test", "pypi:iniconfig==2.3.1", cache=cache, env={"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    )
    _assert_clean_failure(proc, reason="sandbox_unavailable", mentions="Docker engine is not reachable")


def test_a_bug_of_ours_on_one_repository_is_recorded_not_raised(cache: Path, tmp_path: Path) -> None:
    """An unexpected exception inside mining one repository (here a scorer factory that crashes)
    comes back as that repository's failure, ``internal_error``, naming where it came from; the
    run that called it goes on."""
    from taskforge.mining.config import MineConfig
    from taskforge.mining.run import INTERNAL_ERROR, mine_one
    from taskforge.sandbox import SandboxLimits

    def crashing_factory(backend, limits, timeout_s):  # type: ignore[no-untyped-def]
        raise ZeroDivisionError("the scorer could not be made")

    outcome = mine_one("pypi:iniconfig==2.3.1", MineConfig(), SandboxLimits(), crashing_factory)
    assert outcome.reason == INTERNAL_ERROR
    assert outcome.rows == []
    assert "ZeroDivisionError: the scorer could not be made" in outcome.failure
    assert "crashing_factory" in outcome.failure and outcome.failure.endswith(f"[{INTERNAL_ERROR}]")

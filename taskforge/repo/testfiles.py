"""Which files of a repository are tests: what the project's own pytest configuration says.

pytest collects test modules by ``python_files`` (default ``test_*.py`` and ``*_test.py``), from
``testpaths`` when it is given. A project may set both: Django-style apps keep their tests in
``tests.py`` (``python_files = "tests.py"``), others in ``check_*.py``. :class:`TestLayout` is that
answer, asked of pytest itself in the sandbox (``SuiteRunner.layout``), so every stage that must
tell tests from source (the symbol index, the removal, hiding, the split of ``patch`` and
``test_patch``) agrees with what pytest runs.

A file is test code when pytest would collect it as a test module (its name matches a
``python_files`` pattern), when it is a ``conftest.py``, or when it sits in a ``tests``, ``test``
or ``testing`` folder (helpers and fixtures of the suite). ``DEFAULT_LAYOUT`` is pytest's default
configuration; it is what stages use before pytest has been asked, and what the scorer uses.
"""

from __future__ import annotations

import configparser
import fnmatch
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["CONFIG_FILES", "DEFAULT_LAYOUT", "DEFAULT_PYTHON_FILES", "TEST_DIRS", "TestLayout", "UnreadableConfig",
           "configures_python_files", "is_test_path", "pytest_section"]

DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")
TEST_DIRS = frozenset({"tests", "test", "testing"})
CONFIG_FILES = ("pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "pyproject.toml", "tox.ini", "setup.cfg")
"""The files pytest 9 reads its configuration from."""
_INI_SECTIONS = {"pytest.ini": "pytest", ".pytest.ini": "pytest", "tox.ini": "pytest", "setup.cfg": "tool:pytest"}


@dataclass(frozen=True, kw_only=True, slots=True)
class TestLayout:
    """How a project's pytest configuration lays out its tests."""

    __test__ = False  # not a pytest class

    python_files: tuple[str, ...] = DEFAULT_PYTHON_FILES
    """Glob patterns of test module names (pytest's ``python_files``)."""
    testpaths: tuple[str, ...] = ()
    """Where pytest looks for tests when given no paths (pytest's ``testpaths``); empty: everywhere."""

    def is_test_file(self, rel: str | PurePosixPath) -> bool:
        """Whether the repository path ``rel`` is test code (see the module docstring)."""
        path = PurePosixPath(rel)
        if path.name == "conftest.py" or any(part in TEST_DIRS for part in path.parts[:-1]):
            return True
        return path.suffix == ".py" and any(_matches(pattern, path) for pattern in self.python_files)

    def test_modules(self, paths: Iterable[str]) -> list[str]:
        """Of ``paths``, the ones pytest would collect as test modules (``python_files``)."""
        return sorted(p for p in paths if p.endswith(".py") and PurePosixPath(p).name != "conftest.py"
                      and any(_matches(pattern, PurePosixPath(p)) for pattern in self.python_files))

    def to_json(self) -> dict[str, Any]:
        return {"python_files": list(self.python_files), "testpaths": list(self.testpaths)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TestLayout:
        return cls(python_files=tuple(str(p) for p in data.get("python_files") or DEFAULT_PYTHON_FILES),
                   testpaths=tuple(str(p) for p in data.get("testpaths") or ()))


def _matches(pattern: str, path: PurePosixPath) -> bool:
    # As pytest's fnmatch_ex: a pattern without a separator matches the file name alone.
    if "/" not in pattern:
        return fnmatch.fnmatch(path.name, pattern)
    return fnmatch.fnmatch(path.as_posix(), pattern) or fnmatch.fnmatch(path.as_posix(), f"*/{pattern}")


DEFAULT_LAYOUT = TestLayout()


def is_test_path(rel: str | PurePosixPath) -> bool:
    """Test code under pytest's default configuration (``DEFAULT_LAYOUT``)."""
    return DEFAULT_LAYOUT.is_test_file(rel)


class UnreadableConfig(ValueError):
    """A pytest configuration file that does not parse."""


def pytest_section(name: str, text: str) -> Mapping[str, Any] | None:
    """The pytest table a configuration file named ``name`` holds, as pytest reads it (None: none
    there): pyproject.toml's ``[tool.pytest]`` (with its ``ini_options``), pytest.toml's
    ``[pytest]``, an ini file's ``[pytest]`` or setup.cfg's ``[tool:pytest]``. Raises
    :class:`UnreadableConfig` for a file that does not parse. Shared by mining (which options the
    project sets) and the scorer (whether a candidate changed them)."""
    if name.endswith(".toml"):
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise UnreadableConfig(str(err)) from err
        table = data.get("tool", {}).get("pytest") if name == "pyproject.toml" else data.get("pytest")
        return table if isinstance(table, dict) else None
    section = _INI_SECTIONS.get(name)
    if section is None:
        return None
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error as err:
        raise UnreadableConfig(str(err)) from err
    return dict(parser.items(section)) if parser.has_section(section) else None


def configures_python_files(repo: Path) -> bool:
    """Whether one of the repository's pytest configuration files sets ``python_files``: then
    pytest's default names say nothing about where its tests are. Read as pytest reads them (a
    comment that mentions the option sets nothing); a file that does not parse counts as setting
    it, so that pytest itself is asked."""
    for name in CONFIG_FILES:
        path = repo / name
        try:
            if not path.is_file():
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if "python_files" not in text:
            continue
        try:
            table = pytest_section(name, text) or {}
        except UnreadableConfig:
            return True
        if "python_files" in table or "python_files" in (table.get("ini_options") or {}):
            return True
    return False

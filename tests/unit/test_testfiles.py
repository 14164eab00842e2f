"""Which files are tests (taskforge.repo.testfiles), which ids are doctests (taskforge.task), and what
the scorer's tamper rules make of a module that holds doctests."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskforge.repo.testfiles import (
    DEFAULT_LAYOUT,
    TestLayout,
    configures_python_files,
    is_test_path,
)
from taskforge.scoring.tamper import TestPaths, classify_change
from taskforge.task import is_ambiguous_doctest_id, is_doctest_id


@pytest.mark.parametrize("path,expected", [
    ("tests/test_x.py", True), ("src/pkg/mod_test.py", True), ("pkg/conftest.py", True),
    ("pkg/tests/helpers.py", True), ("pkg/testing/fixtures.py", True), ("test/data/sample.json", True),
    ("pkg/mod.py", False), ("pkg/tests.py", False), ("pkg/testing.py", False), ("tests.py", False),
])
def test_the_default_layout_is_pytests_defaults_plus_test_folders(path: str, expected: bool) -> None:
    assert is_test_path(path) is expected
    assert DEFAULT_LAYOUT.is_test_file(path) is expected


def test_a_configured_layout_follows_python_files() -> None:
    layout = TestLayout(python_files=("tests.py", "check_*.py"), testpaths=("pkg",))
    assert layout.is_test_file("pkg/tests.py") and layout.is_test_file("pkg/check_generated.py")
    assert not layout.is_test_file("pkg/test_mod.py")  # the defaults no longer apply
    assert layout.is_test_file("pkg/tests/anything.py") and layout.is_test_file("conftest.py")
    assert layout.test_modules(["pkg/tests.py", "pkg/words.py", "pkg/check_a.py", "conftest.py"]) == [
        "pkg/check_a.py", "pkg/tests.py"]
    assert TestLayout.from_json(layout.to_json()) == layout
    # A pattern with a folder matches the path, as pytest's fnmatch_ex does.
    assert TestLayout(python_files=("suite/*.py",)).is_test_file("pkg/suite/a.py")


@pytest.mark.parametrize("nodeid,expected", [
    ("pkg/mod.py::pkg.mod.func", True), ("pkg/mod.py::pkg.mod", True), ("mod.py::mod", False),
    ("pkg/check_words.py::check_words", False),  # a test under python_functions = check_*
    ("src/pkg/mod.py::pkg.mod.Class.method", True),
    ("tests/test_x.py::test_f", False), ("tests/test_x.py::test_f[a.b]", False),
    ("tests/test_x.py::TestC::test_m", False), ("tests/test_x.py::test_x", False),
    ("README.rst::README.rst", False), ("docs/index.md::index.md", False),
])
def test_doctest_ids(nodeid: str, expected: bool) -> None:
    assert is_doctest_id(nodeid) is expected


def test_a_module_docstrings_doctest_id_is_ambiguous_outside_test_modules() -> None:
    assert is_ambiguous_doctest_id("mod.py::mod", test_module=False)
    assert not is_ambiguous_doctest_id("pkg/check_words.py::check_words", test_module=True)
    assert not is_ambiguous_doctest_id("pkg/mod.py::pkg.mod.func", test_module=False)
    assert not is_ambiguous_doctest_id("tests/test_x.py::TestX::test_x", test_module=True)


def test_a_module_holding_doctests_is_source_to_the_scorer() -> None:
    """Gold restores pkg/words.py, whose other doctests are PASS_TO_PASS: not tampering."""
    tests = TestPaths.of(["pkg/words.py::pkg.words.count", "pkg/tests.py::test_count[a b.py]"], ["pkg/tests.py"])
    assert tests.protected == frozenset({"pkg/tests.py"})
    assert classify_change("pkg/words.py", "modified", before="x = 1\n", after="x = 2\n", binary=False,
                           tests=tests) == ("keep", "")
    assert classify_change("pkg/tests.py", "modified", before="x = 1\n", after="x = 2\n", binary=False,
                           tests=tests)[0] == "tamper"


@pytest.mark.parametrize("layout", [DEFAULT_LAYOUT, TestLayout(python_files=("tests.py", "check_*.py"),
                                                                 testpaths=("pkg/tests",))])
@pytest.mark.parametrize("path", [
    "pkg/testing/x.py", "pkg/tests/helpers.py", "test/util.py", "tests/test_a.py", "pkg/mod_test.py",
    "pkg/tests.py", "pkg/check_x.py", "pkg/mod.py", "pkg/testing.py", "docs/conf.py", "src/pkg/core.py",
])
def test_mining_and_scoring_agree_on_every_test_file(layout: TestLayout, path: str) -> None:
    """What mining may put in a gold patch (source: not a test file of the layout) is exactly what
    the scorer keeps of a candidate's edit; a test file's edit is dropped, never kept. One
    definition (TestLayout.is_test_file, is_test_path for the default) decides both."""
    mining_says_test = layout.is_test_file(path)
    verdict, _ = classify_change(path, "modified", before="x = 1\n", after="x = 2\n", binary=False,
                                 tests=TestPaths.of([], [], layout=layout))
    assert (verdict == "drop") is mining_says_test and (verdict == "keep") is (not mining_says_test)
    if layout is DEFAULT_LAYOUT:
        assert is_test_path(path) is mining_says_test


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("pytest.ini", "[pytest]\npython_files = tests.py\n", True),
        ("tox.ini", "[pytest]\npython_files = check_*.py\n", True),
        ("tox.ini", "[tox]\n# python_files is pytest's, not ours\n", False),
        ("setup.cfg", "[tool:pytest]\npython_files = tests.py\n", True),
        ("setup.cfg", "[flake8]\nfilename = python_files.py\n", False),
        ("pyproject.toml", "[tool.pytest.ini_options]\npython_files = ['tests.py']\n", True),
        ("pyproject.toml", "[tool.pytest]\npython_files = ['tests.py']\n", True),
        # A comment that mentions the option sets nothing (the onefile fixture's own).
        ("pyproject.toml", "# pytest's default python_files does not match tests.py\n[project]\nname = 'x'\n", False),
        ("pyproject.toml", "python_files = [unclosed\n", True),  # unreadable: pytest is asked
    ],
)
def test_whether_a_configuration_sets_python_files(name: str, text: str, expected: bool, tmp_path: Path) -> None:
    (tmp_path / name).write_text(text)
    assert configures_python_files(tmp_path) is expected


def test_pytest_9s_own_toml_file_is_read(tmp_path: Path) -> None:
    """pytest 9 reads pytest.toml's ``[pytest]`` table; the list before this missed the file."""
    (tmp_path / "pytest.toml").write_text("[pytest]\npython_files = ['check_*.py']\n")
    assert configures_python_files(tmp_path)

"""taskforge.hiding: hidden tests are gone, and pytest still collects every other test.

The real-project tests hide a sample of a real suite's node ids, then let pytest collect the result:
what is left must be the original collection minus exactly the hidden functions (every
parametrization of each). Small synthetic files pin the edge cases.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from taskforge.errors import TaskforgeError
from taskforge.hiding import hide_tests
from taskforge.sources import fetch


def collect(work: Path, *args: str) -> list[str]:
    """The node ids pytest collects in ``work``, run in a subprocess."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *args],
        cwd=work,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(work / "src")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return [line for line in result.stdout.splitlines() if "::" in line]


def function_of(nodeid: str) -> str:
    return nodeid.split("[", 1)[0]


def defined_in_place(work: Path, nodeid: str) -> bool:
    """Whether the id's function is defined in the class it names (not inherited from a mixin)."""
    path, *names = function_of(nodeid).split("::")
    scope: list[ast.stmt] = ast.parse((work / path).read_text()).body
    for name in names:
        definitions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        found = [n for n in scope if isinstance(n, definitions) and n.name == name]
        if not found:
            return False
        scope = found[0].body if isinstance(found[0], ast.ClassDef) else []
    return True


def apply(work: Path, changes: dict[str, str | None]) -> None:
    for rel, text in changes.items():
        if text is None:
            (work / rel).unlink()
        else:
            (work / rel).write_text(text)


@pytest.mark.parametrize(
    ("spec", "test_dir", "whole_file"),
    [
        ("pypi:iniconfig==2.3.1", "testing", None),
        ("pypi:boltons==26.2.0", "tests", "tests/test_statsutils_histogram.py"),
    ],
)
def test_hidden_tests_are_exactly_the_ones_named(
    spec: str, test_dir: str, whole_file: str | None, session_cache: Path, tmp_path: Path
) -> None:
    snapshot = fetch(spec, cache_dir=session_cache / "sources")
    work = tmp_path / "work"
    shutil.copytree(snapshot.path, work, ignore=shutil.ignore_patterns(".git"))
    before = collect(work, test_dir)
    # Every 5th test, plus (for boltons) a whole file; parametrized ids, classes and
    # unittest classes with mixins come along.
    sample = [nodeid for i, nodeid in enumerate(before) if i % 5 == 0 or (whole_file and nodeid.startswith(whole_file))]
    hidden = [nodeid for nodeid in sample if defined_in_place(work, nodeid)]
    assert any("[" in nodeid for nodeid in hidden)
    inherited = sorted(set(sample) - set(hidden))  # boltons' unittest classes inherit from a mixin
    if inherited:
        with pytest.raises(TaskforgeError, match="is inherited from") as info:
            hide_tests(work, inherited[:1])
        assert info.value.reason == "unhideable_test"
    snapshot_text = {p: p.read_bytes() for p in snapshot.path.rglob("*.py")}
    changes = hide_tests(work, hidden)
    assert {p: p.read_bytes() for p in snapshot.path.rglob("*.py")} == snapshot_text  # wrote nothing
    assert list(changes) == sorted(changes)
    assert all(not Path(path).name.startswith("conftest") for path in changes)
    if whole_file:
        assert changes[whole_file] is None
    apply(work, changes)
    after = collect(work, test_dir)
    gone = {function_of(nodeid) for nodeid in hidden}
    assert after == [nodeid for nodeid in before if function_of(nodeid) not in gone]


def test_remaining_tests_still_pass(session_cache: Path, tmp_path: Path) -> None:
    snapshot = fetch("pypi:iniconfig==2.3.1", cache_dir=session_cache / "sources")
    work = tmp_path / "work"
    shutil.copytree(snapshot.path, work, ignore=shutil.ignore_patterns(".git"))
    before = collect(work, "testing")
    apply(work, hide_tests(work, before[::3]))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "testing"],
        cwd=work,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(work / "src")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]


# --- synthetic files -----------------------------------------------------------------------------


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text).lstrip("\n"))


TEST_X = '''
    import pytest

    from helpers import make


    @pytest.fixture
    def thing():
        return make()


    # Parametrized over three cases.
    @pytest.mark.parametrize("n", [1, 2, 3])
    def test_param(n, thing):
        assert n


    def test_plain():
        assert True


    class TestOuter:
        def helper(self):
            return 1

        def test_a(self):
            assert self.helper()

        class TestInner:
            def test_b(self):
                assert True

        def test_c(self):
            assert True


    class TestBase:
        def test_shared(self):
            assert True


    class TestChild(TestBase):
        def test_own(self):
            assert True
    '''


def test_parametrized_ids_hide_the_whole_function(tmp_path: Path) -> None:
    write(tmp_path, {"tests/test_x.py": TEST_X})
    changes = hide_tests(tmp_path, ["tests/test_x.py::test_param[2]", "tests/test_x.py::test_param[3]"])
    new = changes["tests/test_x.py"]
    assert new is not None and "test_param" not in new and "Parametrized" not in new
    assert new == textwrap.dedent(TEST_X).lstrip("\n").replace(
        '\n\n# Parametrized over three cases.\n@pytest.mark.parametrize("n", [1, 2, 3])\n'
        "def test_param(n, thing):\n    assert n\n",
        "",
    )


def test_classes_and_nested_classes(tmp_path: Path) -> None:
    write(tmp_path, {"tests/test_x.py": TEST_X})
    # The inner class loses its only test: it goes. The outer class keeps test_c.
    new = hide_tests(tmp_path, ["tests/test_x.py::TestOuter::TestInner::test_b", "tests/test_x.py::TestOuter::test_a"])
    text = new["tests/test_x.py"]
    assert text is not None
    assert "class TestInner" not in text and "def test_a" not in text
    assert "    def helper(self):\n        return 1\n\n    def test_c(self):" in text
    # Then test_c: the outer class has no test left, so it goes, helper and all.
    new = hide_tests(
        tmp_path,
        [
            "tests/test_x.py::TestOuter::TestInner::test_b",
            "tests/test_x.py::TestOuter::test_a",
            "tests/test_x.py::TestOuter::test_c",
        ],
    )
    text = new["tests/test_x.py"]
    assert text is not None and "TestOuter" not in text and "class TestBase" in text
    # A base class stays while a subclass names it, even with no test of its own left.
    new = hide_tests(
        tmp_path,
        ["tests/test_x.py::TestBase::test_shared", "tests/test_x.py::TestChild::test_shared"],
    )
    text = new["tests/test_x.py"]
    assert text is not None and "class TestBase:\n    pass\n" in text and "def test_own" in text


def test_inherited_tests_cannot_be_hidden_alone(tmp_path: Path) -> None:
    write(tmp_path, {"tests/test_x.py": TEST_X})
    for ids, message in [
        (["tests/test_x.py::TestChild::test_shared"], "is inherited from TestBase"),
        (["tests/test_x.py::TestBase::test_shared"], "also hides TestChild::test_shared"),
    ]:
        with pytest.raises(TaskforgeError, match=message) as info:
            hide_tests(tmp_path, ids)
        assert info.value.reason == "unhideable_test"


def test_a_file_left_without_tests_is_deleted(tmp_path: Path) -> None:
    write(
        tmp_path,
        {
            "tests/conftest.py": """
                def test_in_conftest():
                    pass
                """,
            "tests/helpers.py": "def make():\n    return 1\n",
            "tests/test_x.py": TEST_X,
            "tests/test_y.py": """
                import pytest


                @pytest.fixture
                def value():
                    return 1


                def test_only(value):
                    assert value
                """,
        },
    )
    every = [
        "tests/test_x.py::test_param[1]",
        "tests/test_x.py::test_plain",
        "tests/test_x.py::TestOuter::test_a",
        "tests/test_x.py::TestOuter::test_c",
        "tests/test_x.py::TestOuter::TestInner::test_b",
        "tests/test_x.py::TestBase::test_shared",
        "tests/test_x.py::TestChild::test_shared",
        "tests/test_x.py::TestChild::test_own",
        "tests/test_y.py::test_only",
        "tests/conftest.py::test_in_conftest",
    ]
    changes = hide_tests(tmp_path, every)
    # Only imports, a fixture and helpers were left: the files go. conftest.py stays.
    assert changes == {
        "tests/conftest.py": "\n",
        "tests/test_x.py": None,
        "tests/test_y.py": None,
    }
    # A test module that another file imports is kept, emptied of tests.
    (tmp_path / "tests/test_z.py").write_text("from test_y import value\n")
    changes = hide_tests(tmp_path, ["tests/test_y.py::test_only"])
    assert changes == {"tests/test_y.py": "import pytest\n\n\n@pytest.fixture\ndef value():\n    return 1\n"}


@pytest.mark.parametrize(
    "nodeid",
    [
        "src/pkg/mod.py::pkg.mod.function",  # a doctest
        "tests/test_x.py::tests.test_x",  # a module doctest
        "README.rst::README.rst",  # a text-file doctest
        "docs/index.md",
        "tests/test_x.py::test_missing",
        "tests/test_nofile.py::test_a",
    ],
)
def test_unhideable_ids(nodeid: str, tmp_path: Path) -> None:
    write(tmp_path, {"tests/test_x.py": TEST_X, "src/pkg/mod.py": "def function():\n    '''>>> 1\n    1'''\n"})
    with pytest.raises(TaskforgeError) as info:
        hide_tests(tmp_path, [nodeid])
    assert info.value.reason == "unhideable_test"


def test_parameters_may_hold_anything(tmp_path: Path) -> None:
    write(tmp_path, {"tests/test_x.py": TEST_X})
    changes = hide_tests(tmp_path, ["tests/test_x.py::test_plain[a::b-[c]]"])
    text = changes["tests/test_x.py"]
    assert text is not None and "test_plain" not in text and "test_param" in text


def test_syntax_error(tmp_path: Path) -> None:
    write(tmp_path, {"tests/test_bad.py": "def test_a(:\n    pass\n"})
    with pytest.raises(TaskforgeError) as info:
        hide_tests(tmp_path, ["tests/test_bad.py::test_a"])
    assert info.value.reason == "syntax_error"

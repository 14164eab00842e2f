"""taskforge.mining.detach: a gathering module loses the imports of the test modules a removal
broke, and pytest collects every other test it gathers.

The project is small and synthetic, but every verdict is pytest's own: the removal is made, pytest
collects the gathering module and fails, the error's traceback names the module that broke, and
after the detach and that module's deletion pytest collects exactly the other tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from taskforge.mining.detach import (
    detach_imports,
    detach_point,
    detached_changes,
    owned_by,
)
from taskforge.mining.hiding import ClassIndex
from taskforge.repo.junit import parse_junit
from taskforge.repo.testfiles import TestLayout

LAYOUT = TestLayout(python_files=("__main__.py",), testpaths=("tests",))

FILES = {
    "pytest.ini": "[pytest]\npython_files = __main__.py\ntestpaths = tests\n",
    "pkg/__init__.py": "",
    "pkg/words.py": "def shout(text):\n    return text.upper()\n\n\ndef whisper(text):\n    return text.lower()\n",
    "tests/__init__.py": "",
    "tests/__main__.py": textwrap.dedent("""\
        import unittest

        from .test_loud import TestLoud
        from .test_quiet import TestQuiet, TestQuieter  # two classes of one module
        from .test_more import *  # noqa: F403
        from . import test_misc, test_more

        try:
            from .test_optional import TestOptional
        except ImportError:
            pass

        if __name__ == "__main__":
            unittest.main()
        """),
    "tests/test_loud.py": textwrap.dedent("""\
        import unittest

        from pkg.words import shout


        class TestLoud(unittest.TestCase):
            def test_shout(self):
                self.assertEqual(shout("a"), "A")
        """),
    "tests/test_quiet.py": textwrap.dedent("""\
        import unittest

        from pkg.words import whisper


        class TestQuiet(unittest.TestCase):
            def test_whisper(self):
                self.assertEqual(whisper("A"), "a")


        class TestQuieter(TestQuiet):
            pass
        """),
    "tests/test_more.py": "import unittest\n\n\nclass TestMore(unittest.TestCase):\n    def test_more(self):\n        pass\n",
    "tests/test_misc.py": "import unittest\n\n\nclass TestMisc(unittest.TestCase):\n    def test_misc(self):\n        pass\n",
    "tests/test_optional.py": textwrap.dedent("""\
        import unittest

        from pkg.words import shout


        class TestOptional(unittest.TestCase):
            def test_optional(self):
                self.assertEqual(shout("b"), "B")
        """),
}


def _write(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text, encoding="utf-8")


def _pytest(root: Path) -> tuple[set[str], list]:  # type: ignore[type-arg]
    report = root / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"],
                   cwd=root, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(root)},
                   capture_output=True, text=True, timeout=120)
    parsed = parse_junit(report.read_bytes(), known_paths=[p.relative_to(root).as_posix() for p in root.rglob("*.py")])
    return {t for t, r in parsed.results.items() if r.outcome == "passed"}, list(parsed.collection_errors)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    _write(root, FILES)
    return root


def test_the_broken_module_is_found_detached_and_the_rest_still_runs(project: Path) -> None:
    baseline, errors = _pytest(project)
    assert not errors and len(baseline) == 5, (baseline, errors)
    index = ClassIndex(project, layout=LAYOUT)
    assert {t: set(index.import_path(t)) for t in baseline} == {
        "tests/__main__.py::TestLoud::test_shout": {"tests/test_loud.py"},
        "tests/__main__.py::TestQuiet::test_whisper": {"tests/test_quiet.py"},
        "tests/__main__.py::TestQuieter::test_whisper": {"tests/test_quiet.py"},
        "tests/__main__.py::TestMore::test_more": {"tests/test_more.py"},  # by the * import
        "tests/__main__.py::TestOptional::test_optional": {"tests/test_optional.py"},
    }
    # The removal: whisper goes. The gathering module no longer imports, and the error says why.
    (project / "pkg/words.py").write_text("def shout(text):\n    return text.upper()\n")
    passed, errors = _pytest(project)
    (error,) = errors
    assert not passed and error.location == "tests/__main__.py"
    assert detach_point(error, LAYOUT, index, {}) == ("tests/__main__.py", "tests/test_quiet.py")
    detached = {"tests/__main__.py": {"tests/test_quiet.py"}}
    assert owned_by(index, baseline, detached) == {"tests/__main__.py::TestQuiet::test_whisper",
                                                    "tests/__main__.py::TestQuieter::test_whisper"}
    owned = owned_by(index, baseline, detached)
    changes = detached_changes(index, detached)
    assert list(changes) == ["tests/__main__.py"]
    assert "test_quiet" not in changes["tests/__main__.py"] and "from .test_loud import TestLoud" in changes["tests/__main__.py"]
    _write(project, {path: text for path, text in changes.items() if text is not None})
    (project / "tests/test_quiet.py").unlink()
    passed, errors = _pytest(project)
    assert not errors and passed == baseline - owned


def test_a_name_of_a_from_import_a_block_left_empty_and_a_plain_import(project: Path) -> None:
    index = ClassIndex(project, layout=LAYOUT)
    text = detach_imports(index, "tests/__main__.py", {"tests/test_more.py", "tests/test_optional.py"})
    assert text is not None and "test_more" not in text and "test_optional" not in text
    assert "from . import test_misc\n" in text  # the other name of the statement stays
    assert "try:\n    pass\nexcept ImportError:\n    pass\n" in text  # an emptied block gets pass
    compile(text, "tests/__main__.py", "exec")
    text = detach_imports(index, "tests/__main__.py", {"tests/test_loud.py", "tests/test_quiet.py"})
    assert text is not None and "test_loud" not in text and "test_quiet" not in text
    assert text == FILES["tests/__main__.py"].replace(  # only the two statements go (the blank line above them too)
        "\nfrom .test_loud import TestLoud\nfrom .test_quiet import TestQuiet, TestQuieter  # two classes of one module\n", "", 1)
    assert detach_imports(index, "tests/__main__.py", {"pkg/other.py"}) is None
    _write(project, {"tests/__main__.py": "import tests.test_loud, tests.test_more\nfrom .test_quiet import *; import unittest\n"})
    index = ClassIndex(project, layout=LAYOUT)
    assert detach_imports(index, "tests/__main__.py", {"tests/test_loud.py", "tests/test_quiet.py"}) == (
        "import tests.test_more\nimport unittest\n")


CASES = {
    # A helper between: the import is dropped there, and only the classes it passed on are lost.
    "a module between imports the test modules": (
        {"tests/__main__.py": "from .suites import *  # noqa: F403\n",
         "tests/suites.py": "from .test_loud import TestLoud\nfrom .test_quiet import TestQuiet\n"},
        ("tests/suites.py", "tests/test_quiet.py"), {"tests/__main__.py::TestQuiet::test_whisper"}),
    # Both branches bind the name: the test goes with the branch that runs.
    "an if and its else import the class from two modules": (
        {"tests/__main__.py": "import sys\n\nfrom .test_loud import TestLoud\n\nif sys.version_info >= (3, 8):\n"
                              "    from .test_quiet import TestQuiet\nelse:\n    from .test_more import TestMore as TestQuiet\n"},
        ("tests/__main__.py", "tests/test_quiet.py"), {"tests/__main__.py::TestQuiet::test_whisper"}),
    "an import in a block on its line": (
        {"tests/__main__.py": "import sys\n\nfrom .test_loud import TestLoud\n\nif sys: from .test_quiet import TestQuiet\n"},
        ("tests/__main__.py", "tests/test_quiet.py"), {"tests/__main__.py::TestQuiet::test_whisper"}),
    # A * import of a module that imports its base class from a third file: through that module.
    "a class a * import passes on from a third file": (
        {"tests/__main__.py": "from .test_loud import TestLoud\nfrom .test_quiet import *  # noqa: F403\n",
         "tests/base.py": "import unittest\n\n\nclass TestBase(unittest.TestCase):\n    def test_base(self):\n        pass\n",
         "tests/test_quiet.py": FILES["tests/test_quiet.py"] + "\n\nfrom .base import TestBase  # noqa: E402\n"},
        ("tests/__main__.py", "tests/test_quiet.py"),
        {"tests/__main__.py::TestQuiet::test_whisper", "tests/__main__.py::TestQuieter::test_whisper",
         "tests/__main__.py::TestBase::test_base"}),
    # The module uses what it imported: no import can be dropped, the candidate keeps today's rule.
    "the collected module lists the classes it imported": (
        {"tests/__main__.py": "from .test_loud import TestLoud\nfrom .test_quiet import TestQuiet\n\nALL = [TestLoud, TestQuiet]\n"},
        None, set()),
    # A module between that uses what it imports (a base class): the point moves up, to it.
    "a test module that subclasses the broken one's class goes with it": (
        {"tests/__main__.py": "from .test_loud import TestLoud\nfrom .test_more import TestMore\n",
         "tests/test_loud.py": FILES["tests/test_loud.py"] + "\n\nfrom .test_quiet import TestQuiet  # noqa: E402\n\n\n"
                               "class TestLouder(TestQuiet):\n    pass\n"},
        ("tests/__main__.py", "tests/test_loud.py"), {"tests/__main__.py::TestLoud::test_shout"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_where_the_import_is_dropped_and_which_tests_go(project: Path, case: str) -> None:
    files, point, lost = CASES[case]
    for path in ("tests/test_more.py", "tests/test_misc.py", "tests/test_optional.py"):
        if path not in files.get("tests/__main__.py", "") and not any(path.rpartition("/")[2][:-3] in t for t in files.values()):
            (project / path).unlink()
    _write(project, files)
    baseline, errors = _pytest(project)
    assert not errors and baseline, (baseline, errors)
    index = ClassIndex(project, layout=LAYOUT)
    (project / "pkg/words.py").write_text("def shout(text):\n    return text.upper()\n")  # whisper goes
    _, errors = _pytest(project)
    (error,) = errors
    assert detach_point(error, LAYOUT, index, {}) == point
    if point is None:
        return
    detached = {point[0]: {point[1]}}
    assert owned_by(index, baseline, detached) == lost
    _write(project, {path: text for path, text in detached_changes(index, detached).items() if text is not None})
    (project / point[1]).unlink()
    passed, errors = _pytest(project)
    assert not errors and passed == baseline - lost

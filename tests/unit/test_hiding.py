"""taskforge.mining.hiding: hidden tests are gone, and pytest still collects every other test.

The real-project tests hide a sample of a real suite's node ids, then let pytest collect the result:
what is left must be the original collection minus exactly the hidden functions, with every
parametrization of each and every copy in a class that inherits one. Which collected tests are
copies of which definition is told by Python itself: a small pytest plugin
(``tests/fixtures/hiding/definers_plugin.py``) walks each test class's real ``__mro__``, the
reference for the static resolution ``hide_tests`` does. Small synthetic files pin the edge cases.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from taskforge.errors import TaskforgeError
from taskforge.mining.hiding import ClassIndex, hide_tests
from taskforge.repo.sources import fetch

PLUGIN_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "hiding"


def run_pytest(work: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """pytest in a subprocess in ``work``, with ``src/`` and the root importable (src and flat layouts)."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", *args],
        cwd=work,
        env={
            **os.environ,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONPATH": os.pathsep.join([str(work / "src"), str(work), str(PLUGIN_DIR)]),
            **(env or {}),
        },
        capture_output=True,
        text=True,
        timeout=300,
    )


def collect(work: Path, *args: str) -> dict[str, str]:
    """The node ids pytest collects in ``work``, in order, each mapped to where Python says its
    function is defined (``path::Class::name``; see ``definers_plugin``)."""
    with tempfile.TemporaryDirectory() as out:
        definers = Path(out) / "definers.json"
        plugin = ["--collect-only", "-p", "definers_plugin"]
        result = run_pytest(work, *plugin, *args, env={"HIDING_DEFINERS": str(definers)})
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        collected: dict[str, str] = json.loads(definers.read_text())
    assert list(collected) == [line for line in result.stdout.splitlines() if "::" in line]
    return collected


def function_of(nodeid: str) -> str:
    return nodeid.split("[", 1)[0]


def apply(work: Path, changes: dict[str, str | None]) -> None:
    for rel, text in changes.items():
        if text is None:
            (work / rel).unlink()
        else:
            (work / rel).write_text(text)


def fetch_copy(spec: str, session_cache: Path, tmp_path: Path) -> tuple[Path, Path]:
    """(the cached snapshot, a copy of it to edit)."""
    snapshot = fetch(spec, cache_dir=session_cache / "sources")
    work = tmp_path / "work"
    shutil.copytree(snapshot.path, work, ignore=shutil.ignore_patterns(".git"))
    return snapshot.path, work


@pytest.mark.parametrize(
    ("spec", "test_dir", "whole_file", "kinds"),
    [
        ("pypi:iniconfig==2.3.1", "testing", None, {"parametrized"}),
        ("pypi:boltons==26.2.0", "tests", "tests/test_statsutils_histogram.py", {"parametrized", "inherited"}),
        ("pypi:addict==2.4.0", ".", None, {"inherited"}),  # one module; the tests live in a base class
        ("pypi:cachetools==8.0.2", "tests", None, {"inherited", "from_another_file"}),  # mixins in tests/__init__.py
    ],
)
def test_hidden_tests_are_exactly_the_ones_named(
    spec: str, test_dir: str, whole_file: str | None, kinds: set[str], session_cache: Path, tmp_path: Path
) -> None:
    snapshot, work = fetch_copy(spec, session_cache, tmp_path)
    before = collect(work, test_dir)
    # Every 5th test, plus (for boltons) a whole file.
    sample = [nodeid for i, nodeid in enumerate(before) if i % 5 == 0 or (whole_file and nodeid.startswith(whole_file))]
    seen = {
        "parametrized": any("[" in nodeid for nodeid in sample),
        "inherited": any(before[nodeid] != function_of(nodeid) for nodeid in sample),
        "from_another_file": any(before[nodeid].split("::")[0] != nodeid.split("::")[0] for nodeid in sample),
    }
    assert kinds <= {kind for kind, present in seen.items() if present}
    snapshot_text = {p: p.read_bytes() for p in snapshot.rglob("*.py")}
    changes = hide_tests(work, sample)
    # One index serves a repository's candidates one after another, with the same answers.
    shared = ClassIndex(work)
    for other in (sample[::2], sample, sample[1::2], sample):
        assert hide_tests(work, other, index=shared) == hide_tests(work, other)
    assert {p: p.read_bytes() for p in snapshot.rglob("*.py")} == snapshot_text  # wrote nothing
    assert list(changes) == sorted(changes)
    assert all(not Path(path).name.startswith("conftest") for path in changes)
    if whole_file:
        assert changes[whole_file] is None
    apply(work, changes)
    after = collect(work, test_dir)
    gone = {before[nodeid] for nodeid in sample}
    assert after == {nodeid: where for nodeid, where in before.items() if where not in gone}
    assert list(after) == [nodeid for nodeid in before if nodeid in after]


def deleted_text(old: str, new: str) -> str:
    """What ``new`` lacks of ``old``, checking that it only lacks lines (none added or changed)."""
    diff = list(difflib.ndiff(old.splitlines(keepends=True), new.splitlines(keepends=True)))
    assert not [line for line in diff if line.startswith("+ ")]
    return "".join(line[2:] for line in diff if line.startswith("- "))


def source_of(text: str, qualname: str) -> str:
    """The lines of the definition ``Class.name`` in ``text``, decorators included."""
    scope: list[ast.stmt] = ast.parse(text).body
    node: ast.stmt | None = None
    for name in qualname.split("::"):
        node = next(n for n in scope if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name)
        scope = node.body
    assert isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.end_lineno is not None
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return "".join(text.splitlines(keepends=True)[first - 1 : node.end_lineno])


@pytest.mark.parametrize(
    ("spec", "test_dir", "nodeid", "definer", "copies"),
    [
        # DictTests and ChildDictTests both collect AbstractTestsClass's tests.
        ("pypi:addict==2.4.0", ".", "test_addict.py::DictTests::test_update", "test_addict.py::AbstractTestsClass", 2),
        # The seven cache classes (tests/test_{cache,fifo,lfu,lru,rr,tlru,ttl}.py) collect CacheTestMixin's
        # tests, imported with ``from . import CacheTestMixin``.
        (
            "pypi:cachetools==8.0.2",
            "tests",
            "tests/test_lru.py::LRUCacheTest::test_update",
            "tests/__init__.py::CacheTestMixin",
            7,
        ),
    ],
)
def test_an_inherited_test_is_hidden_in_every_class_that_inherits_it(
    spec: str, test_dir: str, nodeid: str, definer: str, copies: int, session_cache: Path, tmp_path: Path
) -> None:
    _, work = fetch_copy(spec, session_cache, tmp_path)
    before = collect(work, test_dir)
    assert before[nodeid] == f"{definer}::test_update"
    definer_file, _, definer_class = definer.partition("::")
    changes = hide_tests(work, [nodeid])
    assert list(changes) == [definer_file]  # the id's own file is untouched if the test lives elsewhere
    old = (work / definer_file).read_text()
    new = changes[definer_file]
    assert new is not None
    # Only the method goes, with the blank lines above it.
    assert deleted_text(old, new).strip("\n") == source_of(old, f"{definer_class}::test_update").strip("\n")
    apply(work, changes)
    after = collect(work, test_dir)
    hidden = [n for n in before if n not in after]
    assert len(hidden) == copies and all(n.endswith("::test_update") for n in hidden)
    assert after == {n: where for n, where in before.items() if where != f"{definer}::test_update"}


@pytest.mark.parametrize(
    ("spec", "test_dir"), [("pypi:iniconfig==2.3.1", "testing"), ("pypi:cachetools==8.0.2", "tests")]
)
def test_remaining_tests_still_pass(spec: str, test_dir: str, session_cache: Path, tmp_path: Path) -> None:
    _, work = fetch_copy(spec, session_cache, tmp_path)
    before = collect(work, test_dir)
    apply(work, hide_tests(work, list(before)[::3]))
    result = run_pytest(work, test_dir)
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


def test_an_inherited_test_is_hidden_where_it_is_defined(tmp_path: Path) -> None:
    write(tmp_path, {"tests/test_x.py": TEST_X})
    # Either copy's id deletes TestBase.test_shared; TestBase stays (TestChild names it), emptied.
    copies = ["tests/test_x.py::TestBase::test_shared", "tests/test_x.py::TestChild::test_shared"]
    expected = hide_tests(tmp_path, copies)
    for nodeid in copies:
        assert hide_tests(tmp_path, [nodeid]) == expected
    text = expected["tests/test_x.py"]
    assert text is not None and "class TestBase:\n    pass\n" in text and "def test_shared" not in text


BASE = """
    class Mixin:
        def test_shared(self):
            assert self.value

        def test_other(self):
            assert self.value


    class Helper:
        value = 1
    """

CROSS_FILE = {
    "tests/__init__.py": "from .base import Mixin as ReExported\n",
    "tests/base.py": BASE,
    # A relative import, an absolute one with an alias, a module alias, a re-export.
    "tests/test_a.py": """
        from .base import Helper, Mixin


        class TestA(Helper, Mixin):
            def test_own(self):
                assert True
        """,
    "tests/test_b.py": """
        from tests.base import Mixin as Shared


        class TestB(Shared):
            value = 2
        """,
    "tests/test_c.py": """
        import tests.base as b


        class TestC(b.Mixin):
            value = 3
        """,
    "tests/test_d.py": """
        from . import ReExported


        class TestD(ReExported):
            value = 4
        """,
}


def test_a_test_inherited_from_another_file_is_hidden_there(tmp_path: Path) -> None:
    write(tmp_path, CROSS_FILE)
    base = (tmp_path / "tests/base.py").read_text()
    before = collect(tmp_path)
    assert len(before) == 9
    changes = hide_tests(tmp_path, ["tests/test_b.py::TestB::test_shared"])
    assert changes == {"tests/base.py": base.replace("    def test_shared(self):\n        assert self.value\n\n", "")}
    apply(tmp_path, changes)
    after = collect(tmp_path)
    assert sorted(set(before) - set(after)) == [f"tests/test_{x}.py::Test{x.upper()}::test_shared" for x in "abcd"]
    assert after == {n: where for n, where in before.items() if where != "tests/base.py::Mixin::test_shared"}
    # Mixin loses its last test: it stays (other files name it), and so does base.py (imported).
    changes = hide_tests(tmp_path, ["tests/test_c.py::TestC::test_other"])
    assert changes == {"tests/base.py": base.replace(base[: base.index("\n\n\n")], "class Mixin:\n    pass")}
    apply(tmp_path, changes)
    assert list(collect(tmp_path)) == ["tests/test_a.py::TestA::test_own"]


def test_a_class_imported_into_the_module_pytest_collects_is_hidden_where_it_is_defined(tmp_path: Path) -> None:
    """A project whose pytest configuration collects one module that imports every test class
    (``python_files = "__main__.py"``, as a held-out parser generator's suite does): its tests
    were unhideable ("no class TestCache in tests/__main__.py"), and every one of 60 candidates
    was rejected."""
    cache = "import unittest\n\n\nclass TestCache(unittest.TestCase):\n    def test_a(self):\n        pass\n\n" \
            "    def test_b(self):\n        pass\n"
    write(tmp_path, {
        "tests/__init__.py": "",
        "tests/test_cache.py": cache,
        "tests/__main__.py": "import unittest\n\nfrom .test_cache import TestCache\n\n"
                             "if __name__ == '__main__':\n    unittest.main()\n",
    })
    args = ("-o", "python_files=__main__.py", "tests")
    before = collect(tmp_path, *args)
    assert before == {f"tests/__main__.py::TestCache::test_{x}": f"tests/test_cache.py::TestCache::test_{x}" for x in "ab"}
    changes = hide_tests(tmp_path, ["tests/__main__.py::TestCache::test_b"])
    assert changes == {"tests/test_cache.py": cache.replace("\n\n    def test_b(self):\n        pass", "")}
    apply(tmp_path, changes)
    assert list(collect(tmp_path, *args)) == ["tests/__main__.py::TestCache::test_a"]


@pytest.mark.parametrize(
    ("files", "nodeid", "message"),
    [
        (  # the definer comes from an installed package
            {"tests/test_p.py": "from somepkg.testing import Mixin\n\n\nclass TestP(Mixin):\n    pass\n"},
            "tests/test_p.py::TestP::test_a",
            "defined in no class of the repository it inherits from; its bases outside the repository: Mixin",
        ),
        (  # deleting the override would bring back the base's test
            {
                "tests/test_o.py": "from .test_x import TestBase\n\n\nclass TestO(TestBase):\n"
                "    def test_shared(self):\n        super().test_shared()\n",
                "tests/__init__.py": "",
            },
            "tests/test_o.py::TestO::test_shared",
            "deleting tests/test_o.py::TestO::test_shared would let tests/test_x.py::TestBase::test_shared take its"
            " place",
        ),
        (  # a mixin the package ships: restoring it would land in the code patch
            {
                "src/pkg/__init__.py": "",
                "src/pkg/testing.py": "class Mixin:\n    def test_lib(self):\n        pass\n",
                "tests/test_l.py": "from pkg.testing import Mixin\n\n\nclass TestL(Mixin):\n    pass\n",
            },
            "tests/test_l.py::TestL::test_lib",
            "inherited from src/pkg/testing.py::Mixin, which is not test code",
        ),
    ],
)
def test_inherited_tests_that_cannot_be_hidden(
    files: dict[str, str], nodeid: str, message: str, tmp_path: Path
) -> None:
    write(tmp_path, {"tests/test_x.py": TEST_X, **files})
    with pytest.raises(TaskforgeError, match=message) as info:
        hide_tests(tmp_path, [nodeid])
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
        "README.rst::README.rst",  # a text-file doctest, of no file here
        "docs/index.md",
        "tests/test_x.py::test_missing",
        "tests/test_x.py::TestChild::test_missing",  # in no class TestChild inherits from
        "tests/test_x.py::TestMissing::test_a",
        "tests/test_x.py::TestOuter::TestMissing::test_a",
        "tests/test_x.py::pytest::test_a",  # imported, but no class of the repository
        "tests/test_nofile.py::test_a",
    ],
)
def test_unhideable_ids(nodeid: str, tmp_path: Path) -> None:
    write(tmp_path, {"tests/test_x.py": TEST_X, "src/pkg/mod.py": "def function():\n    '''>>> 1\n    1'''\n"})
    with pytest.raises(TaskforgeError) as info:
        hide_tests(tmp_path, [nodeid])
    assert info.value.reason == "unhideable_test"


def test_a_text_file_of_doctests_is_hidden_whole(tmp_path: Path) -> None:
    """``--doctest-glob='*.rst'`` makes each matching file one test (``path::name``): hiding it
    deletes the file, beside the functions hidden in the same call."""
    write(tmp_path, {"tests/test_x.py": TEST_X, "docs/usage/parse.rst": "Parse\n=====\n\n>>> 1 + 1\n2\n"})
    changes = hide_tests(tmp_path, ["docs/usage/parse.rst::parse.rst", "tests/test_x.py::test_plain"])
    assert list(changes) == ["docs/usage/parse.rst", "tests/test_x.py"]
    assert changes["docs/usage/parse.rst"] is None
    assert "def test_plain" not in (changes["tests/test_x.py"] or "")
    with pytest.raises(TaskforgeError) as info:  # the item of a text file is named after the file
        hide_tests(tmp_path, ["docs/usage/parse.rst::other.rst"])
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


def test_a_test_file_that_no_longer_imports_goes_whole(session_cache: Path, tmp_path: Path) -> None:
    """cachetools' tests/test_func.py: every class names a decorator in its body, so once
    ``ttl_cache`` is removed the module fails to import and all its tests fail. Hidden one by one
    (their methods come from a mixin), the classes and their ``DECORATOR`` attributes stay, and so
    does the import error; as a broken file it goes whole."""
    snapshot = fetch("pypi:cachetools==8.0.2", cache_dir=session_cache / "sources")
    repo = tmp_path / "cachetools"
    shutil.copytree(snapshot.path, repo, ignore=shutil.ignore_patterns(".git"))
    index = ClassIndex(repo)
    ids = [f"tests/test_func.py::{cls}::{test}" for cls in ("FIFODecoratorTest", "TTLDecoratorTest")
           for test in ("test_decorator", "test_decorator_clear")]
    one_by_one = hide_tests(repo, ids, index=index)
    assert "cachetools.func.ttl_cache" in (one_by_one["tests/test_func.py"] or "")
    assert hide_tests(repo, ids, index=index, broken=["tests/test_func.py"]) == {"tests/test_func.py": None}
    # A broken file that another file imports stays, and its tests are hidden one by one.
    (repo / "tests" / "test_more.py").write_text("from tests.test_func import DecoratorTestMixin\n")
    assert hide_tests(repo, ids, index=ClassIndex(repo), broken=["tests/test_func.py"]) == one_by_one
    # Still broken with its tests hidden one by one (its start state fails to collect it, and so
    # would the file importing it): it goes whole, whatever imports it.
    forced = hide_tests(repo, ids, index=ClassIndex(repo), broken=["tests/test_func.py"], whole=["tests/test_func.py"])
    assert forced == {"tests/test_func.py": None}


TEST_DOCTESTS = '''\
"""Helpers.

>>> 1 + 1
2
"""
import unittest

from pkg.shapes import square


class TestShapes(unittest.TestCase):
    def test_square(self):
        assert square(2) == 4

    @classmethod
    def make_sides(cls, n):
        """
        >>> TestShapes.make_sides(2)
        [4, 4]
        """

        return [square(n)] * n

    def plain(self):
        """No example here."""
        return 1


def helper():
    """>>> helper()"""
'''


def test_a_doctest_of_a_test_file_is_hidden_by_deleting_its_docstring(tmp_path: Path) -> None:
    """zipp's tests/test_complexity.py: ``--doctest-modules`` collects a test class's helper's
    doctest (``tests/test_complexity.py::tests.test_complexity.TestComplexity.make_names``). Its
    docstring goes, and the rest of the file keeps its bytes; in a broken file that goes whole,
    the doctest goes with the file. A source module's doctest stays unhideable."""
    write(tmp_path, {"tests/test_shapes.py": TEST_DOCTESTS, "src/pkg/shapes.py": "def square(n):\n    return n * n\n"})
    changes = hide_tests(tmp_path, ["tests/test_shapes.py::tests.test_shapes.TestShapes.make_sides",
                                    "tests/test_shapes.py::test_shapes.helper"])
    text = changes["tests/test_shapes.py"]
    assert text is not None
    expected = (TEST_DOCTESTS.replace('        """\n        >>> TestShapes.make_sides(2)\n        [4, 4]\n        """\n\n', "")
                .replace('    """>>> helper()"""\n', "    pass\n"))
    assert text == expected
    ast.parse(text)
    module = hide_tests(tmp_path, ["tests/test_shapes.py::tests.test_shapes"])["tests/test_shapes.py"]
    assert module == TEST_DOCTESTS[TEST_DOCTESTS.index("import unittest"):]
    broken = hide_tests(tmp_path, ["tests/test_shapes.py::tests.test_shapes.TestShapes.make_sides",
                                   "tests/test_shapes.py::TestShapes::test_square"], broken=["tests/test_shapes.py"])
    assert broken == {"tests/test_shapes.py": None}
    for nodeid in ("tests/test_shapes.py::tests.test_shapes.TestShapes.plain",  # no example in it
                   "tests/test_shapes.py::tests.test_shapes.TestShapes.missing",
                   "src/pkg/shapes.py::pkg.shapes.square"):
        with pytest.raises(TaskforgeError) as info:
            hide_tests(tmp_path, [nodeid])
        assert info.value.reason == "unhideable_test"


GENERATED = '''\
import unittest

__all__ = []


def _make(kind):
    class _TestFormat(unittest.TestCase):
        def test_parse(self):
            assert kind

        def test_dump(self):
            assert kind

    name = "Test" + kind.capitalize()
    _TestFormat.__name__ = name
    globals()[name] = _TestFormat
    __all__.append(name)


for _kind in ("json", "xml"):
    _make(_kind)


def _cases(name):
    cls = type(name, (unittest.TestCase,), {})
    for case in ("one", "two"):
        def method(self, case=case):
            assert case

        setattr(cls, "test_" + case, method)
    globals()[name] = cls


_cases("TestCases")
'''


def definitions(work: Path) -> dict[str, tuple[str, int, str]]:
    """What the baseline records: taskforge's own pytest plugin, in its coverage run, says where
    the interpreter defined each collected test's function."""
    guest = Path(__file__).resolve().parents[2] / "taskforge" / "guest"
    with tempfile.TemporaryDirectory() as out:
        report = Path(out) / "coverage.json"
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "plugin", "--collect-only"],
            cwd=work, capture_output=True, text=True, timeout=300,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": os.pathsep.join([str(work), str(guest)]),
                 "TASKFORGE_COVERAGE_OUT": str(report), "TASKFORGE_COVERAGE_SOURCE": str(work / "src")})
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        return {nodeid: (path, line, qualname)
                for nodeid, (path, line, qualname) in json.loads(report.read_text())["definitions"].items()}


def test_a_test_a_factory_generates_is_hidden_where_the_interpreter_defined_it(tmp_path: Path) -> None:
    """lark's pattern: a factory function defines a test class and binds it under a new name
    (``globals()[name] = ...``), once per parser. Reading the source finds no ``TestJson``; the
    baseline's record of where Python defined each test's function does, and deleting that nested
    ``def`` hides the test in every class the factory makes, as with a parametrized function."""
    write(tmp_path, {"tests/test_gen.py": GENERATED, "src/pkg/__init__.py": ""})
    before = collect(tmp_path)
    assert "tests/test_gen.py::TestJson::test_parse" in before and "tests/test_gen.py::TestCases::test_one" in before
    located = definitions(tmp_path)
    assert located["tests/test_gen.py::TestXml::test_parse"] == ("tests/test_gen.py", 8, "_make.<locals>._TestFormat.test_parse")
    with pytest.raises(TaskforgeError, match="no class TestJson"):
        hide_tests(tmp_path, ["tests/test_gen.py::TestJson::test_parse"])  # reading alone
    changes = hide_tests(tmp_path, ["tests/test_gen.py::TestJson::test_parse"], located=located)
    assert changes == {"tests/test_gen.py": GENERATED.replace("        def test_parse(self):\n            assert kind\n\n", "")}
    apply(tmp_path, changes)
    assert sorted(set(before) - set(collect(tmp_path))) == ["tests/test_gen.py::TestJson::test_parse",
                                                            "tests/test_gen.py::TestXml::test_parse"]


def test_a_generated_file_stays_when_reading_finds_no_test_left(tmp_path: Path) -> None:
    """A file whose only tests a factory makes looks testless to reading once one is hidden; it
    stays, with the factory's other tests."""
    text = GENERATED.split("\n\ndef _cases")[0] + "\n"
    write(tmp_path, {"tests/test_gen.py": text})
    located = definitions(tmp_path)
    changes = hide_tests(tmp_path, ["tests/test_gen.py::TestXml::test_dump"], located=located)
    assert changes["tests/test_gen.py"] is not None and "def test_parse" in changes["tests/test_gen.py"]
    apply(tmp_path, changes)
    assert sorted(collect(tmp_path)) == ["tests/test_gen.py::TestJson::test_parse", "tests/test_gen.py::TestXml::test_parse"]


def test_a_data_driven_test_stays_unhideable(tmp_path: Path) -> None:
    """One function attached under many test names (``setattr(cls, "test_" + case, method)``, in a
    class made by ``type()``) is no test's own code: deleting it would take every case, and the
    loader with it."""
    write(tmp_path, {"tests/test_gen.py": GENERATED})
    located = definitions(tmp_path)
    assert located["tests/test_gen.py::TestCases::test_one"][2] == "_cases.<locals>.method"
    with pytest.raises(TaskforgeError, match="not a test function of its own") as info:
        hide_tests(tmp_path, ["tests/test_gen.py::TestCases::test_one"], located=located)
    assert info.value.reason == "unhideable_test"

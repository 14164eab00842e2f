"""The scorer's static rules (taskforge.scoring.tamper) and its reward arithmetic, on their own."""

from __future__ import annotations

import pytest

from taskforge.scoring.scorer import compute_reward
from taskforge.scoring.tamper import (
    TestPaths,
    classify_change,
    is_test_path,
    lint_python,
    lint_text,
    new_findings,
)

TESTS = TestPaths.of(["tests/test_core.py::test_a", "tests/test_core.py::test_b[1]"], ["tests/test_hidden.py"])


@pytest.mark.parametrize("rel,kind,before,after,verdict", [
    ("src/pkg/core.py", "modified", "x = 1\n", "x = 2\n", "keep"),
    ("src/pkg/new.py", "added", None, "x = 2\n", "keep"),
    ("tests/test_core.py", "modified", "", "assert True\n", "tamper"),
    ("tests/test_hidden.py", "added", None, "def test(): pass\n", "tamper"),
    ("tests/test_other.py", "deleted", "", None, "tamper"),
    ("tests/test_other.py", "modified", "", "x\n", "drop"),
    ("tests/test_mine.py", "added", None, "def test(): pass\n", "drop"),
    ("tests/helpers.py", "added", None, "x = 1\n", "drop"),
    ("conftest.py", "added", None, "", "tamper"),
    ("src/pkg/conftest.py", "modified", "", "", "tamper"),
    ("pytest.ini", "added", None, "[pytest]\n", "tamper"),
    ("setup.cfg", "modified", "[metadata]\nname = a\n", "[metadata]\nname = b\n", "drop"),
    ("setup.cfg", "modified", "[metadata]\nname = a\n", "[metadata]\nname = a\n[tool:pytest]\naddopts = -p x\n", "tamper"),
    ("tox.ini", "modified", "[tox]\n", "[tox]\n[pytest]\naddopts = --deselect t\n", "tamper"),
    ("pyproject.toml", "modified", '[project]\nname = "a"\n', '[project]\nname = "a"\nversion = "1"\n', "drop"),
    ("pyproject.toml", "modified", '[tool.pytest.ini_options]\naddopts = ""\n', '[tool.pytest.ini_options]\naddopts = "-x"\n', "tamper"),
    ("pyproject.toml", "modified", '[project]\n', 'not toml [', "tamper"),
    ("src/zz.pth", "added", None, "import os\n", "tamper"),
    ("src/sitecustomize.py", "added", None, "", "tamper"),
    ("src/pkg.dist-info/entry_points.txt", "added", None, "[pytest11]\nx = y\n", "tamper"),
    ("src/pkg/_speed.so", "added", None, None, "tamper"),
    ("src/pkg/cached.pyc", "added", None, None, "tamper"),
    ("src/pytest.py", "added", None, "", "tamper"),
    ("_pytest/runner.py", "added", None, "", "tamper"),
    ("src/pkg/logo.png", "added", None, None, "drop"),
])
def test_each_kind_of_change_gets_its_verdict(rel, kind, before, after, verdict) -> None:  # type: ignore[no-untyped-def]
    binary = after is None and kind != "deleted"
    got, why = classify_change(rel, kind, before=before, after=after, binary=binary, tests=TESTS)
    assert got == verdict, why
    assert (why == "") == (verdict == "keep")


def test_symlinks_and_submodules_are_tampering() -> None:
    for kind in ("symlink", "submodule"):
        assert classify_change("src/pkg/x.py", kind, before=None, after=None, binary=False, tests=TESTS)[0] == "tamper"


def test_test_paths() -> None:
    assert is_test_path("tests/unit/helpers.py") and is_test_path("pkg/test_x.py") and is_test_path("x_test.py")
    assert not is_test_path("src/pkg/testsuite.py") and not is_test_path("src/pkg/contest.py")


HACKS = {
    "harness_import": ["import pytest\n", "from _pytest import reports\n", "import pluggy\n",
                       "from unittest import mock\n", "from unittest import SkipTest\n", "import sys\nsys.modules['_pytest.runner']\n",
                       "import gc\ngc.get_objects()\n", "import builtins\nbuiltins.len = lambda x: 0\n"],
    "early_exit": ["import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n", "raise SystemExit\n", "exit()\n",
                   "import atexit\natexit.register(print)\n", "def f():\n    import os\n    os._exit(1)\n"],
    "always_equal": ["class A:\n    def __eq__(self, o):\n        'doc'\n        return True\n",
                     "class A:\n    __eq__ = lambda s, o: True\n", "class A:\n    def __ne__(self, o):\n        return False\n"],
    "forged_report": ["x = '<testsuite>'\n", "print('tests/test_a.py::test_a PASSED')\n", "p = '/tmp/taskforge/report.xml'\n"],
    "network": ["import urllib.request\n", "import socket\n", "u = 'https://files.pythonhosted.org/packages/x.tar.gz'\n"],
}


@pytest.mark.parametrize("rule,code", [(rule, code) for rule, codes in HACKS.items() for code in codes])
def test_lint_finds_each_hack(rule, code) -> None:  # type: ignore[no-untyped-def]
    assert rule in {f.rule for f in lint_python(code)}, code


@pytest.mark.parametrize("code", [
    "import sys\nif __name__ == '__main__':\n    sys.exit(main())\n",
    "def main():\n    import sys\n    sys.exit(2)\n",
    "class A:\n    def __eq__(self, o):\n        return self.x == o.x\n",
    '"""A module whose docstring says PASSED and https://github.com/x/y."""\nimport os\n',
    "def f(x):\n    '''See <testsuite> in junit.'''\n    return x\n",
    "import urllib.parse\nimport json\n",
    "this is not python (\n",
])
def test_lint_leaves_ordinary_code_alone(code) -> None:  # type: ignore[no-untyped-def]
    assert lint_python(code) == []


def test_only_findings_beyond_the_reference_count() -> None:
    reference = lint_python("import pytest\n\ndef f():\n    return 1\n")
    same = lint_python("import pytest\n\ndef f():\n    return 2\n")
    more = lint_python("import pytest\nimport _pytest.runner\n\ndef f():\n    return 2\n")
    assert new_findings(same, reference) == []
    assert [f.what for f in new_findings(more, reference)] == ["import _pytest"]


def test_text_files_with_forged_results_are_found() -> None:
    assert lint_text('<?xml version="1.0"?><testsuites><testsuite/></testsuites>')
    assert lint_text("tests/test_a.py::test_a PASSED\n")
    assert not lint_text("Just a changelog entry.\n")


def test_reward_arithmetic() -> None:
    f2p = {"a": "passed", "b": "failed", "c": "passed", "d": "passed"}
    p2p = {"x": "passed"}
    assert compute_reward(f2p, p2p, "binary") == 0.0
    assert compute_reward(f2p, p2p, "partial") == 0.75
    assert compute_reward(dict.fromkeys(f2p, "passed"), p2p, "binary") == 1.0
    for bad in ("failed", "skipped", "missing", "error", "xfailed", "timeout"):
        assert compute_reward(dict.fromkeys(f2p, "passed"), {"x": bad}, "partial") == 0.0
        assert compute_reward({"a": bad}, p2p, "partial") == 0.0
    with pytest.raises(ValueError, match="unknown reward mode"):
        compute_reward(f2p, p2p, "generous")  # type: ignore[arg-type]


def test_doctest_examples_are_linted_as_code() -> None:
    """A module's doctests run under --doctest-modules: a harness import hidden in an example is
    found as it would be in the module's code; the prose of a docstring is not looked at."""
    hidden = 'def f():\n    """Sum.\n\n    >>> import gc, pytest\n    >>> len(gc.get_objects()) > 0\n    True\n    """\n    return 1\n'
    assert {f.what for f in lint_python(hidden)} == {"import pytest", "calls gc.get_objects"}
    prose = 'def f():\n    """Mentions pytest and gc.get_objects in words.\n\n    >>> f()\n    1\n    """\n    return 1\n'
    assert lint_python(prose) == []


@pytest.mark.parametrize("name", ["pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "sub/pytest.toml"])
def test_every_file_pytest_reads_whole_is_configuration(name: str) -> None:
    tests = TestPaths.of([], [])
    verdict, why = classify_change(name, "added", before=None, after="[pytest]\naddopts = -x\n", binary=False, tests=tests)
    assert (verdict, why.split()[0]) == ("tamper", "pytest")


def test_the_configuration_files_are_what_the_images_pytest_reads() -> None:
    """A name the image's pytest reads (the scorer asks it) is configuration; unknown to it, source."""
    from dataclasses import replace

    plain = TestPaths.of([], [])
    assert classify_change("pytest.cfg", "added", before=None, after="x", binary=False, tests=plain)[0] == "keep"
    newer = replace(plain, config_files=plain.config_files | {"pytest.cfg"})
    assert classify_change("pytest.cfg", "added", before=None, after="x", binary=False, tests=newer)[0] == "tamper"
    # Files with a pytest section among other settings still count by that section only.
    assert classify_change("setup.cfg", "modified", before="[metadata]\nname = x\n", after="[metadata]\nname = y\n",
                           binary=False, tests=newer)[0] == "drop"


def test_the_scorers_probe_reads_the_names_from_pytest_itself() -> None:
    """The probe the scorer runs in each image, run here against the host's pytest."""
    import json
    import subprocess
    import sys

    from taskforge.scoring.scorer import _FACTS_SCRIPT

    out = subprocess.run([sys.executable, "-P", "-c", _FACTS_SCRIPT], capture_output=True, text=True, check=True).stdout
    names = set(json.loads(out.strip().splitlines()[-1])["config_files"])
    assert {"pytest.ini", "pytest.toml", ".pytest.toml", "pyproject.toml", "tox.ini", "setup.cfg"} <= names


def test_python_sources_are_read_as_python_decodes_them() -> None:
    """The lint reads what runs: a coding declaration is honoured (in UTF-7, ``+AAo-`` is a newline)."""
    from taskforge.scoring.scorer import _text, source_encoding
    from taskforge.scoring.tamper import lint_python

    hidden = b"# coding: utf-7\nx = 1\n#+AAo-import os; os._exit(0)\n"
    assert lint_python(hidden.decode("utf-8")) == []  # what a UTF-8 reader would have linted
    assert source_encoding(hidden) == "utf-7"
    assert [f.rule for f in lint_python(_text(hidden, "pkg/mod.py") or "")] == ["early_exit"]
    assert source_encoding(b"\xef\xbb\xbfx = 1\n") == "utf-8-sig" and source_encoding(b"x = 1\n") == "utf-8"
    assert _text(b"# coding: no-such-codec\nx = 1\n", "pkg/mod.py") is None  # does not import: a binary to drop
    assert _text(b"# coding: utf-7\n", "notes.txt") == "# coding: utf-7\n"  # other files are UTF-8


@pytest.mark.parametrize("path", ["sitecustomize.py", "src/sitecustomize.py", "src/sitecustomize/__init__.py",
                                  "usercustomize/__init__.py", "lib/usercustomize/hooks.py"])
def test_a_start_up_hook_is_tampering_as_a_module_or_a_package(path: str) -> None:
    """Found by a red team: site imports a sitecustomize *package* as readily as a module."""
    verdict, why = classify_change(path, "added", before=None, after="import os\n", binary=False,
                                   tests=TestPaths.of([], []))
    assert verdict == "tamper" and "start-up hook" in why

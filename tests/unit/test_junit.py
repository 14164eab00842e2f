"""taskforge.repo.junit and the pytest plugin, against real pytest runs and recorded real reports.

The synthetic project below is run with the real pytest (a subprocess of ``sys.executable``) in a
temporary directory; its node ids come independently from ``pytest --collect-only -q``. The golden
reports in ``tests/fixtures/junit/`` were recorded from released projects (see the README there);
their ground truth is the ``-v`` terminal output of the same run.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from taskforge.errors import TestRunError
from taskforge.repo import junit
from taskforge.repo.junit import (
    PLUGIN_MODULE,
    CollectionError,
    JUnitReport,
    parse_junit,
    plugin_source,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "junit"
NONCE = "synthetic-nonce-5f1c"

# ---------------------------------------------------------------------------------------------
# The synthetic project
# ---------------------------------------------------------------------------------------------

SYNTHETIC_FILES: dict[str, str] = {
    "pytest.ini": "[pytest]\n",
    # A root conftest.py is imported before collection starts: it must not see the nonce.
    "conftest.py": "import os\nNONCE_SEEN_BY_CONFTEST = os.environ.get('TASKFORGE_NONCE')\n",
    "tests/__init__.py": "",
    "tests/sub/__init__.py": "",
    "tests/sub/test_deep.py": "def test_deep():\n    pass\n",
    "tests/broken_helper.py": "def oops(:\n    pass\n",
    "tests/test_broken.py": "from tests import broken_helper\n\n\ndef test_never():\n    pass\n",
    "tests/base.py": textwrap.dedent(
        """\
        class BaseChecks:
            def test_inherited(self):
                pass


        def test_shared():
            pass
        """
    ),
    "tests/test_reuse.py": textwrap.dedent(
        """\
        import unittest

        from tests.base import BaseChecks, test_shared


        class TestReuse(BaseChecks):
            pass


        class SomeCase(unittest.TestCase):
            def test_unittest(self):
                pass
        """
    ),
    "tests/test_main.py": textwrap.dedent(
        """\
        import os

        import pytest

        import conftest


        @pytest.fixture
        def bad_setup():
            raise RuntimeError("setup boom")


        @pytest.fixture
        def bad_teardown():
            yield
            raise RuntimeError("teardown boom")


        @pytest.mark.parametrize(
            "value",
            ["with space", "x[1]", "]]x[[", "é☃ü", "a::b", "p/q", "d.o.t", "q'uote\\"s", "back\\\\slash", ""],
        )
        def test_ids(value):
            pass


        @pytest.mark.parametrize("value", [pytest.param(1, id="explicit é [::] /. 'q' \\\\")])
        def test_explicit_id(value):
            pass


        def test_pass():
            pass


        def test_fail():
            assert 1 == 2, "nope\\nsecond line"


        def test_setup_error(bad_setup):
            pass


        def test_teardown_error(bad_teardown):
            pass


        def test_fail_then_teardown_error(bad_teardown):
            assert False


        def test_skip():
            pytest.skip("skipping now")


        @pytest.mark.skipif(True, reason="condition holds")
        def test_skipif():
            pass


        @pytest.mark.xfail(reason="known bug")
        def test_xfail():
            assert False


        @pytest.mark.xfail(reason="maybe fixed")
        def test_xpass():
            pass


        @pytest.mark.xfail(reason="must fail", strict=True)
        def test_xpass_strict():
            pass


        def test_nonce_hidden():
            assert "TASKFORGE_NONCE" not in os.environ
            assert conftest.NONCE_SEEN_BY_CONFTEST is None


        class TestOuter:
            def test_method(self):
                pass

            class TestInner:
                @pytest.mark.parametrize("value", ["a.b", "c::d"])
                def test_nested(self, value):
                    pass


        def test_ünïcode():
            pass
        """
    ),
}

MAIN = "tests/test_main.py"
PARAM_NODEIDS = [
    f"{MAIN}::test_ids[with space]",
    f"{MAIN}::test_ids[x[1]]",
    f"{MAIN}::test_ids[]]x[[]",
    f"{MAIN}::test_ids[\\xe9\\u2603\\xfc]",  # pytest escapes non-ASCII parameter ids
    f"{MAIN}::test_ids[a::b]",
    f"{MAIN}::test_ids[p/q]",
    f"{MAIN}::test_ids[d.o.t]",
    f"{MAIN}::test_ids[q'uote\"s]",
    f"{MAIN}::test_ids[back\\\\slash]",
    f"{MAIN}::test_ids[]",  # an empty string makes an empty id
    f"{MAIN}::test_explicit_id[explicit \\xe9 [::] /. 'q' \\\\]",
]
# (outcome, start of the message) for every test that collects; a non-strict XPASS reads as a
# pass without the plugin.
EXPECTED: dict[str, tuple[str, str]] = {
    "tests/sub/test_deep.py::test_deep": ("passed", ""),
    **{nodeid: ("passed", "") for nodeid in PARAM_NODEIDS},
    f"{MAIN}::test_pass": ("passed", ""),
    f"{MAIN}::test_fail": ("failed", "AssertionError: nope"),
    f"{MAIN}::test_setup_error": ("error", 'failed on setup with "RuntimeError: setup boom"'),
    f"{MAIN}::test_teardown_error": ("error", 'failed on teardown with "RuntimeError: teardown boom"'),
    f"{MAIN}::test_fail_then_teardown_error": ("error", 'failed on teardown with "RuntimeError: teardown boom"'),
    f"{MAIN}::test_skip": ("skipped", "skipping now"),
    f"{MAIN}::test_skipif": ("skipped", "condition holds"),
    f"{MAIN}::test_xfail": ("xfailed", "known bug"),
    f"{MAIN}::test_xpass": ("xpassed", ""),
    f"{MAIN}::test_xpass_strict": ("failed", "[XPASS(strict)] must fail"),
    f"{MAIN}::test_nonce_hidden": ("passed", ""),
    f"{MAIN}::TestOuter::test_method": ("passed", ""),
    f"{MAIN}::TestOuter::TestInner::test_nested[a.b]": ("passed", ""),
    f"{MAIN}::TestOuter::TestInner::test_nested[c::d]": ("passed", ""),
    f"{MAIN}::test_ünïcode": ("passed", ""),
    "tests/test_reuse.py::test_shared": ("passed", ""),  # defined in tests/base.py
    "tests/test_reuse.py::TestReuse::test_inherited": ("passed", ""),  # defined in tests/base.py
    "tests/test_reuse.py::SomeCase::test_unittest": ("passed", ""),
}
EXPECTED_WITHOUT_PLUGIN = {**EXPECTED, f"{MAIN}::test_xpass": ("passed", "")}


@dataclass(frozen=True, kw_only=True, slots=True)
class Synthetic:
    """The synthetic project and the reports of its real pytest runs."""

    root: Path
    collected: list[str]
    stopped: bytes  # plugin + xunit1, stopped by the collection error
    plugin: bytes  # plugin + xunit1, --continue-on-collection-errors
    xunit1: bytes  # no plugin
    xunit2: bytes  # no plugin


def _pytest(project: Path, args: Sequence[str], *, plugin_dir: Path | None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "TASKFORGE_"))}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # as in the sandbox; -p still loads the plugin
    env["PYTHONIOENCODING"] = "utf-8"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if plugin_dir is not None:
        env["PYTHONPATH"] = str(plugin_dir)
        env["TASKFORGE_NONCE"] = NONCE
        args = ["-p", PLUGIN_MODULE, *args]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=300,
        check=False,
    )


def _junit_run(project: Path, out: Path, family: str, *extra: str, plugin_dir: Path | None) -> bytes:
    proc = _pytest(project, [f"--junitxml={out}", "-o", f"junit_family={family}", *extra], plugin_dir=plugin_dir)
    assert proc.returncode in (1, 2), proc.stdout + proc.stderr  # tests failed / interrupted by collection
    return out.read_bytes()


def _collected_nodeids(project: Path) -> list[str]:
    proc = _pytest(project, ["--collect-only", "-q", "--continue-on-collection-errors"], plugin_dir=None)
    lines = proc.stdout.splitlines()
    nodeids = lines[: lines.index("")]
    assert all("::" in nodeid for nodeid in nodeids), proc.stdout
    return nodeids


def _write_files(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text, encoding="utf-8")


def _write_plugin(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{PLUGIN_MODULE}.py").write_text(plugin_source(), encoding="utf-8")
    return directory


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Synthetic:
    base = tmp_path_factory.mktemp("junit")
    root = base / "project"
    for relative, text in SYNTHETIC_FILES.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text, encoding="utf-8")
    plugin_dir = _write_plugin(base / "plugin")
    return Synthetic(
        root=root,
        collected=_collected_nodeids(root),
        stopped=_junit_run(root, base / "stopped.xml", "xunit1", plugin_dir=plugin_dir),
        plugin=_junit_run(root, base / "plugin.xml", "xunit1", "--continue-on-collection-errors", plugin_dir=plugin_dir),
        xunit1=_junit_run(root, base / "xunit1.xml", "xunit1", "--continue-on-collection-errors", plugin_dir=None),
        xunit2=_junit_run(root, base / "xunit2.xml", "xunit2", "--continue-on-collection-errors", plugin_dir=None),
    )


def _known_paths(root: Path) -> list[str]:
    return [path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file()]


def _outcomes(report: JUnitReport) -> dict[str, tuple[str, str]]:
    return {nodeid: (result.outcome, result.message) for nodeid, result in report.results.items()}


def _assert_outcomes(report: JUnitReport, expected: dict[str, tuple[str, str]]) -> None:
    assert {nodeid: outcome for nodeid, (outcome, _) in _outcomes(report).items()} == {
        nodeid: outcome for nodeid, (outcome, _) in expected.items()
    }
    for nodeid, (_, message) in expected.items():
        assert report.results[nodeid].message.startswith(message), (nodeid, report.results[nodeid].message)
        assert bool(report.results[nodeid].message) == bool(message), nodeid


def _assert_collection_error(report: JUnitReport) -> None:
    assert report.collection_errors == (
        CollectionError(
            location="tests/test_broken.py", message="SyntaxError: invalid syntax (broken_helper.py, line 1)",
            chain=("tests/test_broken.py",),
        ),
    )


# ---------------------------------------------------------------------------------------------
# Synthetic project: with the plugin
# ---------------------------------------------------------------------------------------------


def test_the_ground_truth_lists_every_test_once(synthetic: Synthetic) -> None:
    assert sorted(synthetic.collected) == sorted(EXPECTED)


def test_plugin_report_round_trips_every_node_id(synthetic: Synthetic) -> None:
    report = parse_junit(synthetic.plugin)
    assert list(report.results) == synthetic.collected  # same ids, same order
    _assert_outcomes(report, EXPECTED)
    _assert_collection_error(report)
    assert report.nonce == NONCE


def test_plugin_node_ids_do_not_depend_on_classname_or_file(synthetic: Synthetic) -> None:
    """Every test's id comes from the plugin's property: garbling what pytest mangles changes nothing."""
    garbled = re.sub(rb' file="[^"]*"', b"", synthetic.plugin)
    garbled = re.sub(rb'classname="[^"]+"', b'classname="garbled.Module"', garbled)
    assert parse_junit(garbled).results == parse_junit(synthetic.plugin).results


def test_plugin_report_ignores_known_paths_it_does_not_need(synthetic: Synthetic) -> None:
    misleading = ["tests/test_main/TestOuter.py", "tests.py"]
    assert parse_junit(synthetic.plugin, known_paths=misleading) == parse_junit(synthetic.plugin)


def test_run_stopped_by_a_collection_error_has_no_results(synthetic: Synthetic) -> None:
    report = parse_junit(synthetic.stopped)
    assert report.results == {}
    _assert_collection_error(report)
    assert report.nonce == NONCE


def test_failed_call_and_teardown_error_merge_into_one_error(synthetic: Synthetic) -> None:
    nodeid = f"{MAIN}::test_fail_then_teardown_error"
    assert synthetic.plugin.count(b'name="test_fail_then_teardown_error"') == 2  # pytest writes two testcases
    result = parse_junit(synthetic.plugin).results[nodeid]
    assert result.outcome == "error"
    assert result.duration_s >= 0.0


def test_durations_and_messages_are_short(synthetic: Synthetic) -> None:
    for result in parse_junit(synthetic.plugin).results.values():
        assert result.duration_s >= 0.0
        assert "\n" not in result.message and len(result.message) <= 300


def test_str_and_bytes_parse_alike(synthetic: Synthetic) -> None:
    assert parse_junit(synthetic.plugin.decode("utf-8")) == parse_junit(synthetic.plugin)


# ---------------------------------------------------------------------------------------------
# Synthetic project: without the plugin
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("with_known_paths", [False, True])
def test_xunit1_without_plugin_round_trips(synthetic: Synthetic, with_known_paths: bool) -> None:
    """xunit1's ``file`` attribute plus the naming heuristic recover every id here; only the
    non-strict XPASS is lost (it reads as a pass)."""
    known = _known_paths(synthetic.root) if with_known_paths else ()
    report = parse_junit(synthetic.xunit1, known_paths=known)
    assert list(report.results) == synthetic.collected
    _assert_outcomes(report, EXPECTED_WITHOUT_PLUGIN)
    _assert_collection_error(report)
    assert report.nonce is None


@pytest.mark.parametrize("with_known_paths", [False, True])
def test_xunit2_without_plugin_round_trips(synthetic: Synthetic, with_known_paths: bool) -> None:
    """Without ``file`` the module path comes from known_paths or, failing that, from the
    upper-case-class heuristic, which this project's layout satisfies."""
    known = _known_paths(synthetic.root) if with_known_paths else ()
    report = parse_junit(synthetic.xunit2, known_paths=known)
    assert list(report.results) == synthetic.collected
    _assert_outcomes(report, EXPECTED_WITHOUT_PLUGIN)
    _assert_collection_error(report)


def test_xunit2_heuristic_fails_where_documented(synthetic: Synthetic) -> None:
    """A module whose name starts with an upper-case letter is read as a class without known_paths."""
    xml = synthetic.xunit2.replace(b'classname="tests.sub.test_deep"', b'classname="tests.sub.Test_deep"')
    ids = parse_junit(xml).results
    assert "tests/sub.py::Test_deep::test_deep" in ids
    assert "tests/sub/Test_deep.py::test_deep" in parse_junit(xml, known_paths=["tests/sub/Test_deep.py"]).results


# ---------------------------------------------------------------------------------------------
# Other real reports: collectors that fail, modules that skip, pytest's own crash
# ---------------------------------------------------------------------------------------------


def test_collection_errors_of_classes_packages_and_directories(tmp_path: Path) -> None:
    files = {
        "pytest.ini": "[pytest]\n",
        "pkg/__init__.py": "raise ImportError('pkg init broken')\n",
        "pkg/test_a.py": "def test_a():\n    pass\n",
        "sub/conftest.py": "import nonexistent_mod\n",
        "sub/test_b.py": "def test_b():\n    pass\n",
        "cls/test_c.py": textwrap.dedent(
            """\
            import pytest


            class TestC:
                @pytest.mark.parametrize("x", [1], ids=lambda v: 1 / 0)
                def test_c(self, x):
                    pass


            def test_ok():
                pass
            """
        ),
        "test_skipmod.py": "import pytest\n\npytest.skip('whole module', allow_module_level=True)\n",
    }
    project = tmp_path / "project"
    _write_files(project, files)
    plugin_dir = _write_plugin(tmp_path / "plugin")
    expected_errors = {
        "cls/test_c.py::TestC": "ValueError: cls/test_c.py::TestC::test_c: error raised while trying to determine id",
        "pkg/test_a.py": "ImportError: pkg init broken",
        "sub": "ModuleNotFoundError: No module named 'nonexistent_mod'",
    }
    for family, plugin, known in [
        ("xunit1", plugin_dir, ()),
        ("xunit1", None, ()),
        ("xunit2", None, _known_paths(project)),
    ]:
        xml = _junit_run(project, tmp_path / f"{family}.xml", family, "--continue-on-collection-errors", plugin_dir=plugin)
        report = parse_junit(xml, known_paths=known)
        assert list(report.results) == ["cls/test_c.py::test_ok"], family  # the skipped module has no tests
        assert report.results["cls/test_c.py::test_ok"].outcome == "passed"
        errors = {error.location: error.message for error in report.collection_errors}
        assert list(errors) == list(expected_errors), family
        for location, message in expected_errors.items():
            assert errors[location].startswith(message), (family, errors[location])


@pytest.mark.parametrize("style", ["auto", "native", "long"])
def test_a_collection_error_names_the_repository_files_its_traceback_passes(tmp_path: Path, style: str) -> None:
    """A module that pytest collects imports test classes from modules that import the package
    (the layout of a suite gathered into ``tests/__main__.py``): when one of them no longer
    imports, the error is the collected module's, and its chain names the file that broke, in every
    traceback style (an ImportError is always printed short; other errors in the style asked)."""
    files = {
        "pytest.ini": "[pytest]\npython_files = __main__.py\n",
        "pkg/__init__.py": "",
        "pkg/words.py": "def shout(text):\n    return text.upper()\n",
        "tests/__init__.py": "",
        "tests/__main__.py": "from .test_words import TestWords\nfrom .test_more import TestMore\n",
        "tests/test_words.py": "from pkg.words import whisper\n\n\nclass TestWords:\n    def test_a(self):\n        pass\n",
        "tests/test_more.py": "import pkg.words\n\nLOUD = pkg.words.yell\n\n\nclass TestMore:\n    def test_b(self):\n        pass\n",
    }
    project = tmp_path / "project"
    _write_files(project, files)
    plugin_dir = _write_plugin(tmp_path / "plugin")
    xml = _junit_run(project, tmp_path / "report.xml", "xunit1", f"--tb={style}", plugin_dir=plugin_dir)
    (error,) = parse_junit(xml, known_paths=_known_paths(project)).collection_errors
    assert error.location == "tests/__main__.py"
    assert error.chain == ("tests/__main__.py", "tests/test_words.py"), error
    (project / "tests/test_words.py").write_text("class TestWords:\n    def test_a(self):\n        pass\n")
    xml = _junit_run(project, tmp_path / "report.xml", "xunit1", f"--tb={style}", plugin_dir=plugin_dir)
    (error,) = parse_junit(xml, known_paths=_known_paths(project)).collection_errors
    assert error.message.startswith("AttributeError") and error.chain == ("tests/__main__.py", "tests/test_more.py"), error


def test_pytest_internal_error_raises(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (project / "conftest.py").write_text(
        "def pytest_collection_modifyitems(items):\n    raise RuntimeError('hook exploded')\n", encoding="utf-8"
    )
    (project / "test_a.py").write_text("def test_a():\n    pass\n", encoding="utf-8")
    proc = _pytest(project, [f"--junitxml={tmp_path / 'r.xml'}"], plugin_dir=_write_plugin(tmp_path / "plugin"))
    assert proc.returncode == 3, proc.stdout + proc.stderr  # pytest's exit code for an internal error
    with pytest.raises(TestRunError, match="hook exploded") as caught:
        parse_junit((tmp_path / "r.xml").read_bytes())
    assert caught.value.reason == "pytest_internal_error"


# ---------------------------------------------------------------------------------------------
# Golden reports recorded from released projects
# ---------------------------------------------------------------------------------------------

GOLDEN_PROJECTS = ["addict", "inflection", "iniconfig", "ordered-set", "six"]
GOLDEN_VARIANTS = ["plugin-xunit1", "xunit1", "xunit2"]
_VERBOSE_LINE = re.compile(
    r"(?P<nodeid>\S.*?) (?P<word>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)(?: \(.*\))?\s+\[\s*\d+%\]"
)
_WORD_OUTCOMES = {
    "PASSED": "passed",
    "FAILED": "failed",
    "ERROR": "error",
    "SKIPPED": "skipped",
    "XFAIL": "xfailed",
    "XPASS": "xpassed",
}


def _terminal_outcomes(path: Path) -> dict[str, str]:
    """Node ids and outcomes, in run order, from the ``pytest -v`` output of the recording run."""
    outcomes: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if match := _VERBOSE_LINE.fullmatch(line):
            outcomes[match["nodeid"]] = _WORD_OUTCOMES[match["word"]]
    return outcomes


@pytest.mark.parametrize("variant", GOLDEN_VARIANTS)
@pytest.mark.parametrize("project", GOLDEN_PROJECTS)
def test_golden_report_matches_terminal_output(project: str, variant: str) -> None:
    expected = _terminal_outcomes(FIXTURES / f"{project}.{variant}.terminal.txt")
    known = (FIXTURES / f"{project}.files.txt").read_text(encoding="utf-8").splitlines()
    report = parse_junit((FIXTURES / f"{project}.{variant}.xml").read_bytes(), known_paths=known)
    assert expected, "no test lines found in the terminal output"
    assert {nodeid: result.outcome for nodeid, result in report.results.items()} == expected
    assert list(report.results) == list(expected)  # report order is run order
    assert report.collection_errors == ()
    assert report.nonce == (f"nonce-{project}" if variant.startswith("plugin") else None)


@pytest.mark.parametrize("project", GOLDEN_PROJECTS)
def test_golden_xunit2_without_known_paths(project: str) -> None:
    """The heuristic alone gets every id of these projects except ordered-set's README.md doctest
    (a non-.py file: ``classname="README.md"`` reads as module ``README/md.py``)."""
    expected = list(_terminal_outcomes(FIXTURES / f"{project}.xunit2.terminal.txt"))
    parsed = list(parse_junit((FIXTURES / f"{project}.xunit2.xml").read_bytes()).results)
    wrong = {expected_id: parsed_id for expected_id, parsed_id in zip(expected, parsed, strict=True) if expected_id != parsed_id}
    assert wrong == ({"README.md::README.md": "README/md.py::README.md"} if project == "ordered-set" else {})


def test_golden_skip_messages() -> None:
    results = parse_junit((FIXTURES / "six.plugin-xunit1.xml").read_bytes()).results
    assert results["test_six.py::test_move_items[dbm_gnu]"].message == "requires gdbm"
    assert results["test_six.py::test_move_items[dbm_gnu]"].outcome == "skipped"


# ---------------------------------------------------------------------------------------------
# Unreadable reports and the plugin itself
# ---------------------------------------------------------------------------------------------

_CASE = '<testcase classname="test_a" name="test_x" file="test_a.py" line="0" time="0.010">{}</testcase>'


def _report(*cases: str, suite_properties: str = "") -> str:
    return (
        '<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest">'
        f"{suite_properties}{''.join(cases)}</testsuite></testsuites>"
    )


def _props(*pairs: tuple[str, str]) -> str:
    inner = "".join(f'<property name="{name}" value="{value}"/>' for name, value in pairs)
    return f"<properties>{inner}</properties>"


@pytest.mark.parametrize(
    "xml",
    [
        b"",
        b"<testsuites><testsuite>",  # truncated, as when pytest is killed mid-write
        b"<html><body>not junit</body></html>",
        _report('<testcase name="test_x" time="0.1"/>'),  # no classname
        _report('<testcase classname="test_a" name="test_x" time="soon"/>'),
        _report(_CASE.format(_props(("taskforge.nodeid", "a.py::x"), ("taskforge.nodeid", "a.py::y")))),
        _report(_CASE.format(_props(("taskforge.outcome", "xfailed")))),  # xfailed without <skipped>
        _report(_CASE.format(""), suite_properties=_props(("taskforge.nonce", "a"), ("taskforge.nonce", "b"))),
    ],
    ids=["empty", "truncated", "not-junit", "no-classname", "bad-time", "two-nodeids", "xfailed-no-skip", "two-nonces"],
)
def test_unreadable_reports_raise(xml: str | bytes) -> None:
    with pytest.raises(TestRunError) as caught:
        parse_junit(xml)
    assert caught.value.reason == "report_unreadable"


def test_bare_testsuite_root_from_old_pytest() -> None:
    xml = '<testsuite name="pytest">' + _CASE.format("") + "</testsuite>"
    assert list(parse_junit(xml).results) == ["test_a.py::test_x"]


def test_long_failure_message_is_cut_to_its_first_line() -> None:
    message = "E" * 500 + "&#10;second line"
    report = parse_junit(_report(_CASE.format(f'<failure message="{message}">trace</failure>')))
    assert report.results["test_a.py::test_x"].message == "E" * 300


def test_plugin_source_is_the_module_file() -> None:
    assert plugin_source() == (Path(junit.__file__).parents[1] / "guest" / "plugin.py").read_text(encoding="utf-8")


def test_plugin_is_standalone() -> None:
    """The sandbox has no taskforge: the plugin may import only the stdlib and pytest (and
    coverage, which the environment always installs, for the coverage-map run only)."""
    tree = ast.parse(plugin_source())
    roots = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    roots |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert roots - {"pytest", "_pytest", "coverage"} <= sys.stdlib_module_names


def test_plugin_and_parser_agree_on_property_names() -> None:
    from taskforge.guest import plugin as pytest_plugin

    assert pytest_plugin.NODEID_PROPERTY == junit.NODEID_PROPERTY
    assert pytest_plugin.OUTCOME_PROPERTY == junit.OUTCOME_PROPERTY
    assert pytest_plugin.NONCE_PROPERTY == junit.NONCE_PROPERTY
    assert pytest_plugin.FLAKY_PROPERTY == junit.FLAKY_PROPERTY


def test_the_plugin_names_the_tests_the_project_marks_flaky(tmp_path: Path) -> None:
    """A timing test the project marks flaky (zipp's big-O checks under pytest-ignore-flaky) may
    pass at the baseline and turn xfailed in a scoring run: mining leaves such tests out, so a
    whole run's report names them (``@pytest.mark.flaky``, or the flaky package's attribute)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_timing.py").write_text(
        "import pytest\n\n\n"
        "@pytest.mark.flaky\ndef test_linear():\n    pass\n\n\n"
        "def test_rerun():\n    pass\n\n\ntest_rerun._flaky_max_runs = 3  # what flaky's @flaky sets\n\n\n"
        "def test_plain():\n    pass\n\n\n"
        "@pytest.mark.flaky(reruns=2)\nclass TestSlow:\n    def test_one(self):\n        pass\n",
        encoding="utf-8")
    plugin_dir = _write_plugin(tmp_path / "plugin")
    out = tmp_path / "report.xml"
    proc = _pytest(project, [f"--junitxml={out}", "-W", "ignore::pytest.PytestUnknownMarkWarning"], plugin_dir=plugin_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = parse_junit(out.read_bytes(), known_paths=["test_timing.py"])
    flaky = [json.loads(value) for name, value in report.properties if name == junit.FLAKY_PROPERTY]
    assert flaky == [["test_timing.py::test_linear", "test_timing.py::test_rerun", "test_timing.py::TestSlow::test_one"]]


def test_a_session_a_keyboard_interrupt_stopped_is_read(tmp_path: Path) -> None:
    """A test that lets a KeyboardInterrupt escape stops pytest, which writes a ``<testcase>``
    with neither classname nor name for it (a canary twin of a test of control-flow exceptions
    did so, and the unreadable report ended a whole repository's mining). The tests before it
    are read; it and the ones after it are missing."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_stop.py").write_text(
        "def test_before():\n    pass\n\n\ndef test_stops():\n    raise KeyboardInterrupt\n\n\n"
        "def test_after():\n    pass\n", encoding="utf-8")
    out = tmp_path / "report.xml"
    proc = _pytest(project, [f"--junitxml={out}"], plugin_dir=_write_plugin(tmp_path / "plugin"))
    assert proc.returncode == 2, proc.stdout + proc.stderr  # interrupted
    assert b'<testcase time="' in out.read_bytes()
    report = parse_junit(out.read_bytes(), known_paths=["test_stop.py"])
    assert {t: r.outcome for t, r in report.results.items()} == {"test_stop.py::test_before": "passed"}

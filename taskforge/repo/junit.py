"""Read pytest's JUnit XML report into exact node ids and per-test outcomes.

pytest's JUnit XML is lossy, so taskforge runs pytest with a small plugin
(``taskforge/guest/plugin.py``, installed in the sandbox as :data:`PLUGIN_MODULE`) that writes
the exact node id and the xfail outcome of every test as ``<property>`` elements. This module reads
those when present and otherwise rebuilds what it can from the report alone.

Outcomes. In each ``<testcase>``: ``<error>`` is "error" (setup or teardown), ``<failure>`` is
"failed" (a strict XPASS is a failure too), ``<skipped type="pytest.xfail">`` is "xfailed", any
other ``<skipped>`` is "skipped", and a test with none of them "passed", unless the plugin says
"xfailed" or "xpassed": without the plugin a non-strict XPASS reads as "passed". When a test fails
and its teardown then errors, pytest writes two ``<testcase>`` elements for the one node id; they
are merged into one result with the worse outcome (error beats failed beats the rest), the worse
one's message, and the summed duration.

Collection failures (``<error message="collection failure">``, written for a module, class,
package or directory that could not be collected) become :class:`CollectionError`, not results. A
module skipped at import (``pytest.skip(allow_module_level=True)``) has no tests and is left out.
A pytest internal error raises :class:`~taskforge.errors.TestRunError`.

Node ids without the plugin. pytest writes ``classname`` (the module path with ``/`` turned into
``.`` and ``.py`` dropped, then the classes, dot-joined) and ``name`` (the function, with its
parameter id). The module path is found, in this order:

1. ``junit_family=xunit1`` writes ``file``, the file that *defines* the test: exact whenever that
   is the test's own module (it is not for a test inherited from, or imported out of, another
   module; then the next rules apply);
2. ``known_paths`` (the repository's files, relative to pytest's rootdir): the longest one whose
   dotted form prefixes ``classname``. This also resolves directories with dots in their names
   and doctest text files such as ``README.md``;
3. otherwise the trailing ``classname`` segments that start with an upper-case letter are taken
   as classes and the rest as the module path (``a.b.TestC`` is ``a/b.py::TestC``). Wrong for
   modules or directories whose names start with an upper-case letter, for lower-case class
   names, for dotted directory names and for non-``.py`` test files.

Whatever the rule, ids cannot round-trip without the plugin when a directory or file name holds
``[`` (pytest splits the id at the first ``[``). With or without it, characters that XML cannot
carry (control characters; pytest's own parameter ids escape them, so only file or function names
could hold them) come back as pytest's visual ``#xNN`` escapes.

The nonce. The plugin writes ``$TASKFORGE_NONCE`` as a ``taskforge.nonce`` property of the
``<testsuite>``; :attr:`JUnitReport.nonce` is that value, or ``None`` without one. Two different
values (test code recording its own) make the report unreadable.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

from taskforge import guest
from taskforge.errors import TestRunError

__all__ = [
    "PLUGIN_MODULE",
    "CollectionError",
    "JUnitReport",
    "Outcome",
    "TestResult",
    "parse_junit",
    "plugin_source",
]

Outcome = Literal["passed", "failed", "error", "skipped", "xfailed", "xpassed"]

PLUGIN_MODULE = "taskforge_pytest_plugin"
"""The module name the plugin is installed under in the sandbox (``pytest -p taskforge_pytest_plugin``)."""

# Property names the plugin writes (kept equal to those in pytest_plugin.py; a test checks).
NODEID_PROPERTY = "taskforge.nodeid"
OUTCOME_PROPERTY = "taskforge.outcome"
NONCE_PROPERTY = "taskforge.nonce"
FLAKY_PROPERTY = "taskforge.flaky"

_MESSAGE_LIMIT = 300
_SEVERITY: dict[str, int] = {"error": 2, "failed": 1}  # every other outcome is 0
# A line of an exception as pytest prints it after "E": "ValueError: x", "pkg.mod.Oops: y", "KeyError".
_EXCEPTION_LINE = re.compile(r"(?:[a-z_]\w*\.)*[A-Z]\w*(?::\s.*|:?$)")
_SYNTAX_ERRORS = ("SyntaxError", "IndentationError", "TabError")
_SOURCE_LOCATION = re.compile(r'File "(?P<path>[^"]*)", line (?P<line>\d+)')
# A frame of a traceback: pytest's short style (``tests/x.py:3: in <module>``) and long one
# (``tests/x.py:3: `` or ``tests/x.py:3: AttributeError``, source lines indented), or Python's
# native one (``  File "/repo/tests/x.py", line 3, in <module>``).
_FRAME = re.compile(r'(?!E\s)(?P<short>[^\s>][^\n]*?\.py):\d+:(?: .*)?|\s+File "(?P<native>[^"]+\.py)", line \d+.*')


@dataclass(frozen=True, kw_only=True, slots=True)
class TestResult:
    """The outcome of one test."""

    __test__ = False  # not a pytest test class, despite the name

    nodeid: str
    """The canonical pytest node id, e.g. ``tests/test_x.py::TestC::test_f[1-a]``."""
    outcome: Outcome
    """What happened, with xfail outcomes kept apart from pass and skip."""
    duration_s: float
    """Seconds spent in setup, call and teardown together."""
    message: str
    """The failure, error, skip or xfail message: its first line, at most 300 characters; "" when passed."""


@dataclass(frozen=True, kw_only=True, slots=True)
class CollectionError:
    """A module (or class, package, directory) that pytest could not collect."""

    location: str
    """Its node id: ``tests/test_x.py``, ``tests/test_x.py::TestC`` or a directory such as ``tests/sub``."""
    message: str
    """The most telling line of the error, e.g. ``ModuleNotFoundError: No module named 'foo'``."""
    chain: tuple[str, ...] = ()
    """The repository files its traceback passes through, outermost first, relative to pytest's
    rootdir: ``("tests/__main__.py", "tests/test_words.py")`` when the collected module imports a
    test module whose own import failed (files outside the rootdir are left out)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class JUnitReport:
    """Everything taskforge takes from one pytest JUnit XML report."""

    results: dict[str, TestResult]
    """Results keyed by canonical node id, in report order."""
    collection_errors: tuple[CollectionError, ...]
    """What failed to collect, in report order."""
    nonce: str | None
    """The ``taskforge.nonce`` the plugin wrote, or ``None`` when the report carries none."""
    properties: tuple[tuple[str, str], ...] = ()
    """Every ``<testsuite>`` property, in report order (the scoring guard's among them)."""


def plugin_source() -> str:
    """The plugin's source, to be written into the sandbox as ``taskforge_pytest_plugin.py``."""
    return guest.source("plugin")


def parse_junit(xml: bytes | str, *, known_paths: Iterable[str] = ()) -> JUnitReport:
    """Parse a pytest JUnit XML report.

    ``known_paths`` are the repository's file paths relative to pytest's rootdir; they only help
    rebuild node ids of tests that lack the plugin's ``taskforge.nodeid`` property (see the module
    docstring). Raises :class:`TestRunError` with reason ``report_unreadable`` for a report that is
    not well-formed or not pytest's, and ``pytest_internal_error`` when pytest crashed.
    """
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as err:
        raise TestRunError(f"JUnit report is not well-formed XML: {err}", reason="report_unreadable") from err
    if root.tag == "testsuites":
        suites = root.findall("testsuite")
    elif root.tag == "testsuite":  # pytest before 5.1 wrote a bare <testsuite>
        suites = [root]
    else:
        raise TestRunError(f"JUnit report has a <{root.tag}> root, not <testsuites>", reason="report_unreadable")

    files, directories = _indexed(known_paths)
    results: dict[str, TestResult] = {}
    collection_errors: list[CollectionError] = []
    nonces: set[str] = set()
    suite_properties: list[tuple[str, str]] = []
    for suite in suites:
        suite_properties += _properties(suite)
        nonces.update(value for name, value in _properties(suite) if name == NONCE_PROPERTY)
        for case in suite.findall("testcase"):
            classname, name = case.get("classname"), case.get("name")
            if classname is None and name is None and not len(case):
                # pytest's record of a session a KeyboardInterrupt stopped (a test that lets one
                # escape): no test; the ones after it are missing, and the exit status says why.
                continue
            if classname is None or name is None:
                raise TestRunError("JUnit report has a <testcase> without classname or name", reason="report_unreadable")
            properties = _properties(case)
            error, failure, skipped = case.find("error"), case.find("failure"), case.find("skipped")
            if error is not None and error.get("message") == "collection failure":
                location = _rebuild_nodeid(classname, name, file=case.get("file"), files=files, directories=directories)
                collection_errors.append(CollectionError(location=location, message=_telling_line(error.text or ""),
                                                         chain=_traceback_files(error.text or "", files.values())))
                continue
            if skipped is not None and skipped.get("message") == "collection skipped":
                continue
            if classname == "pytest" and name == "internal" and error is not None:
                raise TestRunError(
                    f"pytest crashed with an internal error: {_telling_line(error.text or '')}",
                    reason="pytest_internal_error",
                )
            nodeid = _single(properties, NODEID_PROPERTY) or _rebuild_nodeid(
                classname, name, file=case.get("file"), files=files, directories={}
            )
            outcome, detail = _outcome(error, failure, skipped, _single(properties, OUTCOME_PROPERTY))
            result = TestResult(
                nodeid=nodeid,
                outcome=outcome,
                duration_s=_seconds(case.get("time")),
                message=_short_message(detail),
            )
            earlier = results.get(nodeid)
            results[nodeid] = result if earlier is None else _merge(earlier, result)

    if len(nonces) > 1:
        raise TestRunError(f"JUnit report carries {len(nonces)} different nonces", reason="report_unreadable")
    return JUnitReport(results=results, collection_errors=tuple(collection_errors), nonce=next(iter(nonces), None),
                       properties=tuple(suite_properties))


def _properties(element: ET.Element) -> list[tuple[str, str]]:
    return [(prop.get("name", ""), prop.get("value", "")) for prop in element.findall("properties/property")]


def _single(properties: list[tuple[str, str]], name: str) -> str | None:
    """The one value of a plugin property, or None. Test code can record properties too, so a
    second, different value means the report cannot be trusted."""
    values = {value for key, value in properties if key == name}
    if len(values) > 1:
        raise TestRunError(f"JUnit testcase has conflicting {name} properties: {sorted(values)}", reason="report_unreadable")
    return next(iter(values), None)


def _seconds(time: str | None) -> float:
    try:
        return float(time or 0.0)
    except ValueError:
        raise TestRunError(f"JUnit testcase has time={time!r}", reason="report_unreadable") from None


def _outcome(
    error: ET.Element | None, failure: ET.Element | None, skipped: ET.Element | None, plugin_outcome: str | None
) -> tuple[Outcome, ET.Element | None]:
    """The outcome of one <testcase> and the element whose message explains it."""
    if error is not None:  # an error in teardown follows whatever the call did
        return "error", error
    if failure is not None:
        return "failed", failure
    if skipped is not None:
        return ("xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"), skipped
    if plugin_outcome == "xpassed":
        return "xpassed", None
    if plugin_outcome is not None:
        raise TestRunError(
            f"JUnit testcase says {OUTCOME_PROPERTY}={plugin_outcome!r} but has no <skipped>", reason="report_unreadable"
        )
    return "passed", None


def _merge(earlier: TestResult, later: TestResult) -> TestResult:
    """Two <testcase> elements for one node id: a failed call followed by a teardown error."""
    worse = later if _SEVERITY.get(later.outcome, 0) > _SEVERITY.get(earlier.outcome, 0) else earlier
    return TestResult(
        nodeid=earlier.nodeid,
        outcome=worse.outcome,
        duration_s=earlier.duration_s + later.duration_s,
        message=worse.message,
    )


def _short_message(detail: ET.Element | None) -> str:
    if detail is None:
        return ""
    for text in (detail.get("message") or "", detail.text or ""):
        for line in text.splitlines():
            if line.strip():
                return line.strip()[:_MESSAGE_LIMIT]
    return ""


def _telling_line(text: str) -> str:
    """The exception line of a collection error's traceback, e.g. ``SyntaxError: invalid syntax
    (mod.py, line 3)``; the last line that pytest marked with ``E`` if none looks like one."""
    marked = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    for index in range(len(marked) - 1, -1, -1):
        line = marked[index]
        if not _EXCEPTION_LINE.fullmatch(line):
            continue
        if line.startswith(_SYNTAX_ERRORS):
            # pytest prints the offending file on an earlier line; Python's own str() adds it too.
            where = [m for m in map(_SOURCE_LOCATION.search, marked[:index]) if m is not None]
            if where:
                line += f" ({PurePosixPath(where[-1]['path']).name}, line {where[-1]['line']})"
        return line[:_MESSAGE_LIMIT]
    fallback = marked or [line.strip() for line in text.splitlines() if line.strip()]
    return fallback[-1][:_MESSAGE_LIMIT] if fallback else ""


def _traceback_files(text: str, known: Iterable[str]) -> tuple[str, ...]:
    """The repository files a traceback's frames are in, outermost first, each once in a row.
    pytest prints a file under its rootdir relative to it; an absolute path (the native style)
    is taken for the longest of the ``known`` files it ends with, and left out without one."""
    known = sorted(known, key=len, reverse=True)
    chain: list[str] = []
    for line in text.splitlines():
        match = _FRAME.fullmatch(line)
        if match is None:
            continue
        path = match["short"] or match["native"]
        if path.startswith("/"):
            path = next((k for k in known if path.endswith(f"/{k}")), "")
        path = path.removeprefix("./")
        if path and not path.startswith("../") and (not chain or chain[-1] != path):
            chain.append(path)
    return tuple(chain)


def _dotted(path: str) -> str:
    """A node id path as pytest's JUnit writer mangles it: ``a/b/c.py`` becomes ``a.b.c``."""
    return re.sub(r"\.py$", "", path.replace("/", "."))


_LAST_INDEX: list[Any] = [None, None]


def _indexed(known_paths: Iterable[str]) -> tuple[dict[str, str], dict[str, str]]:
    """:func:`_index_paths`, kept for the last tuple of paths given: a runner passes the same
    tuple of a repository's files to every report it reads (30,000 files take 0.7 s to index)."""
    if type(known_paths) is tuple and _LAST_INDEX[0] is known_paths:
        return _LAST_INDEX[1]
    index = _index_paths(known_paths)
    if type(known_paths) is tuple:
        _LAST_INDEX[:] = [known_paths, index]
    return index


def _index_paths(known_paths: Iterable[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Known files, and the directories above them, keyed by their mangled (dotted) form."""
    files: dict[str, str] = {}
    directories: dict[str, str] = {}
    for raw in known_paths:
        path = PurePosixPath(raw.replace("\\", "/"))
        files.setdefault(_dotted(str(path)), str(path))
        for parent in path.parents:
            if str(parent) != ".":
                directories.setdefault(_dotted(str(parent)), str(parent))
    return files, directories


def _rebuild_nodeid(
    classname: str, name: str, *, file: str | None, files: Mapping[str, str], directories: Mapping[str, str]
) -> str:
    """Undo pytest's mangling of a node id into ``classname`` and ``name`` (see the module docstring).

    An empty classname is a collector's report: ``name`` is then its mangled path, which may be a
    directory; only collectors get ``directories`` (a test's module is always a file).
    """
    dotted, tail = (classname, [name]) if classname else (name, [])
    path, classes = _split_module(dotted, file=file, known={**directories, **files})
    return "::".join([path, *classes, *tail])


def _split_module(dotted: str, *, file: str | None, known: Mapping[str, str]) -> tuple[str, list[str]]:
    """Split a mangled ``module.path.Class.Nested`` into the module's path and its class names."""
    if file is not None:
        mangled = _dotted(file)
        if dotted == mangled:
            return file, []
        if dotted.startswith(mangled + "."):
            return file, dotted[len(mangled) + 1 :].split(".")
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        path = known.get(".".join(parts[:end]))
        if path is not None:
            return path, parts[end:]
    end = len(parts)
    while end > 1 and parts[end - 1][:1].isupper():
        end -= 1
    return "/".join(parts[:end]) + ".py", parts[end:]

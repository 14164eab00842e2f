"""taskforge's pytest plugin: makes pytest's JUnit XML report say exactly what happened.

Standalone on purpose (stdlib and pytest only, pytest >= 7): it is copied into the sandbox as
``taskforge_pytest_plugin.py`` and loaded with ``-p taskforge_pytest_plugin``, which works even
with ``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``. It adds JUnit properties that ``taskforge.repo.junit`` reads:

- ``taskforge.nodeid`` on every testcase: the exact node id, which pytest's ``classname``/``name``
  mangle beyond exact recovery;
- ``taskforge.outcome`` ("xfailed" or "xpassed") on tests marked xfail, since pytest writes a
  non-strict XPASS as a plain pass;
- ``taskforge.nonce`` once, on the ``<testsuite>``: the value of ``$TASKFORGE_NONCE``. The variable
  is removed from the environment before any ``conftest.py`` is imported, so test code cannot read
  it and forge a report that passes the scorer's check;
- ``taskforge.flaky`` once, on the ``<testsuite>`` of a whole run: a JSON list of the node ids the
  project marks flaky (``@pytest.mark.flaky``, as pytest-rerunfailures and pytest-ignore-flaky read
  it, or the flaky package's ``@flaky``), which mining leaves out of both lists.

With ``$TASKFORGE_OUTCOME_FD`` set (the scoring supervisor's pipe, see ``supervisor.py``), it
writes one JSON line to that descriptor as each test finishes, ``{"t": NODEID, "o": OUTCOME}``
(``passed`` only when setup, call and teardown all passed and the test is not an xfail), and
``{"finish": EXIT_STATUS}`` when the session ends.

With ``$TASKFORGE_COVERAGE_OUT`` set it also measures line coverage (coverage.py) of the
directories in ``$TASKFORGE_COVERAGE_SOURCE`` with one context per test, and writes
``{"lines": {node id: {file: [lines]}}, "definitions": {node id: [file, line, qualname]}}`` as
JSON to that path when pytest ends: where each test function is defined, as Python saw it (a test
that a factory function generates, ``globals()[name] = type(...)``, is found there, where no
reading of the source finds it). With
``$TASKFORGE_SELECT`` naming a JSON file of node ids, only those tests run (the rest are
deselected): argument lists cannot carry tens of thousands of ids; with ``$TASKFORGE_ORDER`` set to
``reverse`` as well, their files run in reverse order. These variables are removed
from the environment before any test code runs. Without it, every test runs but the items that
plugins such as lint checks add to each Python file (``_file_check``): tasks test what code does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Generator
from typing import Any

import pytest

NODEID_PROPERTY = "taskforge.nodeid"
OUTCOME_PROPERTY = "taskforge.outcome"
NONCE_PROPERTY = "taskforge.nonce"
FLAKY_PROPERTY = "taskforge.flaky"
NONCE_ENV = "TASKFORGE_NONCE"
COVERAGE_OUT_ENV = "TASKFORGE_COVERAGE_OUT"
COVERAGE_SOURCE_ENV = "TASKFORGE_COVERAGE_SOURCE"
SELECT_ENV = "TASKFORGE_SELECT"
LAYOUT_OUT_ENV = "TASKFORGE_LAYOUT_OUT"
OUTCOME_ENV = "TASKFORGE_OUTCOME_FD"
ORDER_ENV = "TASKFORGE_ORDER"

_outcome_fd_text = os.environ.pop(OUTCOME_ENV, "")
_OUTCOME_FD = int(_outcome_fd_text) if _outcome_fd_text.isdigit() else None
_phases: dict[str, str] = {}

_nonce_key = pytest.StashKey[str]()
_coverage_key = pytest.StashKey[Any]()
_coverage_out_key = pytest.StashKey[str]()
_select_key = pytest.StashKey[frozenset[str]]()
_layout_key = pytest.StashKey[str]()
_doctest_only_key = pytest.StashKey[frozenset[str]]()
_definitions_key = pytest.StashKey[dict[str, list[Any]]]()
_reverse_key = pytest.StashKey[bool]()


def _is_doctest_id(nodeid: str) -> bool:
    # As taskforge.task.is_doctest_id: a module's doctest, ``pkg/mod.py::pkg.mod.func``.
    path, sep, name = nodeid.partition("::")
    return bool(sep) and "::" not in name and path.endswith(".py") and "." in name.split("[", 1)[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_collect_file(file_path: Any, parent: pytest.Collector) -> Generator[None, Any, None]:
    # A source module given on the command line for its doctests alone is collected for them
    # alone: pytest collects every file named on the command line as a test module too, whatever
    # python_files says, which would run its test-like functions and module-level hooks.
    outcome = yield
    doctest_only = parent.config.stash.get(_doctest_only_key, frozenset())
    if not doctest_only:
        return
    try:
        rel = file_path.relative_to(parent.config.rootpath).as_posix()
    except ValueError:
        return
    if rel in doctest_only:
        from _pytest.doctest import DoctestModule

        outcome.force_result([c for c in outcome.get_result()
                              if isinstance(c, DoctestModule) or not isinstance(c, pytest.Module)])


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # Runs after -p plugins are imported and before the initial conftest.py files are.
    nonce = os.environ.pop(NONCE_ENV, None)
    if nonce is not None:
        early_config.stash[_nonce_key] = nonce
    select = os.environ.pop(SELECT_ENV, None)
    if select is not None:
        with open(select, encoding="utf-8") as f:
            wanted = frozenset(json.load(f))
        try:  # read before any project code runs, and gone after: the selection is nobody else's
            os.unlink(select)
        except OSError:
            pass
        early_config.stash[_select_key] = wanted
        files: dict[str, bool] = {}
        for nodeid in wanted:
            path = nodeid.split("::", 1)[0]
            files[path] = files.get(path, False) or not _is_doctest_id(nodeid)
        early_config.stash[_doctest_only_key] = frozenset(path for path, tests in files.items() if not tests)
    if os.environ.pop(ORDER_ENV, "") == "reverse":
        early_config.stash[_reverse_key] = True
    layout_out = os.environ.pop(LAYOUT_OUT_ENV, None)
    if layout_out is not None:
        early_config.stash[_layout_key] = layout_out
    coverage_out = os.environ.pop(COVERAGE_OUT_ENV, None)
    coverage_source = os.environ.pop(COVERAGE_SOURCE_ENV, "")
    if coverage_out is not None:
        import coverage  # only the coverage-map run needs it

        # In memory, ignoring any project coverage config: only this map is wanted.
        cov = coverage.Coverage(data_file=None, config_file=False, source=coverage_source.split(os.pathsep))
        cov.start()
        early_config.stash[_coverage_key] = cov
        early_config.stash[_coverage_out_key] = coverage_out


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> bool | None:
    layout_out = session.config.stash.get(_layout_key, None)
    if layout_out is None:
        return None
    layout = {"python_files": list(session.config.getini("python_files")),
              "testpaths": list(session.config.getini("testpaths"))}
    with open(layout_out, "w", encoding="utf-8") as out:
        json.dump(layout, out)
    session.items = []
    return True  # nothing is collected


def pytest_collectstart(collector: pytest.Collector) -> None:
    # pytest rewrites the asserts of every module named on the command line, as it does a test
    # module's; a source module named for its doctests alone would then raise pytest's longer
    # AssertionError where its doctests expect its own (zipp's ``Translator``: "AssertionError:
    # Invalid separators"), which a whole run, naming no file, never does. Test modules are still
    # rewritten by ``python_files``, conftest files always.
    if isinstance(collector, pytest.Session) and collector.config.stash.get(_doctest_only_key, frozenset()):
        try:
            from _pytest.assertion import assertstate_key

            state = collector.config.stash.get(assertstate_key, None)
        except ImportError:  # pytest before 7.0 kept it on the config
            state = getattr(collector.config, "_assertstate", None)
        hook = getattr(state, "hook", None)
        if hook is not None and getattr(hook, "session", None) is collector:
            hook.session = None


def _file_check(item: pytest.Item) -> bool:
    """Whether ``item`` is a plugin's item for a Python file (``.py``, ``.pyi``) that is neither a
    test function nor a doctest: a check of how the file is written (pytest-ruff's ``FILE::ruff``,
    pytest-flake8, pytest-mypy, pytest-black, pytest-isort, pytest-pylint), which an import a
    removal leaves unused fails, or an example some plugins take from its docstrings (sybil,
    xdoctest), which no task's tests can be (its file is source, the candidate's to write). Counted
    as a test, either made a source module look like a test file."""
    from _pytest.doctest import DoctestItem

    return not isinstance(item, (pytest.Function, DoctestItem)) and str(item.path).endswith((".py", ".pyi"))


def _definition(item: pytest.Item, root: str) -> list[Any] | None:
    """[repo-relative file, first line, qualname] of the function a test item runs, unwrapped
    (``functools.wraps``), or None outside the repository or without code."""
    import inspect

    if not isinstance(item, pytest.Function):
        return None
    try:
        function = inspect.unwrap(item.function)
    except ValueError:  # a cycle of __wrapped__
        return None
    code = getattr(function, "__code__", None)
    qualname = getattr(function, "__qualname__", None)
    if code is None or not isinstance(qualname, str):
        return None
    path = os.path.relpath(os.path.realpath(code.co_filename), os.path.realpath(root))
    if path.startswith(os.pardir + os.sep) or os.path.isabs(path):
        return None
    return [path.replace(os.sep, "/"), code.co_firstlineno, qualname]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.stash.get(_coverage_key, None) is not None:
        root = str(config.invocation_params.dir)  # the workspace, where pytest runs
        config.stash[_definitions_key] = {item.nodeid: found for item in items
                                          if (found := _definition(item, root)) is not None}
    wanted = config.stash.get(_select_key, None)
    if wanted is None:
        # A whole run (the baseline) leaves file checks out, so no task counts on one; a selection
        # that names one (a task mined before) still runs it.
        checks = [item for item in items if _file_check(item)]
        if checks:
            config.hook.pytest_deselected(items=checks)
            items[:] = [item for item in items if not _file_check(item)]
        _report_flaky(config, items)
        return
    deselected = [item for item in items if item.nodeid not in wanted]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item.nodeid in wanted]
    # A selection's files are named on the command line, in path order; without them pytest walks
    # its ``testpaths`` in the order the configuration lists them. Suites rely on that order (an
    # autouse fixture of ``tests/`` fills the doctest namespace that the ``docs/`` files read), so
    # the items go back into it.
    roots = _testpath_roots(config)
    if len(roots) > 1:
        items[:] = sorted(items, key=lambda item: _rank(str(item.path), roots))  # stable
    if config.stash.get(_reverse_key, False):
        # The files' order reversed, each file's own order kept: a test that passes only after
        # another file's tests ran (one of them raised the decimal context's precision) fails.
        files = list(dict.fromkeys(str(item.path) for item in items))
        place = {path: index for index, path in enumerate(reversed(files))}
        items[:] = sorted(items, key=lambda item: place[str(item.path)])


def _is_marked_flaky(item: pytest.Item) -> bool:
    if item.get_closest_marker("flaky") is not None:
        return True
    function = getattr(item, "obj", None)
    return hasattr(function, "_flaky_max_runs") or hasattr(getattr(item, "cls", None), "_flaky_max_runs")


def _report_flaky(config: pytest.Config, items: list[pytest.Item]) -> None:
    from _pytest.junitxml import xml_key

    writer = config.stash.get(xml_key, None)
    flaky = [item.nodeid for item in items if _is_marked_flaky(item)]
    if writer is not None and flaky:
        writer.add_global_property(FLAKY_PROPERTY, json.dumps(flaky))


def _testpath_roots(config: pytest.Config) -> list[str]:
    """The folders and files ``testpaths`` names, in the order pytest collects them."""
    import glob

    roots: list[str] = []
    for entry in config.getini("testpaths"):
        pattern = os.path.join(str(config.rootpath), entry)
        matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(entry) else [pattern]
        roots += [os.path.normpath(match) for match in matches]
    return roots


def _rank(path: str, roots: list[str]) -> int:
    for index, root in enumerate(roots):
        if path == root or path.startswith(root + os.sep):
            return index
    return len(roots)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, Any, None]:
    cov = item.config.stash.get(_coverage_key, None)
    if cov is not None:
        cov.switch_context(item.nodeid)  # setup, call and teardown all count for the test
    yield
    if cov is not None:
        cov.switch_context("")


def pytest_unconfigure(config: pytest.Config) -> None:
    cov = config.stash.get(_coverage_key, None)
    if cov is None:
        return
    cov.stop()
    data = cov.get_data()
    lines_by_test: dict[str, dict[str, list[int]]] = {}
    for path in sorted(data.measured_files()):
        for line, contexts in sorted(data.contexts_by_lineno(path).items()):
            for context in contexts:
                if context:
                    lines_by_test.setdefault(context, {}).setdefault(path, []).append(line)
    with open(config.stash[_coverage_out_key], "w", encoding="utf-8") as out:
        json.dump({"lines": lines_by_test, "definitions": config.stash.get(_definitions_key, {})}, out)


@pytest.hookimpl(trylast=True)  # after junitxml's own pytest_configure has set up its writer
def pytest_configure(config: pytest.Config) -> None:
    from _pytest.junitxml import (
        xml_key,  # the writer's stash key; private, but stable since pytest 7.0
    )

    writer = config.stash.get(xml_key, None)
    nonce = config.stash.get(_nonce_key, None)
    if writer is not None and nonce is not None:
        writer.add_global_property(NONCE_PROPERTY, nonce)


@pytest.hookimpl(hookwrapper=True)  # old-style wrapper: works with every pytest >= 7
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    # Reports copy item.user_properties when they are made, and junitxml writes the teardown
    # report's copy (plus the call report's when a failed call is followed by a teardown error).
    if call.when == "setup":
        item.user_properties.append((NODEID_PROPERTY, item.nodeid))
    outcome = yield
    report = outcome.get_result()
    if hasattr(report, "wasxfail"):  # set by pytest's skipping plugin on xfailed and non-strict xpassed reports
        item.user_properties.append((OUTCOME_PROPERTY, "xpassed" if report.passed else "xfailed"))


# Held as the plugin loads, before any code of the project's: the candidate's code may rebind
# ``os.write`` or the JSON encoder's module attributes later, and rewrite each line on its way out.
_WRITE = os.write
_QUOTE = json.encoder.encode_basestring_ascii  # C, or the module's own function as it loaded
_STR, _INT, _BOOL, _LIST, _TYPE = str, int, bool, list, type


def _line(record: dict[str, Any]) -> bytes:
    """``record`` (string keys; string, integer or boolean values, or lists of strings) as a line of
    JSON, written with the primitives held above only."""
    def value(v: Any) -> str:
        kind = _TYPE(v)
        if kind is _BOOL:
            return "true" if v else "false"
        if kind is _INT:
            return _INT.__repr__(v)
        if kind is _LIST:
            return "[" + ", ".join([value(e) for e in v]) + "]"
        return _QUOTE(_STR(v))

    return ("{" + ", ".join([_QUOTE(k) + ": " + value(v) for k, v in record.items()]) + "}\n").encode("utf-8", "replace")


def _emit(record: dict[str, Any]) -> None:
    if _OUTCOME_FD is None:
        return
    try:
        _WRITE(_OUTCOME_FD, _line(record))
    except OSError:
        pass  # the pipe is gone: the outcomes never arrive, and the tests count as not passed


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if _OUTCOME_FD is None:
        return
    state = _phases.get(report.nodeid, "passed")
    if hasattr(report, "wasxfail"):
        state = "xpassed" if report.passed else "xfailed"
    elif report.failed:
        state = "failed" if report.when == "call" and state == "passed" else ("error" if state == "passed" else state)
    elif report.skipped and state == "passed":
        state = "skipped"
    _phases[report.nodeid] = state


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    if _OUTCOME_FD is not None:
        _emit({"t": nodeid, "o": _phases.pop(nodeid, "missing")})


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _emit({"finish": int(exitstatus)})

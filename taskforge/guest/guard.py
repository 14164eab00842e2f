"""taskforge's scoring guard: a pytest plugin that catches a candidate tampering with the run from
inside the test process.

Standalone (stdlib and pytest only): the scorer copies it into the sandbox as
``taskforge_pytest_guard.py`` and loads it with ``-p taskforge_pytest_guard``, with plugin
autoloading disabled. It is imported before any ``conftest.py`` or package code, and then:

- records the identity of every function and class in pytest's reporting machinery (runner,
  reports, skipping, outcomes, junitxml, terminal, the python and unittest collectors), in
  pluggy's hook calling, in ``unittest.case`` and in ``builtins``;
- after each test's teardown and at the end of the session, compares them again, and looks at
  every hook implementation registered with pytest.

It also holds the hidden tests to their files (``$TASKFORGE_GUARD_TESTS``: each test file's
path and sha256 as the scorer wrote it): after collection, every collected test of those files
must run code compiled from the file, unchanged on disk (assertions rewritten as pytest rewrites
them), and still the same code when it is set up. An audit hook it installs first notes an audit
hook added, or a function's code swapped, from the candidate's code; import hooks the candidate's
code adds to ``sys.meta_path`` or ``sys.path_hooks`` are noted too.

A replaced function, or a hook implementation, that comes from a file the candidate wrote (the
list arrives in ``$TASKFORGE_GUARD_CANDIDATE``, a JSON list of absolute paths), or from nowhere
traceable, is tampering; the hooks of the image's own plugins (``$TASKFORGE_GUARD_TRUSTED``) are
not held against a candidate that edits their module. Each finding becomes a ``taskforge.tampered`` property of the JUnit
``<testsuite>``; ``taskforge.guard`` marks a report the guard saw through, so a report without it
was not written by a guarded run. Checks run between tests only, so a test's own monkeypatching
(undone at its teardown) is never mistaken for tampering.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

GUARD_PROPERTY = "taskforge.guard"
TAMPERED_PROPERTY = "taskforge.tampered"
CANDIDATE_ENV = "TASKFORGE_GUARD_CANDIDATE"
TRUSTED_ENV = "TASKFORGE_GUARD_TRUSTED"
TESTS_ENV = "TASKFORGE_GUARD_TESTS"

_WATCHED = (
    "_pytest.runner", "_pytest.reports", "_pytest.skipping", "_pytest.outcomes", "_pytest.junitxml",
    "_pytest.terminal", "_pytest.python", "_pytest.unittest", "_pytest.main", "_pytest.nodes",
    "_pytest.fixtures", "_pytest.config", "_pytest.warnings", "_pytest.capture", "_pytest.logging",
    "pluggy._hooks", "pluggy._callers", "pluggy._manager", "pluggy._result",
    "unittest.case", "unittest.result", "builtins", "_pytest.assertion.rewrite", "_pytest.assertion.util",
    "_pytest.assertion",
)
# Checked after every test (cheap); all of _WATCHED at the start and end of the session.
_EVERY_TEST = ("_pytest.runner", "_pytest.reports", "_pytest.skipping", "_pytest.outcomes", "_pytest.junitxml",
               "pluggy._hooks", "pluggy._callers")
_REPORT_HOOKS = ("pytest_runtest_makereport", "pytest_runtest_logreport", "pytest_report_teststatus",
                 "pytest_runtest_protocol", "pytest_runtest_call", "pytest_pyfunc_call")
# Module globals pytest itself swaps during a run.
_VOLATILE = frozenset({"_reprcompare", "_assertion_pass", "_config"})

_candidate: frozenset[str] = frozenset(os.path.realpath(p) for p in json.loads(os.environ.pop(CANDIDATE_ENV, "[]")))
# The image's own pytest plugins (loaded with -p by the scorer): a project that is itself a pytest
# plugin keeps its hooks even where the candidate edits their module.
_trusted: frozenset[str] = frozenset(json.loads(os.environ.pop(TRUSTED_ENV, "[]")))
# The test files the selected tests live in, as the scorer wrote them: absolute path -> sha256.
_tests: dict[str, str] = {os.path.realpath(k): v for k, v in json.loads(os.environ.pop(TESTS_ENV, "{}")).items()}
_early: list[str] = []  # what the audit hook saw, before any config exists to hold it


def _from_candidate() -> str | None:
    """The candidate's file on the current call stack, if any."""
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if path in _candidate or os.path.realpath(path) in _candidate:
            return path
        frame = frame.f_back
    return None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # Hooks into the interpreter the tests run in, added by the candidate's code: another audit
    # hook (which could rewrite what is compiled), or a function's code swapped under its identity.
    if event == "sys.addaudithook" or (event == "object.__setattr__" and len(args) > 1 and args[1] == "__code__"):
        where = _from_candidate()
        if where is not None:
            what = "an audit hook added" if event == "sys.addaudithook" else f"the code of {getattr(args[0], '__qualname__', '?')} swapped"
            _early.append(f"{what} from {where}")


sys.addaudithook(_audit)
_HOOKS_AT_START = {id(entry) for entry in [*sys.meta_path, *sys.path_hooks]}
# taskforge's report plugin is loaded first (``-p`` order); its writer to the outcome stream.
_EMIT = getattr(sys.modules.get("taskforge_pytest_plugin"), "_emit", None)


def _members(module_name: str) -> Iterator[tuple[str, Any]]:
    module = sys.modules.get(module_name)
    if module is None:
        return
    for name, value in list(vars(module).items()):
        if name in _VOLATILE or not (callable(value) or isinstance(value, type)):
            continue
        yield f"{module_name}.{name}", value
        if isinstance(value, type) and value.__module__ == module_name:
            for attr, member in list(vars(value).items()):
                if callable(member) or isinstance(member, (property, classmethod, staticmethod)):
                    yield f"{module_name}.{name}.{attr}", member


def _snapshot() -> dict[str, int]:
    for name in _WATCHED:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    return {key: id(value) for name in _WATCHED for key, value in _members(name)}


_baseline = _snapshot()
_objects: dict[str, Any] = {key: value for name in _WATCHED for key, value in _members(name)}  # keeps ids valid


_REAL: dict[str, str] = {}


def _real(path: str) -> str:
    """``os.path.realpath`` of ``path``, once per path of the image: the checks after every test
    ask again for the same few hundred files of pytest and its plugins, and resolving each costs a
    dozen ``lstat`` calls. A path the sandbox can change (relative, or under a writable folder,
    where a link can be swapped) is resolved each time: a cached answer could be a stale one."""
    real = _REAL.get(path)
    if real is None:
        real = os.path.realpath(path)
        if os.path.isabs(path) and not path.startswith(_WRITABLE) and not real.startswith(_WRITABLE):
            _REAL[path] = real
    return real


def _written_in(obj: Any) -> str | None:
    """The file an object's code was written in, as its code names it; None when there is none."""
    for candidate in (obj, getattr(obj, "__func__", None), getattr(obj, "fget", None), getattr(obj, "__wrapped__", None)):
        code = getattr(candidate, "__code__", None)
        if code is not None:
            return str(code.co_filename)
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    file = getattr(module, "__file__", None)
    if isinstance(obj, type) and isinstance(file, str):
        return file
    if type(obj).__name__ in ("builtin_function_or_method", "method_descriptor", "wrapper_descriptor"):
        return "<builtin>"
    return None


def _suspect(obj: Any) -> str | None:
    """Why ``obj`` (a replacement or a hook implementation) is the candidate's, or None. The file
    counts as named and as resolved: a candidate's folder swapped for a link elsewhere after its
    module was imported still names the candidate's file."""
    file = _written_in(obj)
    return "untraceable" if file is None else _candidate_file(file)


def _candidate_file(file: str) -> str | None:
    """``file`` as the candidate wrote it (resolved, or as named) if it is one of theirs."""
    if file == "<builtin>":
        return None
    for path in (_real(file), os.path.normpath(file)):
        if path in _candidate:
            return path
    return None


class _Guard:
    def __init__(self) -> None:
        self.findings: list[str] = []

    def note(self, finding: str) -> None:
        if finding not in self.findings:
            self.findings.append(finding)

    def check(self, config: pytest.Config, *, full: bool = True) -> None:
        for finding in _early:
            self.note(finding)
        for entry in [*sys.meta_path, *sys.path_hooks]:
            if id(entry) in _HOOKS_AT_START:
                continue
            file = _written_in(entry) or _written_in(type(entry))
            if file is not None and (origin := _candidate_file(file)) is not None:
                self.note(f"import hook {type(entry).__name__} installed from {origin}")
        modules = _WATCHED if full else _EVERY_TEST
        current = {key: value for name in modules for key, value in _members(name)}
        for key, value in current.items():
            if _baseline.get(key, id(value)) != id(value) and (why := _suspect(value)) is not None:
                self.note(f"replaced {key} ({why})")
        for key in current.keys() - _baseline.keys():  # a new override (``TestReport.__setattr__``)
            if (why := _suspect(current[key])) not in (None, "untraceable"):
                self.note(f"added {key} ({why})")
        for what, instance in _watched_instances(config):
            for name, value in list(vars(instance).items()):
                if callable(value) and (why := _suspect(value)) not in (None, "untraceable"):
                    self.note(f"replaced {name} on the {what} ({why})")
        if full:
            for key in _baseline.keys() - current.keys():
                self.note(f"deleted {key}")
        hooks = vars(config.pluginmanager.hook)
        for name in list(hooks) if full else _REPORT_HOOKS:
            caller = hooks.get(name)
            if caller is None or name.startswith("_") or not hasattr(caller, "get_hookimpls"):
                continue
            for impl in caller.get_hookimpls():
                if config.pluginmanager.get_name(impl.plugin) in _trusted:
                    continue
                if (why := _suspect(impl.function)) is not None and why != "untraceable":
                    self.note(f"hook {name} implemented in {why}")


def _watched_instances(config: pytest.Config) -> Iterator[tuple[str, Any]]:
    """The objects whose own attributes decide the report: the plugin manager (its
    ``_inner_hookexec`` calls every hook), the JUnit writer and the terminal reporter."""
    from _pytest.junitxml import (
        xml_key,  # the writer's stash key; private, but stable since pytest 7.0
    )

    yield "plugin manager", config.pluginmanager
    writer = config.stash.get(xml_key, None)
    if writer is not None:
        yield "JUnit writer", writer
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None:
        yield "terminal reporter", terminal


def _code_objects(code: Any, into: dict[tuple[str, int], Any]) -> dict[tuple[str, int], Any]:
    into[(getattr(code, "co_qualname", code.co_name), code.co_firstlineno)] = code
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            _code_objects(const, into)
    return into


def _same_code(a: Any, b: Any) -> bool:
    if a.co_code != b.co_code or a.co_names != b.co_names or a.co_varnames != b.co_varnames:
        return False
    if len(a.co_consts) != len(b.co_consts):
        return False
    return all(_same_const(x, y) for x, y in zip(a.co_consts, b.co_consts))


def _same_const(x: Any, y: Any) -> bool:
    """Constants compared by type and repr (so 0.0 is not -0.0, nor 1 True), code recursively, and a
    frozenset (a set display's constant) by its elements: its iteration order, and so its repr,
    depends on the hash seed and insertion order of the process that built it, and a module loaded
    from a .pyc written by another interpreter holds the other's order."""
    if hasattr(x, "co_code") and hasattr(y, "co_code"):
        return _same_code(x, y)
    if type(x) is not type(y):
        return False
    if isinstance(x, frozenset):
        return sorted((type(e).__name__, repr(e)) for e in x) == sorted((type(e).__name__, repr(e)) for e in y)
    if isinstance(x, tuple):
        return len(x) == len(y) and all(_same_const(p, q) for p, q in zip(x, y))
    return repr(x) == repr(y)


def _trusted_code(path: str, data: bytes, rewritten: bool, config: pytest.Config) -> dict[tuple[str, int], Any]:
    """The code objects of a trusted test file, compiled as pytest compiled the module: with its
    assertions rewritten when pytest rewrote them."""
    if rewritten:
        from _pytest.assertion.rewrite import rewrite_asserts

        tree = ast.parse(data, filename=path)
        rewrite_asserts(tree, data, path, config)
        code = compile(tree, path, "exec", dont_inherit=True)
    else:
        code = compile(data, path, "exec", dont_inherit=True)
    return _code_objects(code, {})


_WRITABLE = ("/workspace/", "/tmp/", "/dev/", "/proc/", "/var/tmp/", "/run/")


def _read_only(path: str) -> bool:
    """A file of the image itself (a library's test machinery: hypothesis's stateful ``runTest``),
    which nothing in the sandbox can write: a test may run code from it, held to it as to a test file."""
    return os.path.isabs(path) and not path.startswith(_WRITABLE) and os.path.isfile(path)


def _wrapped(function: Any) -> Any:
    """What a decorator's wrapper runs: ``__wrapped__`` (functools.wraps, mock.patch), or the inner
    test of a hypothesis ``@given`` (whose wrapper borrows the test's file and line)."""
    inner = getattr(function, "__wrapped__", None)
    if inner is None:
        inner = getattr(getattr(function, "hypothesis", None), "inner_test", None)
    return inner


_collected: dict[str, tuple[Any, Any]] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """The hidden tests run as written: each collected test of a trusted file runs code compiled
    from a trusted file (its own, or a test module beside it that defines a mixin it inherits) as
    the scorer wrote it, not code a loader, an audit hook or a swap put there."""
    if not _tests:
        return
    guard = session.config.stash[_guard_key]
    compiled: dict[tuple[str, bool], dict[tuple[str, int], Any] | None] = {}
    changed: set[str] = set()

    def trusted_code(path: str, rewritten: bool) -> dict[tuple[str, int], Any] | None:
        if (path, rewritten) in compiled:
            return compiled[(path, rewritten)]
        compiled[(path, rewritten)] = None
        if path in changed or (path not in _tests and not _read_only(path)):
            return None
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            data = b""
        if path in _tests and hashlib.sha256(data).hexdigest() != _tests[path]:
            guard.note(f"test file {path} changed at run time")
            changed.add(path)
            return None
        if not path.endswith(".py"):
            # A text file of doctests (``--doctest-glob``: docs/*.rst) runs no code of its own to
            # hold; its digest is what holds it.
            compiled[(path, rewritten)] = {}
            return compiled[(path, rewritten)]
        try:
            compiled[(path, rewritten)] = _trusted_code(path, data, rewritten, session.config)
        except Exception as err:  # noqa: BLE001 - a file the guard cannot compile proves nothing either way
            guard.note(f"test file {path} does not compile as pytest compiles it: {type(err).__name__}")
        return compiled[(path, rewritten)]

    def matches(function: Any) -> bool:
        code = getattr(function, "__code__", None)
        if code is None:
            return False
        path = os.path.realpath(code.co_filename)
        if path in _candidate:
            return False
        rewritten = "@py_builtins" in (getattr(function, "__globals__", None) or {})
        trusted = trusted_code(path, rewritten)
        match = trusted.get((getattr(code, "co_qualname", code.co_name), code.co_firstlineno)) if trusted else None
        return match is not None and _same_code(code, match)

    for item in session.items:
        path = os.path.realpath(str(getattr(item, "path", "")))
        if path not in _tests:
            continue
        module = getattr(item, "module", None)
        if trusted_code(path, module is not None and "@py_builtins" in vars(module)) is None and path in changed:
            continue
        function = getattr(item, "obj", None)
        function = getattr(function, "__func__", function)
        code = getattr(function, "__code__", None)
        if code is None:
            continue
        # A test under a library's decorator (mock.patch, hypothesis.given) runs the library's
        # wrapper, which runs the test: the test's own code is the one held to its file. A
        # wrapper from the candidate's files is not a library's.
        inner, seen = function, 0
        while not matches(inner) and _wrapped(inner) is not None and seen < 16:
            wrapper_file = getattr(getattr(inner, "__code__", None), "co_filename", "")
            if wrapper_file in _candidate or os.path.realpath(wrapper_file) in _candidate:
                break
            inner, seen = _wrapped(inner), seen + 1
            inner = getattr(inner, "__func__", inner)
        if not matches(inner):
            where = getattr(getattr(inner, "__code__", None), "co_filename", "?")
            guard.note(f"{item.nodeid} does not run the code of its file (it runs code from {where})")
            continue
        _collected[item.nodeid] = (function, code)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    kept = _collected.get(item.nodeid)
    guard = item.config.stash[_guard_key]
    if kept is not None and getattr(kept[0], "__code__", None) is not kept[1]:
        guard.note(f"the code of {item.nodeid} was swapped after collection")
    if kept is not None:
        current = getattr(item, "obj", None)
        if getattr(current, "__func__", current) is not kept[0]:
            guard.note(f"{item.nodeid} runs another function than the one collected")
    if "runtest" in vars(item):
        guard.note(f"{item.nodeid} has its own runtest on the instance")


_guard_key = pytest.StashKey[_Guard]()
_CONFIG: list[pytest.Config] = []  # logfinish gets no config; the session's, once it starts


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.stash[_guard_key] = _Guard()


@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    config = _CONFIG[0] if _CONFIG else None
    if config is not None:
        config.stash[_guard_key].check(config, full=False)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _CONFIG[:] = [session.config]
    session.config.stash[_guard_key].check(session.config)


@pytest.hookimpl(tryfirst=True)  # before junitxml's own sessionfinish writes the report
def pytest_sessionfinish(session: pytest.Session) -> None:
    from _pytest.junitxml import (
        xml_key,  # the writer's stash key; private, but stable since pytest 7.0
    )

    guard = session.config.stash[_guard_key]
    guard.check(session.config)
    if _EMIT is not None:  # the scoring supervisor's stream, through taskforge's report plugin
        _EMIT({"guard": [finding[:300] for finding in guard.findings]})
    writer = session.config.stash.get(xml_key, None)
    if writer is not None:
        writer.add_global_property(GUARD_PROPERTY, "1")
        for finding in guard.findings:
            writer.add_global_property(TAMPERED_PROPERTY, finding[:300])

"""taskforge's scoring guard: a pytest plugin that catches a candidate tampering with the run from
inside the test process. PYTEST_DONT_REWRITE: it asserts nothing, and rewriting it costs more than
compiling it.

Standalone (stdlib and pytest only): the scorer copies it into the sandbox as
``taskforge_pytest_guard.py`` and loads it with ``-p taskforge_pytest_guard``, with plugin
autoloading disabled. It is imported before any ``conftest.py`` or package code, and then:

- holds every module of pytest, pluggy, unittest, doctest and the XML writer by reference, and trusts
  the code the image loaded before any project code ran (by identity, in its module's namespace);
- after each test's teardown and at the end of the session, compares those modules' members
  (and ``sys.modules``) with what they were, and judges every hook caller and implementation,
  import hook, callback nobody scheduled (threads, gc callbacks, signal handlers), and the
  callables of the plugin manager, the JUnit writer and the terminal reporter.

Code is trusted for what it is, not for the file its code object names: loaded before project
code, or equal to a fresh compile of an image file or of one laid before the run, and never from
a file the candidate wrote (``$TASKFORGE_GUARD_CANDIDATE``, a JSON list of absolute paths). Hook
implementations registered before the first conftest (pytest's own and the image's plugins') are
trusted as registered, and may not change afterwards.

It also holds the hidden tests to their files (``$TASKFORGE_GUARD_TESTS``: each test file's
path and sha256 as the scorer wrote it): after collection, every collected test of those files
must run code compiled from the file, unchanged on disk (assertions rewritten as pytest rewrites
them), and still the same code, of the same class, when it is set up. An audit hook it installs
first notes audit, trace and profile hooks added, and code objects or classes swapped, from the
candidate's code.

Each finding becomes a ``taskforge.tampered`` property of the JUnit ``<testsuite>`` and goes
through the scoring supervisor's stream; ``taskforge.guard`` marks a report the guard saw
through, so a report without it was not written by a guarded run. Checks run between tests
only, so a test's own monkeypatching (undone at its teardown) is never mistaken for tampering.
"""

from __future__ import annotations

import _io
import _thread
import ast
import collections
import functools
import gc
import hashlib
import importlib
import importlib.machinery
import itertools
import json
import operator
import os
import re
import signal
import sys
import threading
import time
import types
import zipimport
from collections.abc import Iterator
from typing import Any

import pytest


def _isinstance(obj: Any, kinds: Any) -> bool:
    """``isinstance`` that runs no code of ``obj``'s: by its type alone, where ``isinstance`` falls
    back to the object's ``__class__``, a property of the candidate's class (a ninth red team's
    argument ran its toggle inside every check so)."""
    return issubclass(type(obj), kinds)


_NOTHING = object()
_MRO = type.__dict__["__mro__"].__get__
"""A class's MRO read from the type itself, never through a metaclass's ``__mro__``."""
_CLASS_DICT = type.__dict__["__dict__"].__get__
"""A class's own namespace, never through a metaclass's ``__dict__``."""
_CLASS_MODULE = type.__dict__["__module__"].__get__


def _lookup(mapping: Any, name: str) -> Any:
    """``mapping[name]`` among its keys that are exactly strings, else :data:`_NOTHING`, without
    hashing or comparing any other key: a dict lookup compares the probe with a stored key of the
    same hash by that key's ``__eq__``, and a ``str`` subclass of the candidate's with the hash of
    ``"__slots__"`` in a class's namespace ran the candidate's code inside every check (a tenth
    red team's). Linear, for the small namespaces the checks read."""
    kind = type(mapping)
    if issubclass(kind, dict):
        items = list(dict.items(mapping))
    elif kind is types.MappingProxyType:
        items = list(mapping.items())  # a class's namespace: a plain dict underneath
    else:
        return _NOTHING
    for key, value in items:
        if type(key) is str and key == name:
            return value
    return _NOTHING


def _class_lookup(kind: type, name: str) -> Any:
    """``name`` in the namespaces of ``kind``'s MRO, as stored (:func:`_lookup`), else :data:`_NOTHING`.
    Kept for the rest of the check (:data:`_LOOKED_UP`): no code of the candidate's runs inside
    a check, so no namespace changes during one."""
    key = (id(kind), name)
    hit = _LOOKED_UP.get(key) if _IN_CHECK else None
    if hit is not None and hit[0] is kind:
        return hit[1]
    found = _NOTHING
    for klass in _MRO(kind):
        found = _lookup(_CLASS_DICT(klass), name)
        if found is not _NOTHING:
            break
    if _IN_CHECK:
        _LOOKED_UP[key] = (kind, found)
    return found


_LOOKED_UP: dict[tuple[int, str], tuple[type, Any]] = {}
""":func:`_class_lookup`'s answers in this check, each with its class held (ids stay theirs)."""
_IN_CHECK: list[bool] = []  # non-empty while a check runs


def _rewritten(namespace: Any) -> bool:
    """Whether a module's namespace is one pytest's assertion rewriting ran in (it holds
    ``@py_builtins``), read by :func:`_lookup`: ``in`` would compare with a key of the candidate's."""
    return _lookup(namespace, "@py_builtins") is not _NOTHING


def _module_of(klass: type) -> str:
    """A class's ``__module__`` when it is a string, else ""; read without a metaclass's code."""
    name = _CLASS_MODULE(klass)
    return name if type(name) is str else ""

GUARD_PROPERTY = "taskforge.guard"
TAMPERED_PROPERTY = "taskforge.tampered"
CANDIDATE_ENV = "TASKFORGE_GUARD_CANDIDATE"
TRUSTED_ENV = "TASKFORGE_GUARD_TRUSTED"
TESTS_ENV = "TASKFORGE_GUARD_TESTS"
START_ENV = "TASKFORGE_GUARD_START"

_WATCHED = (
    "_pytest.runner", "_pytest.reports", "_pytest.skipping", "_pytest.outcomes", "_pytest.junitxml",
    "_pytest.terminal", "_pytest.python", "_pytest.unittest", "_pytest.main", "_pytest.nodes",
    "_pytest.fixtures", "_pytest.config", "_pytest.warnings", "_pytest.capture", "_pytest.logging",
    "pluggy._hooks", "pluggy._callers", "pluggy._manager", "pluggy._result",
    "unittest.case", "unittest.result", "builtins", "_pytest.assertion.rewrite", "_pytest.assertion.util",
    "_pytest.assertion", "doctest",
)
_WATCHED_PREFIXES = ("_pytest", "pytest", "pluggy", "unittest", "xml.etree", "doctest")
# The standard library the report and the outcome stream are written with (the JUnit writer's
# ``re.sub``, the stream's ``os.write`` and JSON encoder), watched as pytest's own modules are.
_WATCHED_STDLIB = frozenset({"builtins", "os", "posix", "re", "re._compiler", "re._parser", "json", "json.encoder",
                             "functools", "io", "enum", "_collections_abc", "collections", "collections.abc", "codecs"})
# Module globals pytest itself swaps during a run.
_VOLATILE = frozenset({"_reprcompare", "_assertion_pass", "_config"})

_candidate: frozenset[str] = frozenset(os.path.realpath(p) for p in json.loads(os.environ.pop(CANDIDATE_ENV, "[]")))
# The image's own pytest plugins by name, as the scorer passes them: taken out of the candidate's
# sight. The guard trusts their hooks as registered before the first conftest, not by name.
os.environ.pop(TRUSTED_ENV, None)
# The test files the selected tests live in, as the scorer wrote them: absolute path -> sha256.
_tests: dict[str, str] = {os.path.realpath(k): v for k, v in json.loads(os.environ.pop(TESTS_ENV, "{}")).items()}
_early: list[str] = []  # what the audit hook saw, before any config exists to hold it


def _start_sources(repository: str) -> dict[str, bytes]:
    """The start state's copy of each Python file of the candidate's that the start state has:
    its blob at ``repository``'s HEAD (the scorer's start-state commit, ``$TASKFORGE_GUARD_START``).
    Read here, as the guard loads, before any code of the project or the candidate runs: the sandbox
    user can rewrite ``.git`` later. Code of such a file that equals the start state's copy is the
    project's own, not the candidate's (a module of the project that installs an import hook as it
    is imported, in the file the candidate completes)."""
    root = os.path.realpath(repository) + os.sep if repository else ""
    wanted = sorted(p for p in _candidate if root and p.startswith(root) and p.endswith(".py") and "\n" not in p)
    if not wanted:
        return {}
    import subprocess

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_NO_REPLACE_OBJECTS": "1", "HOME": os.devnull}
    try:
        proc = subprocess.run(["git", "-C", root, "cat-file", "--batch"], env=env, capture_output=True, timeout=60,
                              input="".join(f"HEAD:{p[len(root):]}\n" for p in wanted).encode(), check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    found: dict[str, bytes] = {}
    data, at = proc.stdout, 0
    for path in wanted:  # "<sha> blob <size>\n<content>\n", or "<name> missing\n"
        end = data.find(b"\n", at)
        if end < 0:
            break
        header = data[at:end].split()
        at = end + 1
        if len(header) == 3 and header[2].isdigit():  # a tree or a link's target is skipped as a blob is
            size = int(header[2])
            if header[1] == b"blob":
                found[path] = data[at:at + size]
            at += size + 1
    return found


_START: dict[str, bytes] = _start_sources(os.environ.pop(START_ENV, ""))


def _from_candidate(*, any_untrusted: bool = False) -> str | None:
    """The candidate's file on the current call stack, if any. With ``any_untrusted``, also code
    there that is neither the image's nor compiled from a file laid before the run (a function
    the candidate's module made with ``exec`` and left for a thread or a callback to call later).
    Not for every event: libraries make code under their callers' file names (hypothesis's
    ``@given`` wrapper borrows the test's) and swap code objects (``types.coroutine``)."""
    frame = sys._getframe(1)
    inner_trusted = True  # every frame between the event and this one is trusted code
    while frame is not None:
        code = frame.f_code
        path = code.co_filename
        if path in _candidate or os.path.realpath(path) in _candidate:
            return path
        # A library's wrapper may borrow a test file's name (hypothesis's ``@given``): the test
        # files are held to their digests, so code naming them is not what this looks for.
        if (any_untrusted and path != __file__ and _LOADED and path not in _tests
                and (why := _code_why(code, _rewritten(frame.f_globals))) is not None):
            return why
        trusted = not _LOADED or path == __file__ or _code_why(code, _rewritten(frame.f_globals)) is None
        if not any_untrusted and inner_trusted and trusted and code.co_name == "<module>" and _importing(frame):
            # A trusted module's body, being imported (by the candidate's code, say), and only
            # trusted code since: what it does is its own (asyncio's ``@types.coroutine`` swaps
            # its ``__sleep0``'s code).
            return None
        inner_trusted = inner_trusted and trusted
        frame = frame.f_back
    return None


def _importing(frame: types.FrameType) -> bool:
    """Whether ``frame`` runs a module's body as the import system does: in the namespace of the
    module ``sys.modules`` holds under its name, with the real builtins, called from importlib (not
    the source of a trusted file run with ``exec`` in a namespace of the candidate's)."""
    module = sys.modules.get(str(frame.f_globals.get("__name__")))
    caller = frame.f_back
    return (module is not None and vars(module) is frame.f_globals and frame.f_builtins is _BUILTINS
            and caller is not None and caller.f_code.co_filename == "<frozen importlib._bootstrap>")


# taskforge's report plugin is loaded first (``-p`` order): its writer to the outcome stream.
_EMIT = getattr(sys.modules.get("taskforge_pytest_plugin"), "_emit", None)


def _noted(finding: str) -> None:
    """One finding into the outcome stream now (``{"noted": ...}``), where nothing in this
    process can take it back."""
    if _EMIT is not None:
        _EMIT({"noted": finding[:300]})


_TRACE_EVENTS = ("sys.addaudithook", "sys.settrace", "sys.setprofile")
_FIRST_FRAMES: dict[int, list[Any]] = {}
"""The first frame of each thread the run started without ``threading``, as last seen, and how
many times it was seen to change."""


def _audit(event: str, args: tuple[Any, ...]) -> None:
    # Hooks into the interpreter the tests run in, added by the candidate's code: another audit
    # hook (which could rewrite what is compiled), a trace or profile function (which sees, and
    # can rewrite, every frame's locals: a report as it is returned), a function's code swapped
    # under its identity, an object's class swapped (a test item's, for one that ignores failures).
    if event in _TRACE_EVENTS:
        where = _from_candidate(any_untrusted=True)
        if where is not None:
            what = {"sys.addaudithook": "an audit hook added", "sys.settrace": "a trace function set",
                    "sys.setprofile": "a profile function set"}[event]
            _early.append(f"{what} from {where}")
            _noted(_early[-1])
    elif event == "object.__setattr__" and len(args) > 1 and args[1] in ("__code__", "__class__"):
        if args[1] == "__class__" and not _verdicts_object(args[0]):
            return  # a project's own idiom: zipp's ``CompleteDirs.make`` makes a ZipFile one of its own
        # The image's own code swapped (a writer's ``append_failure``) from any code that is not the
        # image's or laid (a string run by ``exec`` in a thread); others' only from the candidate's
        # files: libraries swap code of their callers' functions (``types.coroutine``).
        where = _from_candidate(any_untrusted=args[1] == "__code__" and _image_function(args[0]))
        if where is not None:
            swapped = "code" if args[1] == "__code__" else "class"
            owner = getattr(args[0], "__qualname__", None) or type(args[0]).__qualname__
            _early.append(f"the {swapped} of {owner} swapped from {where}")
            _noted(_early[-1])


def _image_function(obj: Any) -> bool:
    """A function whose code is the image's, loaded before any project code."""
    code = getattr(obj, "__code__", None) if _isinstance(obj, types.FunctionType) else None
    loaded = _LOADED.get(id(code)) if code is not None else None
    return loaded is not None and loaded[0] is code


_HARNESS_ROOTS = frozenset({"_pytest", "pytest", "pluggy", "unittest", "xml", "py"})
_VERDICT_CLASSES: dict[int, type] = {}  # held by reference, so an id stays theirs
_EARLY_MODULES: dict[int, types.ModuleType] = {}


def _hold_early(plugins: Iterator[str] = iter(())) -> None:
    """Hold, by identity, every module loaded so far and every class of pytest, pluggy, unittest,
    the XML writer, taskforge's plugins and the image's (``plugins``: their module names): what
    the verdict rests on, before any project code could rename a class or a module."""
    names = set(plugins)
    for name, module in list(sys.modules.items()):
        if not _isinstance(module, types.ModuleType):
            continue
        _EARLY_MODULES[id(module)] = module
        if name.split(".", 1)[0] in _HARNESS_ROOTS or name.startswith("taskforge_") or name in names:
            for value in list(vars(module).values()):
                # Defined there (``_Plugin = object`` is pluggy's name for object): read before
                # any project code, so ``__module__`` is still the truth.
                if _isinstance(value, type) and value.__module__ == name:
                    _VERDICT_CLASSES[id(value)] = value


def _verdicts_object(obj: Any) -> bool:
    """Whether swapping ``obj``'s class could change what the run reports: an object of a class
    of pytest's, pluggy's, unittest's, the XML writer's or a plugin's (an item, a report, a hook
    caller, the session, a test case), or a module loaded before any project code (its class
    sees every lookup on it), each known by identity (a class's ``__module__``, a module's
    ``__file__`` are the candidate's to rewrite). Any other object's class is the project's
    business: a subclass it makes its own objects (zipp's ``res.__class__ = cls``) is no
    tampering, and an object that lies about itself is what the canaries catch."""
    if _isinstance(obj, types.ModuleType):
        return id(obj) in _EARLY_MODULES
    return any(id(kind) in _VERDICT_CLASSES for kind in _MRO(type(obj)))


_hold_early()
sys.addaudithook(_audit)
_HOOKS_AT_START = {id(entry): entry for entry in [*sys.meta_path, *sys.path_hooks]}  # kept: ids stay theirs


def _replacement_why(key: str, value: Any) -> str | None:
    """Why a member of a watched module or class put there since the start runs code that is not
    trusted, or is in no place pytest puts it: a descriptor by its class and what it holds
    (``types.DynamicClassAttribute(fget)`` as ``TestReport.failed``)."""
    return _untrusted(value) or (_untrusted_member(value, 0) if _runs_code(value) else None) or _misplaced(key, value)


def _runs_code(value: Any) -> bool:
    """Whether a class's member or an object's attribute runs code when it is looked up or called:
    a function, a method, a descriptor, a partial, or an object whose class has Python code of its
    own for it (a callable object, a descriptor: ``find_spec = _Finder()`` on a class). A C
    callable that runs nothing of its own (``operator.attrgetter``) is data here."""
    if _isinstance(value, type):
        return False
    if _isinstance(value, (types.FunctionType, types.MethodType, functools.partial, functools.partialmethod,
                          classmethod, staticmethod, property)):
        return True
    if callable(value) and _isinstance(_peek(value, "__wrapped__"), types.FunctionType):
        return True  # functools.lru_cache
    kind = type(value)
    return any(_isinstance(_class_lookup(kind, name), types.FunctionType)
               for name in ("__call__", "__get__", "__set__", "__delete__"))


def _members(module_name: str) -> Iterator[tuple[str, Any]]:
    module = _MODULES.get(module_name)
    if module is None:
        return
    for name, value in list(vars(module).items()):
        if type(name) is not str or name in _VOLATILE or not (callable(value) or _isinstance(value, (type, types.ModuleType))):
            continue
        yield f"{module_name}.{name}", value
        if _isinstance(value, type) and _module_of(value) == module_name:
            for attr, member in list(_CLASS_DICT(value).items()):
                if callable(member) or _isinstance(member, (property, classmethod, staticmethod)) or _runs_code(member):
                    yield f"{module_name}.{name}.{attr}", member


for _name in _WATCHED:
    try:
        importlib.import_module(_name)
    except ImportError:
        pass
# Every module of pytest, pluggy, unittest and the XML writer loaded now, held by reference: a
# lookalike put in ``sys.modules`` hides nothing, and a class pytest relies on in a module no list
# names (``_pytest._code.code.ExceptionInfo``) is watched as well.
_MODULES: dict[str, types.ModuleType] = {
    name: module for name, module in list(sys.modules.items())
    if _isinstance(module, types.ModuleType) and (name in _WATCHED_STDLIB or name.startswith(_WATCHED_PREFIXES))}
_AT_START = {name: list(_members(name)) for name in _MODULES}
_objects: dict[str, Any] = {key: value for found in _AT_START.values() for key, value in found}  # keeps ids valid
_MODULE_NAMES = list(_MODULES)
_BASELINE_KEYS = {name: [key for key, _ in found] for name, found in _AT_START.items()}


def _unwrapped(value: Any) -> list[Any]:
    if _isinstance(value, (classmethod, staticmethod, types.MethodType)):
        return [value.__func__]
    if _isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if f is not None]
    return [value]


# The functions of pytest's classes as loaded, by identity: one of them put in another member's
# place (``append_failure = append_pass``) is the image's code, in the wrong place.
_CLASS_CODE: dict[int, tuple[Any, str]] = {}  # filled when first needed: a replacement is rare


def _class_code() -> dict[int, tuple[Any, str]]:
    if not _CLASS_CODE:
        for name, keys in _BASELINE_KEYS.items():
            if name == "builtins":
                continue
            for key in keys:
                if "." in key[len(name) + 1:]:
                    for f in _unwrapped(_objects[key]):
                        if _isinstance(f, types.FunctionType):
                            _CLASS_CODE[id(f)] = (f, key)
    return _CLASS_CODE


del _AT_START


def _image_module(module: types.ModuleType) -> bool:
    """A module of a file of the image, all of whose functions are trusted, though ``sys.modules``
    no longer holds it: pytester's in-process runs put ``sys.modules`` back as it was, and a
    package keeps the submodule a run imported (``_pytest.stepwise``: a held-out type checker's
    suite scored every gold patch ``tampered``)."""
    file = getattr(module, "__file__", None)
    spec = getattr(module, "__spec__", None)
    if (type(module) is not types.ModuleType or not _isinstance(file, str) or _real(file) in _candidate
            or getattr(spec, "origin", None) != file or _isinstance(_compiled(_real(file), False), str)):
        return False
    values = list(vars(module).values())
    key = (module, tuple(map(id, values)))
    if _IMAGE_MODULES.get(id(module)) == key:
        return True
    namespace = vars(module)
    for value in values:
        own = [f for f in (vars(value).values() if _isinstance(value, type) and value.__module__ == module.__name__
                           else [value]) if _isinstance(f, types.FunctionType) and f.__globals__ is namespace
               and not _made_by_dataclasses(value, f)]
        # Its own functions held to their file in its namespace (which sys.modules may no longer
        # name); every other callable judged as anywhere.
        if own and any(_code_why(f.__code__, _rewritten(namespace)) is not None for f in own):
            return False
        if not own and callable(value) and not _imported_as_is(value):
            return False
    _IMAGE_MODULES[id(module)] = key
    return True


_IMAGE_MODULES: dict[int, tuple[Any, tuple[int, ...]]] = {}


def _imported_as_is(value: Any) -> bool:
    """A callable a module imported from another (``from typing import Sequence``): the very
    object its home module, not the candidate's, holds under its name; else judged as anywhere."""
    home = sys.modules.get(str(getattr(value, "__module__", None) or type(value).__module__))
    file = getattr(home, "__file__", None)
    if _isinstance(file, str) and _real(file) in _candidate:
        return False
    name = getattr(value, "__name__", None)
    if home is not None and _isinstance(name, str) and getattr(home, name, None) is value:
        return True
    # Its home gone from sys.modules too (the same run imported both): its code held to the file
    # of the namespace it runs in.
    functions = [value] if _isinstance(value, types.FunctionType) else [
        f for f in vars(value).values() if _isinstance(f, types.FunctionType) and not _made_by_dataclasses(value, f)
    ] if _isinstance(value, type) else []
    if functions and all(_held(f) for f in functions):
        return True
    return _untrusted(value) is None


_DATACLASS_METHODS = frozenset({"__init__", "__repr__", "__eq__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__",
                                "__setattr__", "__delattr__", "__getstate__", "__setstate__"})


def _generated(owner: type, member: Any) -> bool:
    """A method ``dataclasses`` or ``collections.namedtuple`` compiled from a string for a class of
    the project's or the image's, which no file holds: a dataclass's ``__init__`` run in the
    namespace of a module laid before the run, or a namedtuple's ``__new__``, which is the very
    code namedtuple makes for the class's fields (with no builtins, it calls ``tuple.__new__``
    only). An honest project's thread bound to a dataclass, or a partial holding a namedtuple,
    had been judged by such code (an eleventh red team's)."""
    if type(member) is staticmethod:  # a class's ``__new__`` becomes one
        member = member.__func__
    if type(member) is not types.FunctionType or member.__code__.co_filename != "<string>":
        return False
    namespace = member.__globals__
    if member.__name__ == "__new__":
        fields = _lookup(_CLASS_DICT(owner), "_fields")
        if type(fields) is not tuple or not all(type(f) is str and f.isidentifier() for f in fields):
            return False
        listed = ", ".join(fields)
        made = compile(f"lambda _cls, {listed}: _tuple_new(_cls, ({listed}))", "<string>", "eval").co_consts[0]
        return (_same_code(member.__code__, made) and type(namespace) is dict and len(namespace) == 3
                and _lookup(namespace, "_tuple_new") is tuple.__new__
                and type(builtins := _lookup(namespace, "__builtins__")) is dict and not dict.__len__(builtins))
    if not _made_by_dataclasses(owner, member):
        return False
    name = _lookup(namespace, "__name__")
    module = sys.modules.get(name) if type(name) is str else None
    file = _lookup(namespace, "__file__")
    return (module is not None and type(file) is str and vars(module) is namespace and _real(file) not in _candidate
            and not _isinstance(_compiled(_real(file), False), str))


def _made_by_dataclasses(owner: Any, function: types.FunctionType) -> bool:
    """A method ``dataclasses`` compiled from a string for a dataclass of a module of the image
    (``StepwiseCacheInfo.__init__``), which no file holds."""
    name = function.__name__
    return (_isinstance(owner, type) and _lookup(_CLASS_DICT(owner), "__dataclass_fields__") is not _NOTHING
            and type(name) is str and name in _DATACLASS_METHODS and function.__code__.co_filename == "<string>")


def _held(function: types.FunctionType) -> bool:
    """A function compiled from the image file its namespace is the module of."""
    namespace = function.__globals__
    file, spec = namespace.get("__file__"), namespace.get("__spec__")
    return (_isinstance(file, str) and _real(file) not in _candidate and getattr(spec, "origin", None) == file
            and _real(function.__code__.co_filename) == _real(file) and not _isinstance(_compiled(_real(file), False), str)
            and _code_why(function.__code__, _rewritten(namespace)) is None)


def _misplaced(key: str, value: Any) -> str | None:
    """Why a replacement of pytest's own that runs trusted code is still no replacement pytest
    makes: the code of another of its members, or a builtin standing in for a method (a property
    that is ``bool``). pytest's own additions (``legacypath``'s properties) are functions of its
    modules."""
    if key.startswith("builtins."):
        return None
    was = _objects.get(key)
    if _isinstance(was, types.ModuleType) or _isinstance(value, types.ModuleType):
        # ``_pytest.junitxml.re``: a module another module's code reads its functions from. A
        # package gains its submodules as they are imported (``unittest.mock``).
        submodule = was is None and key == getattr(value, "__name__", None) and _image_module(value)
        if value is was or submodule:
            return None
        named = [f"the module {getattr(v, '__name__', '?')}" if _isinstance(v, types.ModuleType) else _named(v) for v in (value, was)]
        return f"{named[0]} in place of {named[1] if was is not None else 'nothing'}"
    for function in _unwrapped(value):
        # In a descriptor, or where a Python function was: a builtin, a class, a C object
        # (``BaseReport.passed = property(bool)``) runs no code a file can vouch for.
        in_place_of_code = value is not function or _isinstance(was, types.FunctionType)
        if in_place_of_code and callable(function) and not _isinstance(function, types.FunctionType):
            return f"{_named(function)}, no function, as a method"
        moved = _class_code().get(id(function))
        if moved is not None and moved[0] is function and moved[1] != key:
            return f"the code of {moved[1]}"
    return None


_MODULE_OBJECTS = [_MODULES[name] for name in _MODULE_NAMES]


def _namespaces() -> list[tuple[str, Any]]:
    """Where the watched members live: each module's namespace and its own classes', by module."""
    found = []
    for name, module in _MODULES.items():
        found.append((name, vars(module)))
        # Not the builtin types: their namespaces cannot change.
        found += [(name, vars(v)) for v in list(vars(module).values())
                  if _isinstance(v, type) and v.__module__ == name and name != "builtins"]
    return found


def _attributes(instance: Any) -> list[Any]:
    values = list(vars(instance).values())
    return values + [v for value in values if _isinstance(value, dict) for v in list(value.values())[:64]]


_NAMESPACES = _namespaces()
_UNSTEADY = [namespace for _, namespace in _NAMESPACES if not _VOLATILE.isdisjoint(namespace)]
_STEADY = [namespace for _, namespace in _NAMESPACES if _VOLATILE.isdisjoint(namespace)]


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


_SINCE: int = 0  # the ctime of a file made as the guard loaded: a file changed after it was written by the run


def _mark_start() -> int:
    """A timestamp from the file system's own clock (coarser than ``time.time_ns``, so a file
    written just after the guard loaded could read as earlier on the other clock)."""
    import tempfile

    fd, path = tempfile.mkstemp(prefix="taskforge-guard-")
    try:
        return os.fstat(fd).st_ctime_ns
    finally:
        os.close(fd)
        os.unlink(path)


# Code the image loaded before any of the project's or the candidate's code ran: id(code) -> (the
# code, id of its module's namespace). Code is trusted by identity, not by the file it names (a
# name that ``compile``, ``exec`` or ``CodeType.replace`` can give any code).
_LOADED: dict[int, tuple[types.CodeType, int]] = {}
# The modules the interpreter holds frozen name "<frozen ...>", no file: their code is trusted as
# loaded or not at all (runpy's is on the stack of every test run with ``-m pytest``).
_LOADED_PREFIXES = ("_pytest", "pytest", "pluggy", "importlib", "_frozen_importlib", "zipimport", "unittest",
                    "functools", "runpy", "taskforge_pytest")  # taskforge's report plugin, loaded before the guard


def _load_trusted(only: str | None = None) -> None:
    for name, module in list(sys.modules.items()):
        if not _isinstance(module, types.ModuleType) or (only is not None and name != only):
            continue
        if only is None and not name.startswith(_LOADED_PREFIXES):
            continue
        for value in list(vars(module).values()):
            # Every class once, its ``__module__`` whatever it says (pytest's public classes say
            # "pytest", and many are imported into several modules).
            if _isinstance(value, type):
                if id(value) in _WALKED:
                    continue
                _WALKED[id(value)] = value
            members = list(vars(value).values()) if _isinstance(value, type) else [value]
            for member in members:
                # Only what these types hold: a getattr on any object can run its ``__getattr__``
                # (``pytest.mark.fget`` makes a marker, and warns).
                if _isinstance(member, (classmethod, staticmethod, types.MethodType)):
                    member = member.__func__
                functions = (member.fget, member.fset, member.fdel) if _isinstance(member, property) else (member,)
                for function in functions:
                    if _isinstance(function, types.FunctionType):
                        _trust_function(function, 0)


def _trust_function(function: types.FunctionType, depth: int) -> None:
    code = function.__code__
    if depth > 3:
        return
    if id(code) not in _LOADED:  # one code, many functions: a decorator's wrapper around each method
        _LOADED[id(code)] = (code, id(function.__globals__))  # imported elsewhere, it keeps its own globals
        _LOADED_BY_FILE.setdefault(code.co_filename, []).append(code)
    for cell in function.__closure__ or ():  # what a decorator wrapped
        if _filled(cell) and _isinstance(cell.cell_contents, types.FunctionType):
            _trust_function(cell.cell_contents, depth + 1)


_LOADED_BY_FILE: dict[str, list[types.CodeType]] = {}
_WALKED: dict[int, type] = {}
_BY_FILE: dict[str, dict[int, types.CodeType]] = {}  # nested code of _LOADED, by file: closures made later


def _nested_loaded(code: types.CodeType) -> bool:
    file = code.co_filename
    if file not in _LOADED_BY_FILE:
        return False
    if file not in _BY_FILE:
        nested: dict[int, types.CodeType] = {}
        stack = list(_LOADED_BY_FILE[file])
        while stack:
            current = stack.pop()
            nested[id(current)] = current
            stack.extend(c for c in current.co_consts if type(c) is types.CodeType)
        _BY_FILE[file] = nested
    return _BY_FILE[file].get(id(code)) is code


_COMPILED: dict[tuple[str, bool], dict[tuple[str, int], Any] | str] = {}


def _compiled(file: str, rewritten: bool) -> dict[tuple[str, int], Any] | str:
    """The code objects of ``file`` compiled afresh (as pytest compiles it when ``rewritten``), or
    why it cannot vouch for code that names it: not a file, the candidate's, written during the
    run."""
    key = (file, rewritten)
    if key in _COMPILED:
        return _COMPILED[key]
    real = _real(file)
    why: str | None = None
    if not os.path.isabs(file):
        why = f"code compiled from a string ({file})"
    elif real in _candidate or os.path.normpath(file) in _candidate:
        why = real if real in _candidate else os.path.normpath(file)
    else:
        try:
            with open(real, "rb") as f:
                changed = os.fstat(f.fileno()).st_ctime_ns
                data = f.read()
        except OSError:
            why = f"code naming {file}, which is no file"
        else:
            if real.startswith(_WRITABLE) and changed >= _SINCE:
                why = f"{real}, written during the run"
    if why is None:
        try:
            _COMPILED[key] = _trusted_code(real, data, rewritten, _CONFIG[0] if _CONFIG else None)
        except Exception as err:  # noqa: BLE001 - code that names a file it is not compiled from
            _COMPILED[key] = f"code naming {file}, which does not compile ({type(err).__name__})"
    else:
        _COMPILED[key] = why
    return _COMPILED[key]


_CODE_WHY: dict[int, tuple[types.CodeType, str | None]] = {}


def _started_threads() -> set[int]:
    """The idents of the threads that ran before the candidate's code could, and still run (an
    ident is reused once its thread ends): the main thread, the threads the run began with that
    still hold their interpreter lock, and those of them without a Thread object. Read from the
    threads' ``__dict__``, not through properties the candidate's code could replace."""
    listed = {_peek(t, "_ident"): t for t in _THREADS_AT_START.values()}
    out = {ident for ident in _RAW_THREADS_AT_START if ident not in listed}
    for ident, thread in listed.items():
        lock = _peek(thread, "_tstate_lock")
        if thread is _MAIN_THREAD or (type(lock) is _LOCK_TYPE and lock.locked()):
            out.add(ident)
    return out


def _stack_why(frame: types.FrameType | None) -> str | None:
    """Why a frame of this stack (a thread's, from its top down) runs code that is not trusted, or None."""
    while frame is not None:
        if (why := _code_why(frame.f_code, _rewritten(frame.f_globals))) is not None:
            return why
        frame = frame.f_back
    return None


def _running_why(frame: types.FrameType, ident: int) -> str | None:
    """Why a thread the run started, now at ``frame`` (its innermost), runs what the guard cannot
    trust: code of its stack that is not trusted, a start outside ``threading``, or a loop in C
    that a frame of it calls (:func:`_frame_why`)."""
    return _stack_why(frame) or _entry_why(frame, ident) or _frame_why(frame)


def _entry_why(frame: types.FrameType, ident: int) -> str | None:
    """Why the Thread object the thread at ``frame`` started from runs what the guard cannot
    trust (:func:`_thread_object_why`): the one its first frame, ``Thread._bootstrap``, holds,
    whether ``threading.enumerate`` lists it or not. A thread ``_thread.start_new_thread`` started
    on a C callable runs Python frames only where that callable calls back into them (a ninth
    red team's loop waited in ``Event.wait``), and nothing on its stack names the loop: its first
    frame changes from one look to the next (:data:`_FIRST_FRAMES`)."""
    first = frame
    for _ in range(4096):
        if first.f_back is None:
            break
        first = first.f_back
    if first.f_code is not _BOOTSTRAP_CODE:
        # Started with ``_thread.start_new_thread`` (Python 3.11 audits no such event): the frame
        # it was started on stays its first for as long as it runs. A first frame that changes is
        # called from C again and again: a loop in C that calls back into Python.
        # Seen to change twice: an ident is reused once its thread ends, by a new thread that may
        # well start on another function.
        seen = _FIRST_FRAMES.setdefault(ident, [first, 0])
        if seen[0] is not first:
            seen[0], seen[1] = first, seen[1] + 1
        if seen[1] >= 2:
            return f"a thread started outside threading, a loop in C calling {first.f_code.co_qualname} " \
                   f"({first.f_code.co_filename}) and other code first, one call after another"
        return None
    names = first.f_locals
    thread = _lookup(names, "self") if issubclass(type(names), dict) else _NOTHING
    return _thread_object_why(thread) if _isinstance(thread, threading.Thread) else "a thread without its Thread object"


def _thread_object_why(thread: Any) -> str | None:
    """Why a Thread object the run started runs what the guard cannot trust: its target (or its
    ``run``), or a C callable among its attributes called with values that call back."""
    target = _peek(thread, "_target") or _peek(thread, "run")
    # Its class too: a Thread subclass's ``__getattribute__`` ran inside the check as it read the
    # thread's ``__dict__`` (an eleventh red team's).
    return _untrusted(target) or _untrusted(type(thread)) or _named_call_why(_named_attributes(thread))


def _code_why(code: types.CodeType, rewritten: bool) -> str | None:
    """Why ``code`` is not code of the image or of a file laid before the run, or None."""
    hit = _CODE_WHY.get(id(code))
    if hit is not None and hit[0] is code:
        return hit[1]
    why: str | None = None
    if id(code) not in _LOADED and not _nested_loaded(code):
        compiled = _compiled(code.co_filename, rewritten)
        if _isinstance(compiled, str):
            why = None if _as_started(code, rewritten) else compiled
        else:
            match = compiled.get((getattr(code, "co_qualname", code.co_name), code.co_firstlineno))
            if match is None or not _same_code(code, match):
                why = f"code that names {code.co_filename} but was not compiled from it"
    _CODE_WHY[id(code)] = (code, why)
    return why


_STARTED: dict[tuple[str, bool], dict[str, list[types.CodeType]]] = {}


def _as_started(code: types.CodeType, rewritten: bool) -> bool:
    """Whether ``code`` is compiled from the start state's copy of the candidate's file it names
    (:func:`_start_sources`): the same code under the same qualified name, wherever the
    candidate's edits moved its lines."""
    real = _real(code.co_filename)
    source = _START.get(real)
    if source is None:
        return False
    key = (real, rewritten)
    if key not in _STARTED:
        by_name: dict[str, list[types.CodeType]] = {}
        try:
            compiled = _trusted_code(real, source, rewritten, _CONFIG[0] if _CONFIG else None)
        except Exception:  # noqa: BLE001 - a start state that does not compile vouches for nothing
            compiled = {}
        for (name, _), each in compiled.items():
            by_name.setdefault(name, []).append(each)
        _STARTED[key] = by_name
    name = getattr(code, "co_qualname", code.co_name)
    return any(_same_code(code, each) for each in _STARTED[key].get(name, ()))


_BUILTIN = (types.BuiltinFunctionType, types.WrapperDescriptorType, types.MethodWrapperType,
            types.MethodDescriptorType, types.ClassMethodDescriptorType, types.GetSetDescriptorType,
            types.MemberDescriptorType)


_PLAIN_DESCRIPTORS = (types.GetSetDescriptorType, types.MemberDescriptorType)


def _static(obj: Any, name: str) -> Any:
    """``inspect.getattr_static(obj, name)``, with every namespace read by :func:`_lookup` (the
    standard library's compares keys with ``in``): a class's own MRO, then its metaclass's; for
    an instance, its class's data descriptor, else its own ``__dict__``, else its class's member."""
    kind = type(obj)
    if issubclass(kind, type):
        found = _class_lookup(obj, name)
        return found if found is not _NOTHING else _class_lookup(kind, name)
    member = _class_lookup(kind, name)
    if member is not _NOTHING and _one_of(type(member), (*_PLAIN_DESCRIPTORS, property)):
        return member
    own = _class_lookup(kind, "__dict__")
    if type(own) is types.GetSetDescriptorType:
        found = _lookup(own.__get__(obj, kind), name)
        if found is not _NOTHING:
            return found
    return member


def _peek(obj: Any, name: str, default: Any = None) -> Any:
    """``obj.name`` read without running any code of ``obj``'s class: a check that calls
    ``getattr`` on the candidate's object runs its ``__getattr__``, ``__getattribute__`` or
    property inside the check (a seventh red team's thread target undid its forging patch from
    ``__getattr__`` as the guard looked for its ``__wrapped__``). The instance's own dict, else a
    class attribute as stored (a function unbound), a C slot or getset read through its
    descriptor; ``default`` for a property, whose getter is code."""
    found = _static(obj, name)
    if found is _NOTHING:
        return default
    if _one_of(type(found), _PLAIN_DESCRIPTORS):
        try:
            return found.__get__(obj, type(obj))
        except AttributeError:
            return default
    return default if _isinstance(found, property) else found


def _peek_dict(obj: Any) -> Any:
    """``obj.__dict__`` read as :func:`_peek` reads (empty without a plain one)."""
    found = _peek(obj, "__dict__")
    return found if _one_of(type(found), (dict, types.MappingProxyType)) else {}


def _untrusted(obj: Any, depth: int = 0) -> str | None:
    """Why ``obj`` (a replacement, a hook implementation, an import hook) runs code that is not the
    image's or the project's as laid, or None: its code is held to the file it names, and a function
    of the image's own code is held to its module's namespace, its closure and its defaults (a
    candidate's callback inside pluggy's hook-call monitoring is a closure of pluggy's own code)."""
    if depth > 6 or obj is None:
        return None
    if _isinstance(obj, (classmethod, staticmethod)):
        return _untrusted(obj.__func__, depth + 1)
    if _isinstance(obj, property):
        return next((why for f in (obj.fget, obj.fset, obj.fdel) if (why := _untrusted(f, depth + 1))), None)
    if _isinstance(obj, types.MethodType):
        return (_untrusted(obj.__func__, depth + 1) or _untrusted_object(obj.__self__, depth + 1)
                or _bundle_why(obj, (), {}))
    if _isinstance(obj, types.FunctionType):
        code = obj.__code__
        why = _code_why(code, _rewritten(obj.__globals__)) or _foreign_globals(obj)
        if why is None and obj.__builtins__ is not _BUILTINS:  # its ``__import__``, ``len``, ... are someone's
            why = f"{code.co_qualname} with builtins of its own"
        inner = [cell.cell_contents for cell in obj.__closure__ or () if _filled(cell)]
        inner += [*(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).values()]
        for value in inner:
            if why is None and callable(value):
                why = _untrusted(value, depth + 1)
        return why
    if _isinstance(obj, _BUILTIN):
        if any(obj is runner for runner in _RUNS_STRINGS):
            return f"the builtin {obj.__name__}, which runs code from a string"
        owner = getattr(obj, "__self__", None)
        return None if owner is None or _isinstance(owner, types.ModuleType) else _untrusted_object(owner, depth + 1)
    if _isinstance(obj, functools.partial):
        # Read through partial's own members: a subclass's property named ``func`` is code.
        func, args, keywords = _PARTIAL_FUNC(obj), _PARTIAL_ARGS(obj), _PARTIAL_KEYWORDS(obj)
        parts = [func, *args, *dict.values(keywords)]
        found = next((why for p in parts if (why := _untrusted_object(p, depth + 1))), None)
        return found or _bundle_why(func, args, keywords)
    if _isinstance(obj, type):
        for klass in _MRO(obj):
            if _module_of(klass) == "builtins":
                continue
            for member in list(_CLASS_DICT(klass).values()):
                if _runs_code(member) and not _generated(klass, member) and \
                        (why := _untrusted_member(member, depth + 1)) is not None:
                    return why
        return None
    if callable(obj):  # an instance: its class's code runs, and what it wraps
        kind = type(obj)
        wrapped = _peek(obj, "__wrapped__")
        if _isinstance(wrapped, types.FunctionType):  # functools.lru_cache
            return _untrusted(kind, depth + 1) or _untrusted(wrapped, depth + 1)
        if not any(_isinstance(_lookup(_CLASS_DICT(k), "__call__"), types.FunctionType) for k in _MRO(kind)):
            # ``operator.methodcaller("__setattr__", "outcome", "passed")``: a C object that runs
            # no code of its own a file could vouch for.
            return f"a callable {kind.__qualname__} object"
        return _untrusted(kind, depth + 1)
    return None


def _untrusted_object(obj: Any, depth: int) -> str | None:
    """A value trusted code is bound to or called with (a method's ``self``, a partial's
    arguments): a callable as any, an instance by its class and the functions it holds. Judged
    once per check: plugins are bound to objects that hold the whole configuration."""
    if depth > 6 or obj is None or _one_of(type(obj), _INERT_SCALARS) or _isinstance(obj, types.ModuleType):
        return None
    if callable(obj):
        return _untrusted(obj, depth)
    seen = _JUDGED.get(id(obj))
    if seen is not None and seen[0] is obj:
        return seen[1]
    _JUDGED[id(obj)] = (obj, None)  # a cycle back to it judges nothing twice
    why = _untrusted(type(obj), depth + 1)
    attributes = _peek_dict(obj)
    if why is None and attributes:
        for value in list(attributes.values())[:32]:
            if _runs_code(value) and (why := _untrusted_member(value, depth + 1)):
                break
    # What a container holds: the classes of its keys and items run code when it is searched or
    # compared (a dict's ``get``, bound as a signal handler or a gc callback, compared a key of
    # the candidate's with its own ``__eq__``, a tenth red team's).
    for item in _contents(obj, 64) if why is None else ():
        if (why := _untrusted_object(item, depth + 1)) is not None:
            break
    _JUDGED[id(obj)] = (obj, why)
    return why


def _contents(obj: Any, limit: int = 4097) -> list[Any]:
    """Up to ``limit`` of what a container of a builtin kind holds (a dict's keys and values), read
    through the builtin type's own iteration, never a subclass's ``__iter__``; [] for anything else."""
    kind = type(obj)
    if issubclass(kind, dict):
        return [part for pair in itertools.islice(dict.items(obj), limit) for part in pair]
    for base in (tuple, list, set, frozenset, collections.deque):
        if issubclass(kind, base):
            return list(itertools.islice(base.__iter__(obj), limit))
    return []


_JUDGED: dict[int, tuple[Any, str | None]] = {}  # objects judged in this check
_BUILTINS = vars(importlib.import_module("builtins"))
_RUNS_STRINGS = (exec, eval, compile)


def _untrusted_member(value: Any, depth: int) -> str | None:
    if _isinstance(value, functools.partialmethod):
        parts = [value.func, *value.args, *value.keywords.values()]
        return next((why for p in parts if (why := _untrusted_object(p, depth + 1))), None)
    if callable(value) or _isinstance(value, (classmethod, property)):
        return _untrusted(value, depth)
    return _untrusted_object(value, depth)  # a descriptor: its class's code runs, and what it holds


_INERT_SCALARS = (type(None), bool, int, float, complex, str, bytes, bytearray, range, type(Ellipsis))
_INERT_CONTAINERS = (tuple, list, set, frozenset, dict)
_INERT_ITEMS = 4096


def _one_of(kind: type, kinds: tuple[type, ...]) -> bool:
    """``kind in kinds`` by identity: ``in`` compares with ``==``, which a metaclass's ``__eq__``
    answers (a ninth red team's toggle ran inside every check so)."""
    return any(kind is each for each in kinds)


def _inert(value: Any, depth: int = 0) -> bool:
    """Whether a value a C callable is called with, or bound to, can call nothing back: not
    callable, no iterator or other iterable (a ``map`` calls its function per item; a file is
    read, which calls nothing), and, for a plain container, nothing but such values in it. A loop
    in C over calls (``deque(map(operator.call, cycle(steps)))``) needs a callable or an iterator
    among its arguments."""
    kind = type(value)
    if _one_of(kind, _INERT_SCALARS) or issubclass(kind, (types.ModuleType, _IO_BASE)):
        return True
    if callable(value):
        return False
    if issubclass(kind, (*_INERT_CONTAINERS, collections.deque)):
        # A subclass (an OrderedDict, a namedtuple, a deque) as its builtin kind, if its own
        # class runs only trusted code.
        items = _contents(value)
        if depth > 3 or len(items) > _INERT_ITEMS or (not _one_of(kind, _INERT_CONTAINERS) and _untrusted(kind)):
            return False
        return all(_inert(item, depth + 1) for item in items)
    return all(_class_lookup(kind, name) is _NOTHING for name in ("__next__", "__iter__", "__getitem__"))


def _python_callable(func: Any) -> bool:
    """Whether calling ``func`` runs a Python function first (its frames show what it does)."""
    if _isinstance(func, (staticmethod, types.MethodType)):
        func = func.__func__
    return _isinstance(func, types.FunctionType)


def _bundle_why(func: Any, args: Any, kwargs: Any) -> str | None:
    """Why a C callable (a builtin, a class, a C object) called with ``args`` and ``kwargs``, or
    bound to an object (a method's ``__self__``), can run a loop of calls the guard cannot see, or
    None: one of them can call back (a callable, an iterator). Its work runs no frame of its own,
    so neither a thread's stack nor the callable itself names what it runs: an eighth red team's
    thread drained, in C, a ``map`` over a cycle of the candidate's partials that put a forging
    patch in place and took it away again; a ninth's bound the map as a method's ``__self__``."""
    if func is None or not callable(func) or _python_callable(func):
        return None
    values = [*(args if _one_of(type(args), (tuple, list)) else ()),
              *(dict.values(kwargs) if type(kwargs) is dict else ())]
    if _isinstance(func, types.MethodType):  # a C callable bound to an object: it is called with it
        values.append(func.__self__)
    elif _isinstance(func, _BUILTIN):
        # A C method's own object is data to it (a deque's ``append``, a dict's ``clear``, a
        # cache's ``cache_clear``), unless it is an iterator the method drives (a map's ``__next__``).
        owner = _peek(func, "__self__")
        if owner is not None and _class_lookup(type(owner), "__next__") is not _NOTHING:
            values.append(owner)
    odd = next((value for value in values if not _inert(value)), _NOTHING)
    if odd is _NOTHING:
        return None
    name = _peek(func, "__qualname__")
    return f"{name if type(name) is str else type(func).__qualname__} called with a {type(odd).__qualname__}, " \
           "a loop in C the guard cannot see into"


_IO_BASE = _io._IOBase
_PARTIAL_FUNC = vars(functools.partial)["func"].__get__
_PARTIAL_ARGS = vars(functools.partial)["args"].__get__
_PARTIAL_KEYWORDS = vars(functools.partial)["keywords"].__get__
_FUNC_NAMES = ("_target", "target", "fn", "_fn", "func", "_func", "function", "callback", "_callback", "action", "cb")
_ARGS_NAMES = ("_args", "args", "argument", "arguments")
_KWARGS_NAMES = ("_kwargs", "kwargs", "kwds", "_kwds", "keywords", "kw")
"""How the standard library's invokers name a call they make later: ``Thread`` (``_target``,
``_args``, ``_kwargs``), ``Timer`` (``function``), a pool's work item (``fn``), ``sched``'s event
(``action``, ``argument``), ``multiprocessing.pool.worker`` (``func``, ``kwds``), an event loop's
handle (``_callback``)."""


def _named_attributes(obj: Any) -> dict[str, Any]:
    """An object's attributes by name, its ``__dict__`` and ``__slots__`` (read as :func:`_peek` reads)."""
    named = {key: value for key, value in list(_peek_dict(obj).items())[:64] if type(key) is str}
    for klass in _MRO(type(obj)):
        slots = _lookup(_CLASS_DICT(klass), "__slots__")
        for name in (slots,) if type(slots) is str else slots if _one_of(type(slots), (tuple, list)) else ():
            if type(name) is str and name != "__dict__" and (value := _peek(obj, name, _NOTHING)) is not _NOTHING:
                named[name] = value
    return named


def _named_call_why(names: dict[str, Any]) -> str | None:
    """Why the call a namespace holds for later (:data:`_FUNC_NAMES`) is a loop in C (:func:`_bundle_why`)."""
    funcs = [names[n] for n in _FUNC_NAMES if n in names and names[n] is not None]
    if not funcs:
        return None
    # Every pairing: a Timer holds ``function`` and ``args``, and the ``_args`` of its Thread too.
    packs = [names[n] for n in _ARGS_NAMES if n in names] or [()]
    keywords = [names[n] for n in _KWARGS_NAMES if n in names] or [{}]
    for func in funcs:
        for args in packs:
            for kwargs in keywords:
                if (why := _bundle_why(func, args, kwargs)) is not None:
                    return why
    return None


def _frame_why(frame: types.FrameType | None) -> str | None:
    """Why a frame of a thread the run started can be calling a loop in C, its stack holding
    trusted code only: a call its locals hold (``sched``'s ``action`` and ``argument``), or one an
    object among them holds (a pool's work item, a thread), or a partial or bound method among
    them (:func:`_bundle_why`). Every frame of the stack: the loop may call back into trusted
    Python code that waits (``Event.wait``), which is then the innermost frame."""
    for _ in range(32):
        if frame is None:
            return None
        names = frame.f_locals
        # A frame's locals are a dict, but a namespace ``exec`` was given may be any mapping.
        local = {key: value for key, value in itertools.islice(dict.items(names), 64)
                 if type(key) is str} if issubclass(type(names), dict) else {}
        if (why := _named_call_why(local)) is not None:
            return why
        for value in local.values():
            kind = type(value)
            if _one_of(kind, (functools.partial, types.MethodType)):
                why = _untrusted(value)
            elif not (issubclass(kind, (type, types.ModuleType, types.FunctionType, _IO_BASE))
                      or _one_of(kind, _INERT_SCALARS) or _one_of(kind, _INERT_CONTAINERS)):
                why = _named_call_why(_named_attributes(value))
            if why is not None:
                return why
        frame = frame.f_back
    return None


def _frameless() -> int:
    """How many more threads run than have a Python frame, beyond those the run began with: a
    thread started with ``_thread.start_new_thread`` on a C callable runs none at all, so neither
    ``threading.enumerate`` nor ``sys._current_frames`` ever lists it."""
    return _THREAD_COUNT() - (len(_CURRENT_FRAMES()) - 1) - _FRAMELESS_AT_START


_GLOBALS_BY_FILE: dict[str, set[int]] = {}


def _foreign_globals(function: types.FunctionType) -> str | None:
    """Trusted code run in a namespace that is not its module's: a planted global redirects what
    the image's own code calls (``re.compile``'s code with a ``_compile`` of the candidate's)."""
    code, namespace = function.__code__, function.__globals__
    loaded = _LOADED.get(id(code))
    if loaded is not None and loaded[0] is code:
        return None if loaded[1] == id(namespace) else f"the image's code of {code.co_qualname} in another namespace"
    if not _GLOBALS_BY_FILE:
        for known, space in list(_LOADED.values()):
            _GLOBALS_BY_FILE.setdefault(known.co_filename, set()).add(space)
    if id(namespace) in _GLOBALS_BY_FILE.get(code.co_filename, ()):
        return None
    module = sys.modules.get(str(namespace.get("__name__")))
    file = getattr(module, "__file__", None)
    if module is not None and vars(module) is namespace and _isinstance(file, str) and _real(file) == _real(code.co_filename):
        return None
    return f"the code of {code.co_qualname} from {code.co_filename} in a namespace that is not its module's"


def _untrusted_hook(hook: Any) -> str | None:
    """An import hook (a finder, a loader, a path hook) runs its class's methods, callable or not,
    and the functions it holds (``finder.find_spec = ...`` on the instance)."""
    if _isinstance(hook, type):
        return _untrusted(hook)
    why = _untrusted(hook) or _untrusted(type(hook)) or _untrusted_object(hook, 0)
    # What it holds runs too (``self.prefix + "."`` calls the prefix's ``__add__``): the classes of
    # its attributes' values, one level down. Only hooks: a project's thread may well hold the
    # objects of the class the candidate completes.
    for value in list(_peek_dict(hook).values())[:32] if why is None else ():
        kind = type(value)
        if _module_of(kind) != "builtins" and not _isinstance(value, types.ModuleType):
            why = _untrusted(kind)
            if why is not None:
                break
    return why


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


_SINCE = _mark_start()
_load_trusted()
_PATH_CACHE_AT_START = dict(sys.path_importer_cache)
_PLAIN_FINDERS = (importlib.machinery.FileFinder, zipimport.zipimporter)
# The hook implementations of the image's plugins as the scorer loaded them (``-p``), by
# identity: a plugin registered later under one of their names, or an implementation that names
# one of them as its plugin, is not one of them.
_TRUSTED_IMPLS: dict[int, Any] = {}
_THREADS_AT_START = {id(thread): thread for thread in threading.enumerate()}
_MONOTONIC = time.monotonic
_SLEEP = time.sleep


def _enumerate() -> list[Any]:
    """``threading.enumerate`` without its lock: the candidate's code can hold
    ``threading._active_limbo_lock``, and a check that waits for it waits on the candidate (a
    tenth red team's signal handler ran while the check was blocked on it, and let it go once it
    had put the real report factory back). The thread tables are copied in one C call each."""
    found = []
    for name in ("_active", "_limbo"):
        table = _lookup(vars(threading), name)
        if type(table) is dict:
            found += list(dict.values(dict.copy(table)))
    return found

_MAIN_THREAD = threading.main_thread()
_MAIN_IDENT = _MAIN_THREAD.ident
_GETTRACE, _GETPROFILE = sys.gettrace, sys.getprofile
_TRACE_AT_START, _PROFILE_AT_START = sys.gettrace(), sys.getprofile()
_GET_IDENT = _thread.get_ident
_SIGMASK = signal.pthread_sigmask
_GC_ENABLED, _GC_ENABLE, _GC_DISABLE = gc.isenabled, gc.enable, gc.disable
_LOCK_TYPE = type(threading.Lock())
_CURRENT_FRAMES = sys._current_frames
_DUMMY_THREAD = threading._DummyThread
_RAW_THREADS_AT_START = frozenset(_CURRENT_FRAMES())
_THREAD_COUNT = _thread._count
_BOOTSTRAP_CODE = threading.Thread._bootstrap.__code__
_FRAMELESS_AT_START = 0
_FRAMELESS_AT_START = _frameless()
_SETTLE_S = 2.0
"""How long a check waits for the threads the project's code started to end before it judges them."""
_SETTLE_BUDGET_S = 10.0
"""The most a run waits so, over all its checks: a thread that never ends costs this once."""
_SIGNALS = tuple(sorted(set(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP}))
"""Every signal a handler can be set for: a ninth red team's handler of ``SIGURG``, which no list
named, ran from a child process's clock and took a forging patch away after each report."""


def _caller_types() -> tuple[type, ...]:
    import pluggy._hooks as hooks

    return tuple(t for t in (getattr(hooks, "HookCaller", None), getattr(hooks, "_HookCaller", None),
                             getattr(hooks, "_SubsetHookCaller", None)) if _isinstance(t, type))


_CALLER_TYPES = _caller_types()
_HookImpl = importlib.import_module("pluggy._hooks").HookImpl


def _impl_shape(impl: Any) -> tuple[Any, ...]:
    """What a hook implementation was registered with: its function, plugin and ordering."""
    return tuple(id(getattr(impl, name, None)) if name in ("function", "plugin") else getattr(impl, name, None)
                 for name in ("function", "plugin", "plugin_name", "wrapper", "hookwrapper", "tryfirst",
                              "trylast", "optionalhook", "argnames", "kwargnames"))


def _named(value: Any) -> str:
    return str(getattr(value, "__qualname__", None) or type(value).__qualname__)


class _Guard:
    def __init__(self) -> None:
        self.findings: list[str] = []
        self._last: dict[str, list[Any]] = {}
        self._flat: list[Any] = []
        self._held: dict[int, list[Any]] = {}
        self._callers: dict[str, Any] = {}
        self._impls: dict[int, tuple[Any, tuple[Any, ...]]] = {}
        self._settle_left = _SETTLE_BUDGET_S
        self._graveyard: list[Any] = []

    def note(self, finding: str) -> None:
        """A finding, kept for the report and sent to the scoring supervisor's stream at once:
        what is only held in this process until the session ends, the candidate's code can
        erase first (an eleventh red team cleared ``_early``)."""
        if finding not in self.findings:
            self.findings.append(finding)
            _noted(finding)

    def check(self, config: pytest.Config, *, full: bool = True) -> None:
        """Every check after a test, run so that no code of the candidate's can run inside it
        where nothing scheduled it: signals held back (a handler, judged trusted or not, ran a
        toggle inside the check when the check blocked on a lock the candidate held, a tenth red
        team's), no collection of cyclic garbage (a ``__del__`` or a gc callback ran one at each
        collection the check's own allocations set off), and what the check stops holding let go
        only once it is done (a finalizer of an object the guard held last)."""
        masked = _SIGMASK(signal.SIG_BLOCK, _SIGNALS) if _GET_IDENT() == _MAIN_IDENT else None
        collecting = _GC_ENABLED()
        _GC_DISABLE()
        _LOOKED_UP.clear()
        _IN_CHECK.append(True)
        try:
            self._check(config, full=full)
        finally:
            _IN_CHECK.clear()
            _LOOKED_UP.clear()
            self._graveyard.clear()  # the finalizers the check held off run now, after it
            _JUDGED.clear()
            if collecting:
                _GC_ENABLE()
            if masked is not None:
                _SIGMASK(signal.SIG_SETMASK, masked)

    def _check(self, config: pytest.Config, *, full: bool) -> None:
        self._odd_keys()
        self._settle()
        for finding in _early:
            self.note(finding)
        for key in _own_changed():
            self.note(f"replaced {key}, which the verdict is written with")
        self._config_hook(config)
        for entry in [*sys.meta_path, *sys.path_hooks]:
            if _HOOKS_AT_START.get(id(entry)) is not entry and (why := _untrusted_hook(entry)) is not None:
                self.note(f"import hook {type(entry).__name__} installed from {why}")
        if not all(map(operator.is_, map(sys.modules.get, _MODULE_NAMES), _MODULE_OBJECTS)):
            for name, module in _MODULES.items():
                if sys.modules.get(name) is not module:
                    self.note(f"sys.modules[{name!r}] is not the module pytest loaded")
        changed = self._changed_modules()  # every module at the first check
        if changed:
            current = {key: value for name in changed for key, value in _members(name)}
            for key, value in current.items():
                if _objects.get(key, value) is not value and (why := _replacement_why(key, value)):
                    self.note(f"replaced {key} ({why})")
            for key in current.keys() - _objects.keys():  # a new override (``TestReport.__setattr__``)
                if why := _replacement_why(key, current[key]):
                    self.note(f"added {key} ({why})")
            for name in changed:
                for key in set(_BASELINE_KEYS[name]) - current.keys():
                    self.note(f"deleted {key}")
        instances = list(_watched_instances(config))
        if self._changed("instances", [v for _, i in instances for v in _attributes(i)]):
            for what, instance in instances:
                for name, value in list(vars(instance).items()):
                    inner = list(value.values())[:64] if _isinstance(value, dict) else [value]
                    for each in inner:
                        why = _untrusted(each) if callable(each) else _untrusted_object(each, 0) if what == "terminal writer" else None
                        if why is not None:
                            self.note(f"replaced {name} on the {what} ({why})")
                            break
        self._callbacks()
        if full:
            self._import_caches()
        self._hooks(config, full=full)

    def _config_hook(self, config: pytest.Config) -> None:
        """``config.hook``, which ``Node.ihook`` calls: the plugin manager's hook table, or pytest's
        proxy around it (``PathAwareHookProxy``), whose cached callers are the table's own or
        pytest's wrappers of them."""
        hook, relay = config.hook, config.pluginmanager.hook
        if hook is relay:
            return
        held = getattr(hook, "__dict__", None)
        # pytest 8 and 9 hold the table as ``_hook_relay``; pytest 7 as ``__hook_caller`` (mangled).
        relay_keys = [key for key, value in held.items() if value is relay] if _isinstance(held, dict) else []
        if id(type(hook)) not in _VERDICT_CLASSES or not relay_keys:
            self.note(f"config.hook is not the plugin manager's ({_named(hook)})")
            return
        for key, value in list(held.items()):
            if key not in relay_keys and value is not getattr(relay, key, None) and (why := _untrusted(value)):
                self.note(f"config.hook's {key} runs {why}")

    def _hooks(self, config: pytest.Config, *, full: bool) -> None:
        """The hook table holds pluggy's own callers, the ones first seen under each name; each
        implementation keeps what it was registered with, and runs trusted code unless it is one
        the image's plugins registered before any conftest."""
        relay = config.pluginmanager.hook
        table = _peek_dict(relay)
        if any(kind is not str for kind in map(type, table)):
            self.note("a key that is not a string in the hook table")
        hooks = {key: value for key, value in list(table.items()) if type(key) is str}
        # After each test and at the start and the end of the session: every caller (judged again
        # only if one of them changed since it was last judged). Only the report hooks' once: a
        # plugin registered during a test, its setup hook patching the report factory and its
        # teardown hook undoing it, left before the session ended (an eleventh red team's).
        report = list(hooks.values())
        if not self._changed("hooks" if not full else "all hooks", [*hooks.values(), *map(type, report), *(
                x for caller in report for x in (getattr(caller, "_hookexec", None), *getattr(caller, "_hookimpls", ())))]):
            return
        for name, caller in hooks.items():
            if name.startswith("_"):
                continue
            first = self._callers.setdefault(name, caller)
            if type(caller) not in _CALLER_TYPES or first is not caller:
                self.note(f"hook {name} is not pluggy's caller ({type(caller).__name__})")
                continue
            if (why := _untrusted(caller._hookexec)) is not None:
                self.note(f"hook {name} called through {why}")
            for impl in caller.get_hookimpls():
                shape = _impl_shape(impl)
                seen = self._impls.setdefault(id(impl), (impl, shape))
                if seen[0] is impl and seen[1] != shape:
                    self.note(f"hook {name}'s implementation from {impl.plugin_name} changed after it was registered")
                if _TRUSTED_IMPLS.get(id(impl)) is impl:
                    continue
                if type(impl) is not _HookImpl:
                    self.note(f"hook {name} has an implementation of type {type(impl).__name__}")
                elif (why := _untrusted(impl.function)) is not None:
                    self.note(f"hook {name} implemented in {why}")

    def _odd_keys(self) -> None:
        """A key that is not exactly a string in ``sys.modules`` or a watched namespace: looking a
        name up there compares the probe with a key of the same hash by the key's ``__eq__``, the
        candidate's code (a tenth red team's key of the hash of ``"__slots__"``). Read first, by
        the keys' types alone, before any lookup of the check's."""
        modules = sys.modules
        spaces = [("sys.modules", dict.keys(modules) if issubclass(type(modules), dict) else ())]
        for name, space in [*spaces, *_NAMESPACES]:
            if any(kind is not str for kind in map(type, space)):  # by identity: a metaclass hashes too
                self.note(f"a key that is not a string in the namespace of {name}")

    def _settle(self) -> None:
        """Wait a little for the threads that run the project's code to end, before anything is
        judged. A project's code starts threads of its own: diskcache's ``memoize_stampede``
        recomputes a value in a background thread, which some checks met still running, so the
        gold patches of 3 of its held-out tasks scored ``tampered``. A thread that ends here ran
        the candidate's code before this check looked at everything it could have changed; one
        still running is judged as before. A thread that outlives its work (a pool's worker,
        whose target is the standard library's) is waited for until no frame of its stack runs
        the project's or the candidate's code.

        Nothing here runs the candidate's code: threads are listed by ``threading.enumerate`` as
        the guard loaded it (the module's attribute is the candidate's to rebind, and would run in
        this check), and waited for on the thread's own interpreter lock, a real lock taken from
        its ``__dict__``, not by ``Thread.join``, which calls methods an attribute of the thread
        overrides. What a thread can still do: end while it is waited for, having undone what it
        did; a patch that undoes itself before the check does as much without one, and the
        outcome stream and the canaries stand behind both (README, threat model)."""
        if self._settle_left <= 0:
            return
        started = _MONOTONIC()
        deadline = started + min(_SETTLE_S, self._settle_left)
        for thread in _enumerate():
            if thread is _MAIN_THREAD or _THREADS_AT_START.get(id(thread)) is thread:
                continue
            left = deadline - _MONOTONIC()
            if left <= 0:
                break
            lock = _peek(thread, "_tstate_lock")
            if type(lock) is _LOCK_TYPE and _thread_object_why(thread) is not None:
                if lock.acquire(timeout=left):
                    lock.release()
        # A thread that outlives its work (a pool's worker) is waited for until its stack holds
        # no code but trusted code.
        while (left := deadline - _MONOTONIC()) > 0:
            running = _started_threads()
            if _frameless() <= 0 and not any(_running_why(frame, ident) is not None
                                              for ident, frame in _CURRENT_FRAMES().items() if ident not in running):
                break
            _SLEEP(min(0.005, left))
        self._settle_left -= _MONOTONIC() - started

    def _callbacks(self) -> None:
        """Code the interpreter calls when nobody scheduled it: threads, gc callbacks, signal
        handlers. Each runs trusted code, or it can edit a report between the checks."""
        noted = set()
        for thread in _enumerate():
            if _THREADS_AT_START.get(id(thread)) is not thread and (why := _thread_object_why(thread)) is not None:
                self.note(f"a thread runs {why}")
                noted.add(_peek(thread, "_ident"))
        # And by what each thread is running now, frame by frame down its stack: a thread started
        # with ``_thread.start_new_thread`` has no Thread object (or a dummy one, once it asks for
        # ``current_thread()``), which ``enumerate`` never lists (a sixth red team's); one that
        # rebinds its own ``_target`` (or ``run``) once started looks like trusted code above.
        frames = _CURRENT_FRAMES()
        for ident in [ident for ident in _FIRST_FRAMES if ident not in frames]:
            del _FIRST_FRAMES[ident]  # ended (an ident is reused once its thread ends)
        suspects = [ident for ident, frame in frames.items()
                    if ident not in noted and ident not in _started_threads() and _running_why(frame, ident) is not None]
        if suspects:
            # A pool's worker may have taken up the project's work only after the wait above
            # ended (the guest of a loaded machine): waited for once more, and judged again.
            self._settle()
            frames = _CURRENT_FRAMES()
            for ident in suspects:
                if ident in frames and (why := _running_why(frames[ident], ident)) is not None:
                    self.note(f"a thread runs {why}")
        # The trace and profile functions now, not only as the audit hook saw them set: one set
        # by trusted code the candidate aimed (a ``contextlib`` callback run as a signal handler,
        # no candidate frame on the stack) forged every report unseen (an eleventh red team's).
        for what, hook, start in (("trace", _GETTRACE(), _TRACE_AT_START), ("profile", _GETPROFILE(), _PROFILE_AT_START)):
            if hook is not None and hook is not start and (why := _untrusted(hook)) is not None:
                self.note(f"the {what} function runs {why}")
        for name in ("_profile_hook", "_trace_hook"):  # what threading sets in every thread it starts
            hook = _lookup(vars(threading), name)
            if hook is not _NOTHING and hook is not None and (why := _untrusted(hook)) is not None:
                self.note(f"threading.{name} runs {why}")
        if (hidden := _frameless()) > 0:
            self.note(f"{hidden} thread(s) of the run with no Python frame (a C callable started with "
                      "_thread.start_new_thread), whose work the guard cannot see")
        for callback in list(gc.callbacks):
            if (why := _untrusted(callback)) is not None:
                self.note(f"a gc callback runs {why}")
        for number in _SIGNALS:
            handler = signal.getsignal(number)
            if callable(handler) and (why := _untrusted(handler)) is not None:
                self.note(f"the handler of signal {number} runs {why}")

    def _changed_modules(self) -> list[str]:
        """The watched modules whose namespace, or one of whose classes', holds another object
        than at the last check (pytest sets a few names of its own as each test runs: those are
        left out, and only a module that changed is judged again). Values are compared by
        identity and held, so their ids stay theirs: ``==`` would ask a replacement's ``__eq__``."""
        flat = list(itertools.chain.from_iterable([namespace.values() for namespace in _STEADY]))
        flat += [value for namespace in _UNSTEADY for key, value in namespace.items()
                 if type(key) is not str or key not in _VOLATILE]
        if len(flat) == len(self._flat) and all(map(operator.is_, flat, self._flat)):
            return []
        self._graveyard.append(self._flat)
        self._flat = flat
        changed = []
        for index, (name, namespace) in enumerate(_NAMESPACES):
            values = [value for key, value in namespace.items() if type(key) is not str or key not in _VOLATILE]
            last = self._held.get(index)
            if last is None or len(last) != len(values) or not all(map(operator.is_, last, values)):
                self._graveyard.append(self._held.get(index))
                self._held[index] = values
                if not changed or changed[-1] != name:
                    changed.append(name)
        return changed

    def _changed(self, what: str, objects: list[Any]) -> bool:
        """Whether these objects are not the very ones of the last check (held, so their ids stay
        theirs): the checks after every test judge only what changed."""
        last = self._last.get(what)
        self._graveyard.append(last)
        self._last[what] = objects
        return last is None or len(last) != len(objects) or not all(map(operator.is_, last, objects))

    def _import_caches(self) -> None:
        """A finder put straight into ``sys.path_importer_cache`` imports what its folder holds
        without passing ``sys.path_hooks``."""
        for folder, finder in list(sys.path_importer_cache.items()):
            if finder is None or _PATH_CACHE_AT_START.get(folder) is finder:
                continue
            loaders = [loader for _, loader in getattr(finder, "_loaders", ())] if type(finder) in _PLAIN_FINDERS else []
            for what in ([] if type(finder) in _PLAIN_FINDERS else [finder]) + loaders:
                if (why := _untrusted_hook(what)) is not None:
                    self.note(f"import hook {type(what).__name__} for {folder} in sys.path_importer_cache from {why}")
                    break


def _watched_instances(config: pytest.Config) -> Iterator[tuple[str, Any]]:
    """The objects whose own attributes decide the report: the plugin manager (its
    ``_inner_hookexec`` calls every hook), the JUnit writer and the terminal reporter."""
    from _pytest.junitxml import (
        xml_key,  # the writer's stash key; private, but stable since pytest 7.0
    )

    yield "plugin manager", config.pluginmanager
    tracer = _peek(_peek(config.pluginmanager, "trace"), "root")
    if tracer is not None:  # its processors and writer see every traced hook call's arguments
        yield "hook tracer", tracer
    writer = config.stash.get(xml_key, None)
    if writer is not None:
        yield "JUnit writer", writer
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None:
        yield "terminal reporter", terminal
        writer = _peek(terminal, "_tw")
        if writer is not None:
            yield "terminal writer", writer  # its file's ``write`` runs inside every report hook


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
    if _isinstance(x, frozenset):
        return sorted((type(e).__name__, repr(e)) for e in x) == sorted((type(e).__name__, repr(e)) for e in y)
    if _isinstance(x, tuple):
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


def _wrapping_decorators(code: types.CodeType) -> int:
    """How many decorators the trusted test file ``code`` is compiled from applies to its function,
    marks (``@pytest.mark.x``) apart: how many wrappers may stand around it. Read from the file,
    not ``linecache``, whose cache is the candidate's to fill."""
    try:
        with open(code.co_filename, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return 0
    for node in ast.walk(tree):
        if _isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == code.co_name and node.decorator_list:
            if min(d.lineno for d in node.decorator_list) == code.co_firstlineno:
                return sum(not re.match(r"(\w+\.)*mark\.", ast.unparse(d)) for d in node.decorator_list)
    return 0


def _wrapped(function: Any) -> Any:
    """What a decorator's wrapper runs: ``__wrapped__`` (functools.wraps, mock.patch), or the inner
    test of a hypothesis ``@given`` (whose wrapper borrows the test's file and line)."""
    inner = getattr(function, "__wrapped__", None)
    if inner is None:
        inner = getattr(getattr(function, "hypothesis", None), "inner_test", None)
    return inner


_collected: dict[str, tuple[Any, Any]] = {}
_ITEM_TYPES: dict[str, type] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """The hidden tests run as written: each collected test of a trusted file runs code compiled
    from a trusted file (its own, or a test module beside it that defines a mixin it inherits) as
    the scorer wrote it, not code a loader, an audit hook or a swap put there."""
    guard = session.config.stash[_guard_key]
    for item in session.items:
        _ITEM_TYPES[item.nodeid] = type(item)
    for kind in set(_ITEM_TYPES.values()):
        if (why := _untrusted(kind)) is not None:
            guard.note(f"tests collected as {kind.__qualname__}, which runs {why}")
    if not _tests:
        return
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
            # The same compile vouches for the test file's code wherever else it is judged.
            _COMPILED.setdefault((path, rewritten), compiled[(path, rewritten)])
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
        rewritten = _rewritten(getattr(function, "__globals__", None))
        trusted = trusted_code(path, rewritten)
        match = trusted.get((getattr(code, "co_qualname", code.co_name), code.co_firstlineno)) if trusted else None
        return match is not None and _same_code(code, match)

    for item in session.items:
        path = os.path.realpath(str(getattr(item, "path", "")))
        if path not in _tests:
            continue
        module = getattr(item, "module", None)
        if trusted_code(path, module is not None and _rewritten(vars(module))) is None and path in changed:
            continue
        function = getattr(item, "obj", None)
        function = getattr(function, "__func__", function)
        code = getattr(function, "__code__", None)
        if code is None:
            continue
        # A test under a library's decorator (mock.patch, hypothesis.given) runs the library's
        # wrapper, which runs the test: the test's own code is the one held to its file. A
        # wrapper from the candidate's files counts only where the test file decorates the test
        # (the feature's own decorator applied to a test, as a type checker's suite does): not
        # for a test a loader or a swap wrapped.
        inner, seen, by_candidate = function, 0, 0
        while not matches(inner) and _wrapped(inner) is not None and seen < 16:
            wrapper_file = getattr(getattr(inner, "__code__", None), "co_filename", "")
            by_candidate += wrapper_file in _candidate or os.path.realpath(wrapper_file) in _candidate
            inner, seen = _wrapped(inner), seen + 1
            inner = getattr(inner, "__func__", inner)
        name = item.nodeid.rsplit("::", 1)[-1].split("[", 1)[0]
        if matches(inner) and by_candidate and not (
                os.path.realpath(inner.__code__.co_filename) in _tests and inner.__code__.co_name == name
                and by_candidate <= _wrapping_decorators(inner.__code__)):
            # The candidate's wrappers must lead to this test's own definition, and be no more
            # than the decorators its file applies there (marks apart).
            guard.note(f"{item.nodeid} runs under a wrapper from the candidate's files that its file does not apply")
        elif not matches(inner):
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
    if type(item) is not _ITEM_TYPES.get(item.nodeid, type(item)):
        guard.note(f"the class of {item.nodeid} changed after collection ({type(item).__qualname__})")


_guard_key = pytest.StashKey[_Guard]()
_CONFIG: list[pytest.Config] = []  # logfinish gets no config; the session's, once it starts


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Before any conftest, and so before any project code but a plugin's own, every hook
    implementation is pytest's or one of the image's plugins' that the scorer's ``-p`` loaded:
    they are trusted as registered (a later change to one is still found)."""
    for caller in list(vars(early_config.pluginmanager.hook).values()):
        for impl in getattr(caller, "get_hookimpls", list)():
            _TRUSTED_IMPLS[id(impl)] = impl  # pytest's own, and the image's plugins'
    _hold_early(getattr(plugin, "__name__", "") for plugin in early_config.pluginmanager.get_plugins()
                if _isinstance(plugin, types.ModuleType))



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


_load_trusted(only=__name__)  # the guard's own code, as loaded


def _own_namespaces() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """The guard's own module and taskforge's report plugin's, and their classes: what the findings
    and the outcome stream are written with (the plugin's held ``os.write``, the guard's ``note``).
    Each namespace, and a copy of it as it is now, complete."""
    found = []
    for name in (__name__, "taskforge_pytest_plugin"):
        module = sys.modules.get(name)
        if not _isinstance(module, types.ModuleType):
            continue
        spaces = [vars(module)] + [vars(v) for v in list(vars(module).values())
                                   if _isinstance(v, type) and v.__module__ == name]
        found += [(name, space, dict(space)) for space in spaces]
    return found


def _own_changed() -> list[str]:
    """Names of the guard's or the plugin's namespaces bound to another object since they loaded."""
    changed = []
    for name, space, start in _OWN:
        if len(space) == len(start) and all(space.get(key, start) is value for key, value in start.items()):
            continue
        changed += [f"{name}.{key}" for key in sorted(set(space) | set(start))
                    if key not in _OWN_VOLATILE and space.get(key, _OWN) is not start.get(key, _OWN)]
    return changed


_OWN_VOLATILE = frozenset({"__warningregistry__"})
"""What the interpreter itself adds to a module: the registry of the warnings its code issued (a
held-out project's gold patches were ``tampered`` by it)."""


_OWN = _own_namespaces()

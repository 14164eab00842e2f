"""Hide tests from a task's start state: delete the test functions that pytest node ids name.

``hide_tests(repo, nodeids)`` returns the new text of every file it changed, or ``None`` for a file
it deleted; it writes nothing. The caller applies the edits and computes the ``test_patch`` (the
diff that restores them) with git.

* ``tests/test_x.py::TestC::test_m[param]`` hides the whole function ``TestC.test_m``: pytest
  cannot run one parametrization without the others' code, so **every parametrization of a hidden
  function is hidden**, and the caller must treat all of them as hidden (FAIL_TO_PASS or left out),
  not only the ids it passed.
* A test is hidden by deleting it where it is defined, which may be another class and another
  file (a class imported into the module pytest collects is hidden where it is defined:
  ``tests/__main__.py::TestCache::test_x``, with ``from .test_cache import TestCache`` there): ``tests/test_lru.py::LRUCacheTest::test_update``, which ``LRUCacheTest`` inherits from
  ``CacheTestMixin`` in ``tests/__init__.py``, deletes ``CacheTestMixin.test_update`` and returns
  the new ``tests/__init__.py``. The definer is the first class of the id's class's method
  resolution order (C3, over the bases found in the repository) whose body defines the name. Base
  names are resolved through the file's own classes and its imports of the repository's modules,
  relative or absolute (``from . import X``, ``from tests.base import X as Y``, ``import tests.base
  as b`` with ``b.X``, re-exports and ``*`` imports followed); absolute ones are looked up from the
  file's pytest basedir (its first folder upwards without ``__init__.py``), the repository root and
  ``src/``. So **a hidden test is hidden in every class that inherits it**, in any file, and, as
  with parametrizations, the caller must treat every such copy as hidden.
* A class left without tests is deleted, unless other code names it (its own file a second time, or
  any other Python file of the repository: a base class, a mixin others import, a helper): then it
  stays, with ``pass`` if its body is empty. Nested classes likewise.
* A file left without tests (only imports, fixtures, helpers) is deleted, unless it is a
  ``conftest.py`` or an ``__init__.py``, defines a test that another file inherits, or another
  Python file of the repository imports it by name.
* Everything else keeps its bytes: only the deleted definitions (with their decorators and the
  comments and blank lines above them) go.

A text file of doctests (``--doctest-glob``: ``docs/usage.rst::usage.rst``) is one test, which
is hidden by deleting the file; ``test_patch`` brings it back whole. A doctest of a test file
(``tests/test_x.py::tests.test_x.Helper.make``, ``--doctest-modules`` collects those too) is
hidden by deleting the docstring that holds it, or with its file when a broken file goes whole.

A test that a factory function generates (``def make(kind): class _T(TestCase): def test_x...``,
bound with ``globals()["TestJson"] = _T``, which no reading of the source resolves) is found where
the interpreter defined its function in the baseline (``located``): its nested ``def`` is deleted,
so, as with parametrizations, it is hidden in every class the factory makes.

Node ids that cannot be hidden raise ``TaskforgeError(reason="unhideable_test")``: doctests of a
source module (``pkg/mod.py::pkg.mod.func``, the candidate's to write), other non-Python items, ids that name nothing
defined in the repository (data-driven tests, one function attached under many names; module-level tests imported from another file, tests
inherited from a base outside the repository such as an installed package), tests whose deletion
would let another definition of the name take its place (a class that overrides a base's test),
and tests defined in a file that is not test code (restoring them would land in the code patch,
not the ``test_patch``).

Limits: a test is a function or method whose name starts with ``test`` (pytest's default
``python_functions``); a class has tests if it defines some, nests a class that does, or inherits
from a base outside its file (which may bring tests). Custom ``python_functions`` patterns are not
read. Bases that cannot be resolved (outside the repository, or bound by an assignment or a call)
are taken to define no test of the name when a class of the repository does; if one does, the test
stays visible, which the caller sees. A subclass that overrides a hidden test and calls
``super()``'s is kept, and fails when run.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath
from typing import TypeVar

import libcst as cst

from taskforge.errors import TaskforgeError
from taskforge.mining.removal.cst import StatementRemover
from taskforge.repo.symbols import dotted_name, parse_source, read_source, render_module
from taskforge.repo.testdefs import find_function, function_span
from taskforge.repo.testdefs import parse_source as parse_python
from taskforge.repo.testfiles import DEFAULT_LAYOUT, TestLayout
from taskforge.task import is_doctest_id

__all__ = ["ClassIndex", "doctest_text_file", "hide_tests"]

UNHIDEABLE = "unhideable_test"

_Documented = TypeVar("_Documented", cst.Module, cst.FunctionDef, cst.ClassDef)

# Bases that bring no tests of their own.
_TESTLESS_BASES = frozenset({"object", "TestCase", "IsolatedAsyncioTestCase"})


def hide_tests(repo: Path, nodeids: Sequence[str], *, index: ClassIndex | None = None,
               broken: Sequence[str] = (), whole: Sequence[str] = (),
               located: Mapping[str, tuple[str, int, str]] | None = None) -> dict[str, str | None]:
    """Remove the tests ``nodeids`` name; return path -> new text (None: file deleted), by path.

    ``index``: the repository's :class:`ClassIndex` from an earlier call, so that a repository's
    candidates parse its test files once (the files must not have changed meanwhile).
    ``broken``: test files that no longer import (their module-level code, a class attribute
    say, uses what was removed): each is deleted whole, its tests with it, unless another file
    imports it or inherits its tests; then its tests are hidden one by one like the others.
    ``whole``: test files deleted whole whatever imports them (they still do not import with the
    tests hidden one by one, so neither does any file importing them).
    ``located``: node id → where the interpreter defined its function (``Baseline.definitions``),
    which finds a test generated in a factory function (:meth:`ClassIndex.definition`); a file
    holding such a definition stays, whatever tests are left in it that reading finds."""
    repo = Path(repo)
    if index is None or index.repo != repo:
        index = ClassIndex(repo)
    definitions: dict[str, set[tuple[str, ...]]] = {}  # file -> qualnames to delete there
    inherited_from: set[str] = set()  # files whose tests other files inherit
    whole_files: set[str] = set()  # text files of doctests, hidden whole
    wholes = {path for path in broken if (repo / path).is_file()
              and PurePosixPath(path).name not in ("conftest.py", "__init__.py") and not _imported_elsewhere(repo, path)}
    found: list[tuple[str, str, tuple[str, ...]]] = []  # (the id's file, where its definition is, qualname)
    generated: set[str] = set()  # files holding a generated test's definition, in a factory function
    doctest_ids: list[str] = []  # doctests of Python files
    for nodeid in nodeids:
        text_file = doctest_text_file(nodeid)
        if text_file is not None:
            if not (repo / text_file).is_file():
                raise TaskforgeError(f"{nodeid}: no file {text_file} in the repository", reason=UNHIDEABLE)
            whole_files.add(text_file)
            continue
        if is_doctest_id(nodeid):
            doctest_ids.append(nodeid)
            continue
        path, parts = _parse_nodeid(nodeid)
        if not (repo / path).is_file():
            raise TaskforgeError(f"{nodeid}: no file {path} in the repository", reason=UNHIDEABLE)
        where, qualname = index.definition(nodeid, path, parts, (located or {}).get(nodeid))
        if len(qualname) > 1 and qualname[:-1] not in index.module(where).classes:
            generated.add(where)  # nested in a function
        found.append((path, where, qualname))
    # A broken file goes whole unless other files' tests are defined in it (they would lose them).
    inherited = {where for path, where, _ in found if where != path}
    wholes -= inherited
    wholes |= {path for path in whole if (repo / path).is_file()
               and PurePosixPath(path).name not in ("conftest.py", "__init__.py")}
    whole_files |= wholes
    docstrings: dict[str, set[tuple[str, ...]]] = {}  # file -> owners of the doctests to delete there
    for nodeid in doctest_ids:
        path = PurePosixPath(nodeid.partition("::")[0]).as_posix()
        if path not in wholes:
            docstrings.setdefault(path, set()).add(index.doctest_owner(nodeid, path))
    for path, where, qualname in found:
        if path in wholes:
            continue
        definitions.setdefault(where, set()).add(qualname)
        if where != path:
            inherited_from.add(where)
    changes: dict[str, str | None] = {}
    for path in sorted(definitions.keys() | docstrings.keys()):
        module = index.module(path)
        hider = _Hider(definitions.get(path, set()), keep=partial(index.is_named, path), docstrings=docstrings.get(path, set()))
        new_tree = module.tree.visit(hider)
        name = PurePosixPath(path).name
        kept = name in ("conftest.py", "__init__.py") or path in inherited_from or path in generated
        if not kept and not _has_tests(new_tree) and not _imported_elsewhere(repo, path):
            changes[path] = None
        else:
            changes[path] = render_module(new_tree, module.text)
    for path in sorted(whole_files):
        changes[path] = None
    return dict(sorted(changes.items()))


def doctest_text_file(nodeid: str) -> str | None:
    """The file of a text file's doctests (``--doctest-glob``: ``docs/usage.rst::usage.rst``, one
    item for the whole file), which is hidden by deleting the file; None for any other id."""
    path, sep, rest = nodeid.partition("::")
    if sep and not path.endswith(".py") and rest == PurePosixPath(path).name:
        return PurePosixPath(path).as_posix()
    return None


def _parse_nodeid(nodeid: str) -> tuple[str, tuple[str, ...]]:
    path, sep, rest = nodeid.partition("::")
    if not path.endswith(".py") or not sep:
        raise TaskforgeError(f"{nodeid}: not a test function of a Python file", reason=UNHIDEABLE)
    # Parameters may hold anything, "::" included: cut them off before splitting.
    bracket = rest.find("[")
    if bracket != -1:
        rest = rest[:bracket]
    parts = tuple(rest.split("::"))
    if not all(part.isidentifier() for part in parts):
        raise TaskforgeError(f"{nodeid}: a doctest or other non-function item", reason=UNHIDEABLE)
    return PurePosixPath(path).as_posix(), parts


def _names_used_twice(text: str) -> set[str]:
    """Identifiers that occur more than once in the file (a class named elsewhere must stay)."""
    counts: dict[str, int] = {}
    for word in re.findall(r"[A-Za-z_]\w*", text):
        counts[word] = counts.get(word, 0) + 1
    return {word for word, count in counts.items() if count > 1}


class _Hider(StatementRemover):
    """Deletes the definitions ``targets`` names (qualnames in the file), and the classes left
    without tests that ``keep`` does not claim."""

    def __init__(self, targets: set[tuple[str, ...]], *, keep: Callable[[str], bool],
                 docstrings: set[tuple[str, ...]] = frozenset()) -> None:
        super().__init__()
        self.targets = targets
        self.keep = keep
        self.docstrings = docstrings  # qualnames whose docstring goes (``()``: the module's)
        self.stack: list[str] = []
        self.touched: list[bool] = []  # per open class: lost something
        self.classes: dict[str, cst.ClassDef] = {}  # updated module-level classes, by name

    def _removed(self, original: cst.CSTNode) -> cst.RemovalSentinel:
        if self.touched:
            self.touched[-1] = True
        return self.drop(original)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.stack.append(node.name.value)
        path = tuple(self.stack)  # a generated test's def is nested in its factory function
        return any(len(target) > len(path) and target[:len(path)] == path for target in self.targets)

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.FunctionDef | cst.RemovalSentinel:
        path = tuple(self.stack)
        self.stack.pop()
        if path in self.targets:
            return self._removed(original_node)
        return self._without_docstring(updated_node) if path in self.docstrings else updated_node

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        updated_node = super().leave_Module(original_node, updated_node)
        return self._without_docstring(updated_node) if () in self.docstrings else updated_node

    def _without_docstring(self, node: _Documented) -> _Documented:
        """``node`` without its docstring, tidied as a deleted statement's block is (a block left
        empty gets ``pass``; the blank lines after the docstring go with it)."""
        block = node if isinstance(node, cst.Module) else node.body
        if not isinstance(block, (cst.Module, cst.IndentedBlock)) or not block.body or not _is_docstring(block.body[0]):
            return node
        self.dropped.add(id(block.body[0]))
        rest = self._tidy(block.body, block.body[1:])
        if not rest and not isinstance(block, cst.Module):
            rest = [cst.SimpleStatementLine(body=[cst.Pass()])]
        block = block.with_changes(body=rest)
        return block if isinstance(node, cst.Module) else node.with_changes(body=block)

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.stack.append(node.name.value)
        self.touched.append(False)
        return True

    def leave_ClassDef(
        self, original_node: cst.ClassDef, updated_node: cst.ClassDef
    ) -> cst.ClassDef | cst.RemovalSentinel:
        path = tuple(self.stack)
        self.stack.pop()
        touched = self.touched.pop()
        if path in self.targets:
            return self._removed(original_node)
        if touched and not _class_has_tests(updated_node, self.classes) and not self.keep(path[-1]):
            return self._removed(original_node)
        if path in self.docstrings:
            updated_node = self._without_docstring(updated_node)
        if not self.stack:
            self.classes[path[-1]] = updated_node
        return updated_node


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr)
            and isinstance(statement.body[0].value, (cst.SimpleString, cst.ConcatenatedString)))


def _is_test_function(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.FunctionDef) and node.name.value.startswith("test")


def _class_has_tests(node: cst.ClassDef, classes: dict[str, cst.ClassDef], _seen: frozenset[str] = frozenset()) -> bool:
    for statement in _statements(node.body):
        if _is_test_function(statement):
            return True
        if isinstance(statement, cst.ClassDef) and _class_has_tests(statement, classes, _seen):
            return True
    for base in node.bases:
        name = dotted_name(base.value)
        if base.keyword is not None or name is None:
            continue
        simple = name.rpartition(".")[2]
        if simple in _TESTLESS_BASES or simple in _seen:
            continue
        if simple not in classes:
            return True  # defined elsewhere: it may bring tests
        if _class_has_tests(classes[simple], classes, _seen | {simple}):
            return True
    return False


def _statements(body: cst.BaseSuite) -> list[cst.CSTNode]:
    """The statements of a block, looking into ``if``/``try``/``with`` blocks (all branches), a
    block on its line (``if x: from a import B``) as one line of its statements."""
    if isinstance(body, cst.SimpleStatementSuite):
        return [cst.SimpleStatementLine(body=body.body)]
    if not isinstance(body, cst.IndentedBlock):
        return []
    out: list[cst.CSTNode] = []
    for statement in body.body:
        out.append(statement)
        if isinstance(statement, (cst.If, cst.Try, cst.With, cst.For, cst.While)):
            for block in _blocks(statement):
                out.extend(_statements(block))
    return out


def _blocks(statement: cst.CSTNode) -> list[cst.BaseSuite]:
    blocks = [statement.body]  # type: ignore[attr-defined]
    if isinstance(statement, cst.Try):
        blocks += [handler.body for handler in statement.handlers]
        blocks += [part.body for part in (statement.orelse, statement.finalbody) if part is not None]
    orelse = getattr(statement, "orelse", None)
    if isinstance(orelse, cst.If):
        blocks += _blocks(orelse)
    elif isinstance(orelse, cst.Else) and not isinstance(statement, cst.Try):
        blocks.append(orelse.body)
    return blocks


def _has_tests(tree: cst.Module) -> bool:
    classes = {s.name.value: s for s in tree.body if isinstance(s, cst.ClassDef)}
    module_block = cst.IndentedBlock(body=tree.body)
    for statement in _statements(module_block):
        if _is_test_function(statement):
            return True
        if isinstance(statement, cst.ClassDef) and _class_has_tests(statement, classes):
            return True
    return False


# --- where a test is defined ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _ClassRef:
    """A class of the repository: its file and its qualified name there."""

    path: str
    qualname: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.path}::{'::'.join(self.qualname)}"


@dataclass(frozen=True, slots=True)
class _ModuleRef:
    """A module of the repository: a ``.py`` file, or a folder without ``__init__.py``."""

    path: str


@dataclass(frozen=True, slots=True)
class _Import:
    """``import module`` (``name`` None: binds the module) or ``from module import name`` (``name``
    ``"*"``: a star import). ``level`` counts the leading dots of a relative import."""

    level: int
    module: str | None
    name: str | None


# What a statement binds a name to; None for anything not followed (a function, an assignment).
_Binding = _ClassRef | _Import | None


@dataclass(frozen=True, slots=True)
class _ClassInfo:
    order: int
    """Position of the ``class`` statement among the file's statements (bases see what precedes)."""
    bases: tuple[cst.BaseExpression, ...]
    """The base expressions, without keywords (``metaclass=``) and ``*args``."""
    members: frozenset[str]
    """Names of the functions and classes its body defines."""


@dataclass(frozen=True, slots=True)
class _Module:
    text: str
    tree: cst.Module
    classes: dict[tuple[str, ...], _ClassInfo]
    """Every class outside functions, by qualname."""
    bindings: dict[tuple[str, ...], list[tuple[int, str, _Binding]]]
    """Per scope (``()``: the module; else a class body), ``(order, name, binding)`` in source order;
    star imports bind the name ``"*"``."""
    top: frozenset[str]
    """Names of the functions and classes defined at module level."""


class ClassIndex:
    """The repository's Python files, parsed on demand, and their classes' bases resolved through
    the files' imports (see the module docstring)."""

    def __init__(self, repo: Path, *, layout: TestLayout = DEFAULT_LAYOUT) -> None:
        """``layout``: which files are tests (the project's pytest configuration)."""
        self.repo = repo
        self.layout = layout
        self._modules: dict[str, _Module] = {}
        self._mros: dict[_ClassRef, tuple[_ClassRef | str, ...]] = {}
        self._names_twice: dict[str, set[str]] = {}
        self._words: dict[str, frozenset[str]] | None = None  # every Python file's identifiers

    def module(self, path: str) -> _Module:
        if path not in self._modules:
            text = read_source(self.repo / path, path)
            tree = parse_source(text, path)
            self._modules[path] = _scan_module(path, text, tree)
        return self._modules[path]

    def definition(self, nodeid: str, path: str, parts: tuple[str, ...],
                   location: tuple[str, int, str] | None = None) -> tuple[str, tuple[str, ...]]:
        """Where the function ``parts`` names in ``path`` is defined: (file, qualname there).

        ``location``: where the interpreter defined the test's function in the baseline
        (``Baseline.definitions``), for a test that reading the source does not find."""
        module = self.module(path)
        owner, name = parts[:-1], parts[-1]
        if not owner:
            if name not in module.top:
                return self._generated(nodeid, location, f"{nodeid}: {name} is not defined in {path} (generated or imported?)")
            return path, parts
        cls = _ClassRef(path, owner) if owner in module.classes else self._imported_class(path, owner)
        if cls is None:
            return self._generated(nodeid, location,
                                   f"{nodeid}: no class {'::'.join(owner)} in {path}, nor imported into it from the repository")
        mro = self.mro(cls)
        definers = [c for c in mro if isinstance(c, _ClassRef) and name in self._members(c)]
        if not definers:
            outside = [c for c in mro if isinstance(c, str)]
            where = f"; its bases outside the repository: {', '.join(outside)}" if outside else ""
            raise _unhideable(f"{nodeid}: {name} is defined in no class of the repository it inherits from{where}")
        definer, *shadowed = definers
        if shadowed:
            raise _unhideable(f"{nodeid}: deleting {definer}::{name} would let {shadowed[0]}::{name} take its place")
        if definer.path != path and not self.layout.is_test_file(definer.path):
            raise _unhideable(f"{nodeid}: inherited from {definer}, which is not test code")
        return definer.path, (*definer.qualname, name)

    def _generated(self, nodeid: str, location: tuple[str, int, str] | None, why: str) -> tuple[str, tuple[str, ...]]:
        """A generated test's definition: the ``def`` its function came from, nested in a factory
        function (lark's ``_make_parser_test(LEXER, PARSER)`` defines ``class _TestParser`` with its
        tests and binds it under a new name with ``globals()[name] = _TestParser``). Deleting that
        ``def`` hides the test in every class the factory makes, as deleting a parametrized
        function hides all its parametrizations. Only a ``def test...`` of a test file, defined once
        under its qualname, at the line the interpreter saw: a function made once and attached
        under many test names (data-driven cases, ``setattr(cls, "test_" + case, method)``) is not
        a test's own code, and stays ``unhideable_test``."""
        if location is None:
            raise _unhideable(why)
        path, line, qualname = location
        parts = tuple(part for part in qualname.split(".") if part != "<locals>")
        if not parts or not parts[-1].startswith("test"):
            raise _unhideable(f"{why}; the interpreter ran {qualname} of {path}, which is not a test function of its own")
        if not (self.repo / path).is_file() or not self.layout.is_test_file(path):
            raise _unhideable(f"{why}; the interpreter ran {qualname} of {path}, which is not test code")
        function = find_function(parse_python(self.module(path).text), parts[:-1], parts[-1])
        if function is None or line not in (function.lineno, function_span(function)[0]):
            raise _unhideable(f"{why}; {qualname} is not defined once at line {line} of {path}")
        return path, parts

    def _imported_class(self, path: str, owner: tuple[str, ...]) -> _ClassRef | None:
        """The class of the repository that ``owner`` names in ``path`` once the file has run, when
        the file imports it (an aggregating module that pytest collects, ``from .test_cache import
        TestCache``, with ``python_files = "__main__.py"``): its tests are defined, and hidden, there."""
        found = self._lookup(path, (), owner[0], None, frozenset())
        for attribute in owner[1:]:
            found = self._member(found, attribute, frozenset())
        return found if isinstance(found, _ClassRef) else None

    def import_path(self, nodeid: str, location: tuple[str, int, str] | None = None) -> frozenset[str]:
        """The files the class or function of ``nodeid`` comes through into the module pytest
        collects it from: empty when that module defines it; ``tests/test_words.py`` for ``from
        .test_words import TestWords``; ``tests/suites.py`` and ``tests/test_words.py`` when it
        comes by way of a module that imports it in turn (by name or ``*``). Every binding of the
        name counts (both branches of an ``if``, a ``try`` and its fallback). A name no reading
        resolves (a class a factory made, listed by a ``*`` import) comes from where the
        interpreter defined the test (``location``)."""
        path, parts = _parse_nodeid(nodeid)
        found = self._providers(path, parts[0], frozenset())
        if found is None:
            return frozenset({location[0]} if location and location[0] != path else ())
        return frozenset(found)

    def _providers(self, path: str, name: str, seen: frozenset[tuple[str, str]]) -> set[str] | None:
        """The files ``name`` of module ``path`` is imported through (empty: defined there), or
        None when no statement of ``path`` binds it that reading follows."""
        if (path, name) in seen:
            return set()
        seen |= {(path, name)}
        module = self.module(path)
        if name in module.top:
            return set()
        bindings = module.bindings.get((), [])
        named = [binding for _, bound, binding in bindings if bound == name]
        if named:
            out: set[str] = set()
            for binding in named:
                if not isinstance(binding, _Import) or binding.name is None:
                    continue  # an assignment of its own, or a module bound whole
                source = self.imported_file(path, binding.level, binding.module, binding.name)
                if source is None:
                    continue
                out.add(source)
                if source.endswith(".py") and PurePosixPath(source).stem != binding.name:
                    out |= self._providers(source, binding.name, seen) or set()
            return out
        out = set()
        for _, bound, binding in bindings:
            if bound != "*" or not isinstance(binding, _Import):
                continue
            source = self.imported_file(path, binding.level, binding.module)
            if source is None or not source.endswith(".py"):
                continue
            further = self._providers(source, name, seen)
            if further is not None:
                out |= {source} | further
        return out or None

    def imported_file(self, path: str, level: int, module: str | None, name: str | None = None) -> str | None:
        """The repository file an import statement of ``path`` loads: ``import module``, or
        ``from module import name`` (the submodule ``name`` when the package has one and does not
        bind it: ``from . import test_words``), with ``level`` leading dots; None when it is not in
        the repository."""
        ref = self._module_ref(path, level, module)
        if ref is None:
            return None
        found = PurePosixPath(ref.path)
        folder = found.parent if found.name == "__init__.py" else found if found.suffix != ".py" else None
        if folder is not None and name not in (None, "*"):
            binds = found.suffix == ".py" and any(bound == name for _, bound, _ in self.module(ref.path).bindings.get((), []))
            submodule = None if binds else self._module_at([folder], [name])
            if submodule is not None:
                return submodule.path
        return ref.path

    def doctest_owner(self, nodeid: str, path: str) -> tuple[str, ...]:
        """The qualname in ``path`` whose docstring holds the doctest ``nodeid`` names (``()``: the
        module's). Only a test file's doctests can be hidden: a source module's are the candidate's
        to write."""
        if not self.layout.is_test_file(path):
            raise _unhideable(f"{nodeid}: a doctest of {path}, which is not test code")
        name = nodeid.partition("::")[2].split("[", 1)[0]
        definitions = _definitions(self.module(path).tree)
        owners = sorted((q for q in definitions if f".{name}".endswith("." + ".".join(q))), key=len, reverse=True)
        stem = PurePosixPath(path).stem
        if name.rpartition(".")[2] == (PurePosixPath(path).parent.name if stem == "__init__" else stem):
            owners.append(())
        for owner in owners:
            if ">>>" in (definitions[owner] or ""):
                return owner
        raise _unhideable(f"{nodeid}: no docstring of {path} holds this doctest")

    def _members(self, cls: _ClassRef) -> frozenset[str]:
        return self.module(cls.path).classes[cls.qualname].members

    def is_named(self, path: str, name: str) -> bool:
        """Whether code other than its definition names ``name``: twice in ``path``, or in any
        other Python file of the repository."""
        if path not in self._names_twice:
            self._names_twice[path] = _names_used_twice(self.module(path).text)
        if name in self._names_twice[path]:
            return True
        if self._words is None:
            self._words = {
                rel: frozenset(re.findall(r"[A-Za-z_]\w*", (self.repo / rel).read_text(errors="replace")))
                for rel in _python_files(self.repo)
            }
        return any(name in words for rel, words in self._words.items() if rel != path)

    def mro(self, cls: _ClassRef) -> tuple[_ClassRef | str, ...]:
        """``cls`` and its ancestors in method resolution order; a base that is not a class of the
        repository is a string (its expression), without ancestors."""
        if cls not in self._mros:
            self._mros[cls] = (cls,)  # a cycle (an error at import time) ends here
            bases = self._bases(cls)
            lines = [list(self.mro(base)) if isinstance(base, _ClassRef) else [base] for base in bases]
            merged = _c3_merge([*lines, list(bases)])
            if merged is None:  # inconsistent (a TypeError at import time): depth-first then
                merged = list(dict.fromkeys(c for line in lines for c in line))
            self._mros[cls] = (cls, *merged)
        return self._mros[cls]

    def _bases(self, cls: _ClassRef) -> list[_ClassRef | str]:
        info = self.module(cls.path).classes[cls.qualname]
        out: list[_ClassRef | str] = []
        for expression in info.bases:
            name = dotted_name(expression)
            found = self._resolve(cls.path, cls.qualname[:-1], name, info.order) if name else None
            out.append(found if isinstance(found, _ClassRef) else cst.Module(body=[]).code_for_node(expression))
        return out

    def _resolve(self, path: str, scope: tuple[str, ...], dotted: str, before: int) -> _ClassRef | _ModuleRef | None:
        """What ``a.b.c`` means in a scope of ``path``, just before statement ``before`` runs."""
        head, *attributes = dotted.split(".")
        found = self._lookup(path, scope, head, before, frozenset())
        for attribute in attributes:
            found = self._member(found, attribute, frozenset())
        return found

    def _lookup(
        self, path: str, scope: tuple[str, ...], name: str, before: int | None, seen: frozenset[tuple[str, str]]
    ) -> _ClassRef | _ModuleRef | None:
        """What ``name`` is bound to in a scope of ``path``: its last binding before statement
        ``before`` (None: after the whole file ran). A class body falls back to the module's."""
        for order, bound, binding in reversed(self.module(path).bindings.get(scope, [])):
            if before is not None and order >= before:
                continue
            if bound == name:
                return self._follow(path, binding, seen)
            if bound == "*" and isinstance(binding, _Import):
                found = self._member(self._module_ref(path, binding.level, binding.module), name, seen)
                if found is not None:
                    return found
        return self._lookup(path, (), name, before, seen) if scope else None

    def _follow(self, path: str, binding: _Binding, seen: frozenset[tuple[str, str]]) -> _ClassRef | _ModuleRef | None:
        if not isinstance(binding, _Import):
            return binding
        module = self._module_ref(path, binding.level, binding.module)
        return module if binding.name is None else self._member(module, binding.name, seen)

    def _member(
        self, owner: _ClassRef | _ModuleRef | None, name: str, seen: frozenset[tuple[str, str]]
    ) -> _ClassRef | _ModuleRef | None:
        """``owner.name``: a nested class, a module's binding, or a package's submodule."""
        if isinstance(owner, _ClassRef):
            nested = (*owner.qualname, name)
            return _ClassRef(owner.path, nested) if nested in self.module(owner.path).classes else None
        if owner is None or (owner.path, name) in seen:  # an import cycle binds nothing
            return None
        module = PurePosixPath(owner.path)
        if module.suffix != ".py":  # a folder without __init__.py: only submodules
            return self._module_at([module], [name])
        found = self._lookup(owner.path, (), name, None, seen | {(owner.path, name)})
        if found is None and module.name == "__init__.py":
            found = self._module_at([module.parent], [name])
        return found

    def _module_ref(self, path: str, level: int, module: str | None) -> _ModuleRef | None:
        """The module an import in ``path`` names, if it is in the repository."""
        parts = module.split(".") if module else []
        if not level:
            return self._module_at(self._import_roots(path), parts)
        base = PurePosixPath(path).parent
        for _ in range(level - 1):
            if base == PurePosixPath("."):
                return None  # climbs out of the repository
            base = base.parent
        return self._module_at([base], parts)

    def _import_roots(self, path: str) -> list[PurePosixPath]:
        """Where absolute imports in ``path`` are looked for: its pytest basedir (the folder pytest
        puts on ``sys.path`` for it), the repository root, ``src/``."""
        basedir = PurePosixPath(path).parent
        while basedir != PurePosixPath(".") and (self.repo / basedir / "__init__.py").is_file():
            basedir = basedir.parent
        return list(dict.fromkeys([basedir, PurePosixPath("."), PurePosixPath("src")]))

    def _module_at(self, roots: Sequence[PurePosixPath], parts: Sequence[str]) -> _ModuleRef | None:
        """The module ``parts`` names under the first root that has it. As in Python's import system,
        a package or ``.py`` module under any root beats a folder without ``__init__.py``."""
        targets = [root.joinpath(*parts) for root in roots]
        for target in targets:
            candidates = [target / "__init__.py", *([target.with_name(f"{target.name}.py")] if parts else [])]
            for candidate in candidates:
                if (self.repo / candidate).is_file():
                    return _ModuleRef(candidate.as_posix())
        for target in targets:
            if (self.repo / target).is_dir():
                return _ModuleRef(target.as_posix())
        return None


def _definitions(tree: cst.Module) -> dict[tuple[str, ...], str | None]:
    """The docstrings of a module (qualname ``()``) and of its functions and classes outside
    function bodies (a doctest finder's reach: classes and their methods), by qualname."""
    out: dict[tuple[str, ...], str | None] = {(): tree.get_docstring(clean=False)}

    def walk(body: cst.BaseSuite, scope: tuple[str, ...]) -> None:
        for statement in _statements(body):
            if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
                qualname = (*scope, statement.name.value)
                out[qualname] = statement.get_docstring(clean=False)
                if isinstance(statement, cst.ClassDef):
                    walk(statement.body, qualname)

    walk(cst.IndentedBlock(body=tree.body), ())
    return out


def _unhideable(message: str) -> TaskforgeError:
    return TaskforgeError(message, reason=UNHIDEABLE)


def _scan_module(path: str, text: str, tree: cst.Module) -> _Module:
    classes: dict[tuple[str, ...], _ClassInfo] = {}
    bindings: dict[tuple[str, ...], list[tuple[int, str, _Binding]]] = {}
    orders = itertools.count()

    def scan(body: cst.BaseSuite, scope: tuple[str, ...]) -> None:
        entries = bindings.setdefault(scope, [])
        for statement in _statements(body):
            order = next(orders)
            entries += [(order, name, binding) for name, binding in _bound_by(statement, path, scope)]
            if isinstance(statement, cst.ClassDef):
                qualname = (*scope, statement.name.value)
                members = frozenset(
                    s.name.value for s in _statements(statement.body) if isinstance(s, (cst.FunctionDef, cst.ClassDef))
                )
                bases = tuple(arg.value for arg in statement.bases if arg.keyword is None and not arg.star)
                classes[qualname] = _ClassInfo(order=order, bases=bases, members=members)
                scan(statement.body, qualname)

    scan(cst.IndentedBlock(body=tree.body), ())
    module_block = cst.IndentedBlock(body=tree.body)
    top = frozenset(s.name.value for s in _statements(module_block) if isinstance(s, (cst.FunctionDef, cst.ClassDef)))
    return _Module(text=text, tree=tree, classes=classes, bindings=bindings, top=top)


def _bound_by(statement: cst.CSTNode, path: str, scope: tuple[str, ...]) -> Iterator[tuple[str, _Binding]]:
    """The names a statement binds, and to what."""
    if isinstance(statement, cst.ClassDef):
        yield statement.name.value, _ClassRef(path, (*scope, statement.name.value))
    elif isinstance(statement, cst.FunctionDef):
        yield statement.name.value, None
    elif isinstance(statement, cst.SimpleStatementLine):
        for small in statement.body:
            yield from _bound_by_small(small)


def _bound_by_small(small: cst.BaseSmallStatement) -> Iterator[tuple[str, _Binding]]:
    if isinstance(small, cst.Import):
        for alias in small.names:
            module = dotted_name(alias.name)
            if module is None:
                continue
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                yield alias.asname.name.value, _Import(0, module, None)
            else:  # ``import a.b`` binds ``a``
                head = module.partition(".")[0]
                yield head, _Import(0, head, None)
    elif isinstance(small, cst.ImportFrom):
        level = len(small.relative)
        module = dotted_name(small.module) if small.module is not None else None
        if isinstance(small.names, cst.ImportStar):
            yield "*", _Import(level, module, "*")
            return
        for alias in small.names:
            name = dotted_name(alias.name)
            bound = alias.asname.name if alias.asname is not None else alias.name
            if name is not None and isinstance(bound, cst.Name):
                yield bound.value, _Import(level, module, name)
    elif isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
        targets = [t.target for t in small.targets] if isinstance(small, cst.Assign) else [small.target]
        bound_now = not isinstance(small, cst.AnnAssign) or small.value is not None
        for target in targets:
            if isinstance(target, cst.Name) and bound_now:
                yield target.value, None


def _c3_merge(lines: list[list[_ClassRef | str]]) -> list[_ClassRef | str] | None:
    """C3 linearization's merge of the bases' MROs and the bases; None if they are inconsistent."""
    lines = [line for line in lines if line]
    out: list[_ClassRef | str] = []
    while lines:
        head = next((line[0] for line in lines if not any(line[0] in other[1:] for other in lines)), None)
        if head is None:
            return None
        out.append(head)
        lines = [rest for line in lines if (rest := line[1:] if line[0] == head else line)]
    return out


def _python_files(repo: Path) -> list[str]:
    """The repository's Python files, repo-relative, outside ``.git``."""
    return [
        rel.as_posix()
        for path in sorted(repo.rglob("*.py"))
        if (rel := path.relative_to(repo)).parts[0] != ".git"
    ]


def _imported_elsewhere(repo: Path, path: str) -> bool:
    """Whether another Python file of the repository imports this module by name."""
    stem = re.escape(PurePosixPath(path).stem)
    pattern = re.compile(
        rf"^\s*(?:from\s+[\w.]*\b{stem}\b\s+import\b|from\s+[\w.]+\s+import\s+.*\b{stem}\b|import\s+.*\b{stem}\b)",
        re.M,
    )
    return any(
        pattern.search((repo / rel).read_text(errors="replace")) for rel in _python_files(repo) if rel != path
    )

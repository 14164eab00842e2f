"""Where a hidden test's function is written, read from the task's files alone (``ast``, on the host).

Canaries (``taskforge.repo.canaries``) twin a test where its function is defined: in the class the
id names, in a base class of the same file, in the file that defines a class an aggregating module
imports (``from .test_cache import TestCache`` in a collected ``tests/__main__.py``), or, for a
test a factory function generates (``def make(kind): class _T(TestCase): def test_x...``, bound
with ``globals()[name] = _T``), in the factory: the one ``def`` of that name nested in a function
of a hidden file that the start state no longer has. A *class path* is the names from the module
down to the function's owner; it may pass through functions (``("make", "_T")``).
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import PurePosixPath

__all__ = ["find_function", "function_span", "locate_tests", "parse_source", "split_id"]

_PARSE_LOCK = threading.Lock()

Function = ast.FunctionDef | ast.AsyncFunctionDef


def parse_source(source: str | bytes) -> ast.Module:
    """``ast.parse``, one thread at a time in the whole process: CPython 3.11 keeps the AST
    builder's recursion depth in interpreter-wide state, and two threads parsing at once (the
    scorer lints candidates and places twins in its worker threads) fail with ``SystemError: AST
    constructor recursion depth mismatch``."""
    with _PARSE_LOCK:
        return ast.parse(source)


def split_id(nodeid: str) -> tuple[str, tuple[str, ...], str] | None:
    """``(file, classes, function)`` of a plain (not parametrized, not doctest) test id."""
    if "[" in nodeid or "::" not in nodeid:
        return None
    file, *rest = nodeid.split("::")
    if not file.endswith(".py") or not rest or any(not part.isidentifier() for part in rest):
        return None
    return file, tuple(rest[:-1]), rest[-1]


def _owner_body(tree: ast.Module, path: Sequence[str]) -> list[ast.stmt] | None:
    """The body of the class path ``path``: at each step the one class of that name, or, where
    there is none, the one function (a factory's nested class)."""
    body: list[ast.stmt] = tree.body
    for part in path:
        found: list[ast.ClassDef | Function] = [n for n in body if isinstance(n, ast.ClassDef) and n.name == part]
        if not found:
            found = [n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == part]
        if len(found) != 1:
            return None
        body = found[0].body
    return body


def find_function(tree: ast.Module, classes: Sequence[str], name: str) -> Function | None:
    """The one function ``name`` in the class path ``classes``, or None."""
    body = _owner_body(tree, classes)
    functions = [n for n in body or () if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name]
    return functions[0] if len(functions) == 1 else None


def function_span(function: Function) -> tuple[int, int]:
    """First and last line (1-based, inclusive) of a function with its decorators."""
    first = min([function.lineno, *(d.lineno for d in function.decorator_list)])
    assert function.end_lineno is not None
    return first, function.end_lineno


def _defining(tree: ast.Module, classes: Sequence[str], name: str, depth: int = 0) -> tuple[str, ...] | None:
    """The class path that defines the method ``name`` a test id names under ``classes``: the
    class itself, or one of its bases defined at module level in the same file."""
    if find_function(tree, classes, name) is not None:
        return tuple(classes)
    if not classes or depth > 8:
        return None
    body: list[ast.stmt] = tree.body
    node: ast.ClassDef | None = None
    for cls in classes:
        found = [n for n in body if isinstance(n, ast.ClassDef) and n.name == cls]
        if len(found) != 1:
            return None
        node = found[0]
        body = node.body
    assert node is not None
    for base in node.bases:
        if isinstance(base, ast.Name):
            found_in = _defining(tree, (base.id,), name, depth + 1)
            if found_in is not None:
                return found_in
    return None


def _imports_from(text: str | None, file: str, name: str, definer: str) -> bool:
    """Whether the module ``file`` (its source ``text``) imports ``name``, under that name or by
    ``*``, from the module of the repository file ``definer``."""
    try:
        tree = parse_source(text) if text else None
    except SyntaxError:
        return False
    target = PurePosixPath(definer)
    target = target.parent if target.name == "__init__.py" else target.with_suffix("")
    for node in tree.body if tree is not None else ():
        if not isinstance(node, ast.ImportFrom) or not any(
                alias.name == "*" or (alias.name == name and alias.asname in (None, name)) for alias in node.names):
            continue
        parts = tuple(node.module.split(".")) if node.module else ()
        if node.level:
            ups = PurePosixPath(file).parents
            if node.level <= len(ups) and ups[node.level - 1].joinpath(*parts) == target:
                return True
        elif parts and target.parts[-len(parts):] == parts:
            return True
    return False


def _nested_functions(tree: ast.Module) -> Iterator[tuple[tuple[str, ...], str]]:
    """(class path, name) of every function defined inside another function, at any depth."""

    def walk(body: list[ast.stmt], path: tuple[str, ...], in_function: bool) -> Iterator[tuple[tuple[str, ...], str]]:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                if in_function:
                    yield path, node.name
                yield from walk(node.body, (*path, node.name), True)
            elif isinstance(node, ast.ClassDef):
                yield from walk(node.body, (*path, node.name), in_function)

    yield from walk(tree.body, (), False)


def _generated(trees: Mapping[str, ast.Module | None], read: Callable[[str], str | None], file: str,
               text: str | None, cls: str, name: str) -> tuple[str, tuple[str, ...]] | None:
    """Where a generated test's function is written: the one ``def name`` nested in a function
    of a hidden file (the id's own, or one that it imports the class ``cls`` from, by name or
    ``*``) that the start state lacks."""
    found: list[tuple[str, tuple[str, ...]]] = []
    for other, tree in sorted(trees.items()):
        if tree is None:
            continue
        start = read(other)
        try:
            start_tree = parse_source(start) if start else None
        except SyntaxError:
            start_tree = None
        for path, function in _nested_functions(tree):
            if function == name and (start_tree is None or find_function(start_tree, path, name) is None):
                found.append((other, path))
    if len(found) != 1:
        return None
    definer = found[0][0]
    if definer != file and not _imports_from(text, file, cls, definer):
        return None
    return found[0]


def locate_tests(hidden: Mapping[str, str | None], nodeids: Iterable[str], *,
                 read: Callable[[str], str | None] | None = None
                 ) -> tuple[dict[tuple[str, tuple[str, ...], str], list[str]], set[str]]:
    """The hidden test functions ``nodeids`` run: (file, class path, name) → the ids that run it;
    and the names of the functions some id runs from a class this cannot place (a base imported
    from another module), which get no twin. ``hidden``: the hidden files, path → text; ``read``:
    a start-state file's text."""
    trees: dict[str, ast.Module | None] = {}

    def tree_of(file: str) -> ast.Module | None:
        if file not in trees:
            text = hidden.get(file) if file.endswith(".py") else None
            try:
                trees[file] = parse_source(text) if text else None
            except SyntaxError:
                trees[file] = None
        return trees[file]

    for file in hidden:
        tree_of(file)
    groups: dict[tuple[str, tuple[str, ...], str], list[str]] = {}
    elsewhere: set[str] = set()
    for nodeid in nodeids:
        parts = split_id(nodeid)
        if parts is None:
            continue
        file, classes, name = parts
        tree = tree_of(file)
        defining = _defining(tree, classes, name) if tree is not None else None
        if defining is None and classes and read is not None and not any(
                isinstance(n, ast.ClassDef) and n.name == classes[0] for n in (tree.body if tree else ())):
            # A class the collected module imports (``from .test_cache import TestCache`` in an
            # aggregating ``tests/__main__.py``): defined, and hidden, in another file. Only where
            # one hidden file defines it and the module imports it from there (by name or ``*``);
            # calibration drops a twin that does not run as the test all the same.
            text = read(file) if tree is None else hidden.get(file)
            definers = [other for other in sorted(hidden) if other != file and (other_tree := tree_of(other)) is not None
                        and find_function(other_tree, classes, name) is not None]
            if len(definers) == 1 and _imports_from(text, file, classes[0], definers[0]):
                file, defining = definers[0], tuple(classes)
            elif not definers:  # made by a factory function, nested in it
                found = _generated(trees, read, file, text, classes[0], name)
                if found is not None:
                    file, defining = found
        if defining is not None:
            groups.setdefault((file, defining, name), []).append(nodeid)
        elif classes:
            elsewhere.add(name)
    return groups, elsewhere

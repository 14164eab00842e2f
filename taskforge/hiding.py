"""Hide tests from a task's start state: delete the test functions that pytest node ids name.

``hide_tests(repo, nodeids)`` returns the new text of every test file it changed, or ``None`` for a
file it deleted; it writes nothing. The caller applies the edits and computes the ``test_patch``
(the diff that restores them) with git.

* ``tests/test_x.py::TestC::test_m[param]`` hides the whole function ``TestC.test_m``: pytest
  cannot run one parametrization without the others' code, so **every parametrization of a hidden
  function is hidden**, and the caller must treat all of them as hidden (FAIL_TO_PASS or left out),
  not only the ids it passed. Nothing else is returned.
* A class left without tests is deleted, unless other code in its file names it (a base class, a
  helper): then it stays, with ``pass`` if its body is empty. Nested classes likewise.
* A file left without tests (only imports, fixtures, helpers) is deleted, unless it is a
  ``conftest.py`` or another Python file of the repository imports it by name.
* Everything else keeps its bytes: only the deleted definitions (with their decorators and the
  comments and blank lines above them) go.

Node ids that cannot be hidden raise ``TaskforgeError(reason="unhideable_test")``: doctests
(``pkg/mod.py::pkg.mod.func``), non-Python items (``README.md::...``), ids that name nothing defined
in the file (generated tests, tests inherited from another file), and any id whose hiding would
hide more than was asked: an inherited test is hidden by deleting it from the class that defines
it, so every class in the file that inherits it must be in the ids too.

Limits: a test is a function or method whose name starts with ``test`` (pytest's default
``python_functions``); a class has tests if it defines some, nests a class that does, or inherits
from a base outside its file (which may bring tests). Custom ``python_functions`` patterns are not
read. Tests in other files that inherit from a class whose test is hidden are not looked for.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import libcst as cst

from taskforge.errors import TaskforgeError
from taskforge.removal import StatementRemover
from taskforge.symbols import dotted_name, parse_source, read_source, render_module

__all__ = ["hide_tests"]

UNHIDEABLE = "unhideable_test"

# Bases that bring no tests of their own.
_TESTLESS_BASES = frozenset({"object", "TestCase", "IsolatedAsyncioTestCase"})


def hide_tests(repo: Path, nodeids: Sequence[str]) -> dict[str, str | None]:
    """Remove the tests ``nodeids`` name; return path -> new text (None: file deleted), by path."""
    repo = Path(repo)
    targets: dict[str, set[tuple[str, ...]]] = {}
    for nodeid in nodeids:
        path, parts = _parse_nodeid(nodeid)
        if not (repo / path).is_file():
            raise TaskforgeError(f"{nodeid}: no file {path} in the repository", reason=UNHIDEABLE)
        targets.setdefault(path, set()).add(parts)
    changes: dict[str, str | None] = {}
    for path in sorted(targets):
        text = read_source(repo / path, path)
        tree = parse_source(text, path)
        covered = _inherited(tree, targets[path], path)
        hider = _Hider(targets[path] - covered, referenced=_names_used_twice(text))
        new_tree = tree.visit(hider)
        missing = sorted(targets[path] - covered - hider.found)
        if missing:
            shown = ", ".join("::".join(parts) for parts in missing)
            raise TaskforgeError(f"{path}: {shown} not defined there (inherited or generated?)", reason=UNHIDEABLE)
        name = PurePosixPath(path).name
        if name != "conftest.py" and not _has_tests(new_tree) and not _imported_elsewhere(repo, path):
            changes[path] = None
        else:
            changes[path] = render_module(new_tree, text)
    return changes


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
    def __init__(self, targets: set[tuple[str, ...]], *, referenced: set[str]) -> None:
        super().__init__()
        self.targets = targets
        self.referenced = referenced
        self.found: set[tuple[str, ...]] = set()
        self.stack: list[str] = []
        self.touched: list[bool] = []  # per open class: lost something
        self.classes: dict[str, cst.ClassDef] = {}  # updated module-level classes, by name

    def _removed(self, original: cst.CSTNode) -> cst.RemovalSentinel:
        if self.touched:
            self.touched[-1] = True
        return self.drop(original)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.stack.append(node.name.value)
        return False  # tests are never nested in functions

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.FunctionDef | cst.RemovalSentinel:
        path = tuple(self.stack)
        self.stack.pop()
        if path in self.targets:
            self.found.add(path)
            return self._removed(original_node)
        return updated_node

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
            self.found.add(path)
            return self._removed(original_node)
        if touched and not _class_has_tests(updated_node, self.classes) and path[-1] not in self.referenced:
            return self._removed(original_node)
        if not self.stack:
            self.classes[path[-1]] = updated_node
        return updated_node



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
    """The statements of a block, looking into ``if``/``try``/``with`` blocks (all branches)."""
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


def _inherited(tree: cst.Module, targets: set[tuple[str, ...]], path: str) -> set[tuple[str, ...]]:
    """The targets that are inherited copies of another target (hidden with it); raises if hiding a
    target would hide an inherited copy that was not asked for, or if an inherited one's
    definition is not hidden too."""
    classes: dict[tuple[str, ...], tuple[set[str], set[str]]] = {}  # path -> (base names, own methods)

    def collect(body: cst.BaseSuite, prefix: tuple[str, ...]) -> None:
        for statement in _statements(body):
            if isinstance(statement, cst.ClassDef):
                here = (*prefix, statement.name.value)
                bases = {n.rpartition(".")[2] for b in statement.bases if (n := dotted_name(b.value)) is not None}
                methods = {s.name.value for s in _statements(statement.body) if isinstance(s, cst.FunctionDef)}
                classes[here] = (bases, methods)
                collect(statement.body, here)

    collect(cst.IndentedBlock(body=tree.body), ())
    by_name: dict[str, list[tuple[str, ...]]] = {}
    for class_path in classes:
        by_name.setdefault(class_path[-1], []).append(class_path)

    def ancestors(class_path: tuple[str, ...], seen: frozenset[str] = frozenset()) -> list[tuple[str, ...]]:
        out: list[tuple[str, ...]] = []
        for base in sorted(classes[class_path][0] - seen):
            for base_path in by_name.get(base, ()):
                out += [base_path, *ancestors(base_path, seen | {base})]
        return out

    covered: set[tuple[str, ...]] = set()
    for target in sorted(targets):
        owner, method = target[:-1], target[-1]
        if owner not in classes:
            continue
        if method not in classes[owner][1]:
            # Inherited: hideable only with the definition it inherits (the first ancestor's).
            definer = next((a for a in ancestors(owner) if method in classes[a][1]), None)
            if definer is not None and (*definer, method) in targets:
                covered.add(target)
            elif definer is not None:
                raise TaskforgeError(
                    f"{path}::{'::'.join(target)} is inherited from {'::'.join(definer)}", reason=UNHIDEABLE
                )
            continue
        for class_path, (_, methods) in sorted(classes.items()):
            if owner in ancestors(class_path) and method not in methods and (*class_path, method) not in targets:
                raise TaskforgeError(
                    f"{path}::{'::'.join(target)}: hiding it also hides {'::'.join((*class_path, method))}",
                    reason=UNHIDEABLE,
                )
    return covered


def _imported_elsewhere(repo: Path, path: str) -> bool:
    """Whether another Python file of the repository imports this module by name."""
    stem = re.escape(PurePosixPath(path).stem)
    pattern = re.compile(
        rf"^\s*(?:from\s+[\w.]*\b{stem}\b\s+import\b|from\s+[\w.]+\s+import\s+.*\b{stem}\b|import\s+.*\b{stem}\b)",
        re.M,
    )
    for other in sorted(repo.rglob("*.py")):
        rel = other.relative_to(repo)
        if rel.as_posix() == path or rel.parts[0] == ".git":
            continue
        if pattern.search(other.read_text(errors="replace")):
            return True
    return False

"""Detach a gathering module from the test modules a removal broke.

Some suites have pytest collect one module that imports every test class from the modules beside
it (``python_files = "__main__.py"``, a ``tests/__main__.py`` of ``from .test_parser import
TestLalr, ...`` lines, as a held-out parser generator's suite is laid out). A symbol removal that
one of those modules imports breaks that module's import, and with it the gathering module's: no
test of the suite runs. Rather than losing the candidate (``start_state_no_tests``), the module
that broke goes from the start state whole, like any test file that no longer imports, and the
gathering module loses the import statements that load it: its other tests still run, and
``test_patch`` brings both back. Which module broke is the one the gathering module imports in the
collection error's traceback (:attr:`taskforge.repo.junit.CollectionError.chain`).

The import is dropped only where the importing module does not use what it imported (its code
names none of the names the statement bound), so its own tests and classes stay as they were; a
test module that calls a helper of the module that broke keeps today's rule (both go whole). The
module may also be one between (``from .suites import *``, ``tests/suites.py`` importing the test
modules): the point is the deepest importer in the traceback that can do without the import.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import PurePosixPath

import libcst as cst

from taskforge.mining.hiding import ClassIndex
from taskforge.mining.removal.edits import StatementRemover
from taskforge.repo.junit import CollectionError
from taskforge.repo.symbols import dotted_name, render_module
from taskforge.repo.testfiles import TestLayout

__all__ = ["detach_imports", "detach_point", "detached_changes", "owned_by"]

_KEPT = ("conftest.py", "__init__.py")


def detach_point(error: CollectionError, layout: TestLayout, index: ClassIndex,
                 detached: Mapping[str, Collection[str]]) -> tuple[str, str] | None:
    """``(importer, broken)``: the test module ``broken`` whose import failed, and the test module
    that imports it and can do without it, for the collected module ``error`` is about; None when
    there is none. Its traceback's chain is walked from the deepest frame up: a broken module
    imported by a module that uses what it imports (a helper called in its tests) moves the point
    up a step, to that module and its importer, and so on up to the collected module."""
    path = error.location.split("::", 1)[0]
    if path not in error.chain:
        return None
    chain = error.chain[error.chain.index(path):]
    for i in range(len(chain) - 1, 0, -1):
        importer, broken = chain[i - 1], chain[i]
        if not (layout.is_test_file(importer) and layout.is_test_file(broken) and broken.endswith(".py")
                and PurePosixPath(broken).name not in _KEPT and broken != importer):
            continue
        done = set(detached.get(importer, ()))
        if broken not in done and detach_imports(index, importer, done | {broken}) is not None:
            return importer, broken
    return None


def owned_by(index: ClassIndex, nodeids: Iterable[str], detached: Mapping[str, Collection[str]],
             located: Mapping[str, tuple[str, int, str]] | None = None) -> set[str]:
    """Of ``nodeids``, those whose class or function comes into their collected module through a
    module ``detached`` from its importer (:meth:`ClassIndex.import_path`)."""
    broken = set().union(*detached.values()) if detached else set()
    if not broken:
        return set()
    return {t for t in nodeids if "::" in t and index.import_path(t, (located or {}).get(t)) & broken}


def detached_changes(index: ClassIndex, detached: Mapping[str, Collection[str]]) -> dict[str, str | None]:
    """The new text of every gathering module in ``detached``, without its imports of the modules
    detached from it."""
    changes: dict[str, str | None] = {}
    for path, dead in sorted(detached.items()):
        text = detach_imports(index, path, dead)
        if text is not None:
            changes[path] = text
    return changes


def detach_imports(index: ClassIndex, path: str, dead: Collection[str]) -> str | None:
    """``path``'s text without the import statements (or the names of one) that load a file of
    ``dead``, at module level and in its ``try``/``if`` blocks (an emptied block gets ``pass``);
    None when it has none, or when the module's code still uses a name they bound (it would not
    import without them: ``ALL = [TestLoud, TestQuiet]``, a helper its tests call)."""
    module = index.module(path)
    detacher = _Detacher(index, path, frozenset(dead))
    tree = module.tree.visit(detacher)
    if not detacher.changed:
        return None
    text = render_module(tree, module.text)
    try:
        used = {node.id for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Name)}
    except SyntaxError:
        return None
    return None if used & detacher.dropped_names else text


class _Detacher(StatementRemover):
    def __init__(self, index: ClassIndex, path: str, dead: frozenset[str]) -> None:
        super().__init__()
        self.index, self.path, self.dead = index, path, dead
        self.changed = False
        self.dropped_names: set[str] = set()

    def leave_SimpleStatementSuite(
        self, original_node: cst.SimpleStatementSuite, updated_node: cst.SimpleStatementSuite
    ) -> cst.SimpleStatementSuite:
        # ``if cond: from .test_x import TestX`` (a block on its line): an emptied one gets ``pass``
        body = self._kept(updated_node.body)
        return updated_node if body is None else updated_node.with_changes(body=body or [cst.Pass()])

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # an import a function makes runs when it is called, not at collection

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.RemovalSentinel:
        body = self._kept(updated_node.body)
        if body is None:
            return updated_node
        return updated_node.with_changes(body=body) if body else self.drop(original_node)

    def _kept(self, body: Sequence[cst.BaseSmallStatement]) -> list[cst.BaseSmallStatement] | None:
        """The statements of a line left once the imports of the broken modules go (the last
        without its semicolon); None when none goes."""
        kept = [small for statement in body if (small := self._without_dead(statement)) is not None]
        if len(kept) == len(body) and all(a is b for a, b in zip(kept, body, strict=True)):
            return None
        self.changed = True
        if kept:
            kept[-1] = kept[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return kept

    def _loads_dead(self, level: int, module: str | None, name: str | None = None) -> bool:
        return self.index.imported_file(self.path, level, module, name) in self.dead

    def _without_dead(self, small: cst.BaseSmallStatement) -> cst.BaseSmallStatement | None:
        if isinstance(small, cst.Import):
            names = [alias for alias in small.names if not self._loads_dead(0, dotted_name(alias.name))]
        elif isinstance(small, cst.ImportFrom):
            level = len(small.relative)
            module = dotted_name(small.module) if small.module is not None else None
            if self._loads_dead(level, module):  # the statement loads a broken module whole
                if not isinstance(small.names, cst.ImportStar):
                    self.dropped_names |= {_bound(alias) for alias in small.names}
                return None
            if isinstance(small.names, cst.ImportStar):
                return small
            names = [alias for alias in small.names if not self._loads_dead(level, module, dotted_name(alias.name))]
        else:
            return small
        if len(names) == len(small.names):
            return small
        self.dropped_names |= {_bound(alias) for alias in small.names if alias not in names}
        if not names:
            return None
        names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return small.with_changes(names=names)


def _bound(alias: cst.ImportAlias) -> str:
    """The name an import's alias binds: ``as`` name, or the first part of a dotted module."""
    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
        return alias.asname.name.value
    return (dotted_name(alias.name) or "").partition(".")[0]

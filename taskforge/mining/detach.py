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

Only a module that defines no test of its own gathers: one whose every collected test is bound
from another file (:meth:`ClassIndex.binder`). A test module that imports a helper from another
test module keeps today's rule (both go whole), since dropping the import would break its own
tests.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from pathlib import PurePosixPath

import libcst as cst

from taskforge.mining.hiding import ClassIndex
from taskforge.mining.removal.edits import StatementRemover
from taskforge.repo.junit import CollectionError
from taskforge.repo.symbols import dotted_name, render_module
from taskforge.repo.testfiles import TestLayout

__all__ = ["broken_import", "detach_imports", "detached_changes", "gathers", "owned_by"]

_KEPT = ("conftest.py", "__init__.py")


def broken_import(error: CollectionError, layout: TestLayout) -> str | None:
    """The test module whose import broke the collected module ``error`` is about: the file its
    traceback enters right after the collected module's own frame, when that is another test
    module of the repository (not a ``conftest.py`` or ``__init__.py``, which cannot go whole)."""
    path = error.location.split("::", 1)[0]
    if path not in error.chain:
        return None
    after = error.chain[error.chain.index(path) + 1:]
    if not after or after[0] == path:
        return None
    culprit = after[0]
    if not layout.is_test_file(culprit) or PurePosixPath(culprit).name in _KEPT or not culprit.endswith(".py"):
        return None
    return culprit


def gathers(index: ClassIndex, path: str, nodeids: Iterable[str],
            located: Mapping[str, tuple[str, int, str]] | None = None) -> bool:
    """Whether ``path`` defines none of its collected tests ``nodeids`` (its baseline ids): each
    is bound from another file of the repository."""
    ids = [t for t in nodeids if t.startswith(f"{path}::")]
    return bool(ids) and all(index.binder(t, (located or {}).get(t)) not in (None, path) for t in ids)


def owned_by(index: ClassIndex, nodeids: Iterable[str], detached: Mapping[str, Collection[str]],
             located: Mapping[str, tuple[str, int, str]] | None = None) -> set[str]:
    """Of ``nodeids``, those of a gathering module that it binds from a module detached from it."""
    out = set()
    for nodeid in nodeids:
        path = nodeid.partition("::")[0]
        if path in detached and index.binder(nodeid, (located or {}).get(nodeid)) in detached[path]:
            out.add(nodeid)
    return out


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
    None when it has none."""
    module = index.module(path)
    detacher = _Detacher(index, path, frozenset(dead))
    tree = module.tree.visit(detacher)
    return render_module(tree, module.text) if detacher.changed else None


class _Detacher(StatementRemover):
    def __init__(self, index: ClassIndex, path: str, dead: frozenset[str]) -> None:
        super().__init__()
        self.index, self.path, self.dead = index, path, dead
        self.changed = False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return False  # an import a function makes runs when it is called, not at collection

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.RemovalSentinel:
        body = [kept for small in updated_node.body if (kept := self._without_dead(small)) is not None]
        if len(body) == len(updated_node.body) and all(a is b for a, b in zip(body, updated_node.body, strict=True)):
            return updated_node
        self.changed = True
        if not body:
            return self.drop(original_node)
        body[-1] = body[-1].with_changes(semicolon=cst.MaybeSentinel.DEFAULT)
        return updated_node.with_changes(body=body)

    def _loads_dead(self, level: int, module: str | None, name: str | None = None) -> bool:
        return self.index.imported_file(self.path, level, module, name) in self.dead

    def _without_dead(self, small: cst.BaseSmallStatement) -> cst.BaseSmallStatement | None:
        if isinstance(small, cst.Import):
            names = [alias for alias in small.names if not self._loads_dead(0, dotted_name(alias.name))]
        elif isinstance(small, cst.ImportFrom):
            level = len(small.relative)
            module = dotted_name(small.module) if small.module is not None else None
            if isinstance(small.names, cst.ImportStar) or self._loads_dead(level, module):
                return None if self._loads_dead(level, module) else small
            names = [alias for alias in small.names if not self._loads_dead(level, module, dotted_name(alias.name))]
        else:
            return small
        if len(names) == len(small.names):
            return small
        if not names:
            return None
        names[-1] = names[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        return small.with_changes(names=names)

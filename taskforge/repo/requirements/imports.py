"""What a Python file imports, read statically: branches false on CPython 3.11/Linux and fallbacks skipped."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from taskforge.repo.requirements.distributions import NAMESPACE_PACKAGES, distribution_for_import
from taskforge.repo.requirements.files import NotLiteral, called_name, literal, setup_py_list
from taskforge.repo.requirements.found import TARGET_ENVIRONMENT

__all__ = ["Import", "children", "imports_in_tree"]


_TARGET_VERSION_INFO = (3, 11, 0, "final", 0)
"""``sys.version_info`` in the target environment (:data:`TARGET_ENVIRONMENT`)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Import:
    """One import statement (or ``importorskip`` / ``pytest_plugins`` entry) in a file."""

    module: str
    """The dotted module; "" for ``from . import x``."""
    names: tuple[str, ...]
    """What ``from module import ...`` takes (modules or attributes: unknown without running)."""
    level: int
    """0 for absolute imports, the number of leading dots otherwise."""
    how: str
    """``import``, ``pytest.importorskip`` or ``pytest_plugins``: says how in the origin."""


def imports_in_tree(tree: ast.Module, *, module_level_only: bool = False) -> list[Import]:
    """What a Python file imports (or asks ``pytest.importorskip`` for).

    With ``module_level_only``, imports inside functions (run only if called) are left out.

    Skipped: ``if TYPE_CHECKING:`` and ``if __name__ == "__main__":`` blocks, branches of version
    or platform checks that are false on CPython 3.11/Linux, and ``except ImportError:``
    fallbacks after a standard-library import (``try: from unittest import mock`` /
    ``except ImportError: import mock``).
    """
    imports: list[Import] = []
    for statement in tree.body:
        if isinstance(statement, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "pytest_plugins" for target in statement.targets
        ):
            try:
                plugins = literal(statement.value, {})
            except NotLiteral:
                continue
            imports += [Import(module=p, names=(), level=0, how="pytest_plugins") for p in setup_py_list(plugins)]
    imports += _imports_below(tree.body, into_functions=not module_level_only)
    return imports


def _imports_below(statements: Iterable[ast.AST], *, into_functions: bool) -> Iterator[Import]:
    """Statements are followed recursively (they nest shallowly), expressions walked iteratively."""
    for node in statements:
        if not into_functions and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.If):
            verdict = _static_truth(node.test)
            if verdict is not None:
                yield from _imports_below(node.body if verdict else node.orelse, into_functions=into_functions)
                continue
        if isinstance(node, (ast.Try, ast.TryStar)) and _catches_import_error(node.handlers):
            tried = [imported for imported in _imports_below(node.body, into_functions=False) if imported.level == 0]
            if tried and all(distribution_for_import(imported.module) is None for imported in tried):
                yield from _imports_below([*node.body, *node.orelse, *node.finalbody], into_functions=into_functions)
                continue
        if isinstance(node, (ast.With, ast.AsyncWith)) and any(
            isinstance(item.context_expr, ast.Call) and called_name(item.context_expr.func) == "raises"
            for item in node.items
        ):
            continue  # `with pytest.raises(ImportError): import nonexistent` tests a failing import
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module=alias.name, names=(), level=0, how="import")
        elif isinstance(node, ast.ImportFrom):
            names = tuple(alias.name for alias in node.names if alias.name != "*")
            if node.level == 0 and node.module in NAMESPACE_PACKAGES:
                for name in names:
                    yield Import(module=f"{node.module}.{name}", names=(), level=0, how="import")
            else:
                yield Import(module=node.module or "", names=names, level=node.level, how="import")
        elif isinstance(node, ast.expr):
            if not into_functions:
                continue
            for call in ast.walk(node):
                if (
                    isinstance(call, ast.Call)
                    and called_name(call.func) == "importorskip"
                    and call.args
                    and isinstance(call.args[0], ast.Constant)
                    and isinstance(call.args[0].value, str)
                ):
                    yield Import(module=call.args[0].value, names=(), level=0, how="pytest.importorskip")
        else:
            yield from _imports_below(children(node), into_functions=into_functions)


def children(node: ast.AST) -> Iterator[ast.AST]:
    """A statement's nested statements and expressions (handler and match-case bodies included)."""
    for _, value in ast.iter_fields(node):
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, (ast.stmt, ast.expr)):
                yield item
            elif isinstance(item, (ast.ExceptHandler, ast.match_case)):
                yield from item.body


def _catches_import_error(handlers: list[ast.ExceptHandler]) -> bool:
    caught = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    for handler in handlers:
        if handler.type is None:
            return True
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(called_name(t) in caught for t in types):
            return True
    return False


def _static_truth(test: ast.expr) -> bool | None:
    """The value of a condition on CPython 3.11/Linux if it only reads the version or platform."""
    match test:
        case ast.Name(id="TYPE_CHECKING") | ast.Attribute(attr="TYPE_CHECKING"):
            return False
        case ast.Name(id="PY2") | ast.Attribute(value=ast.Name(id="six"), attr="PY2"):
            return False
        case ast.Name(id="PY3") | ast.Attribute(value=ast.Name(id="six"), attr="PY3"):
            return True
        case ast.UnaryOp(op=ast.Not(), operand=operand):
            verdict = _static_truth(operand)
            return None if verdict is None else not verdict
        case ast.BoolOp(op=ast.And(), values=values):
            verdicts = [_static_truth(value) for value in values]
            return False if False in verdicts else (True if all(v is True for v in verdicts) else None)
        case ast.BoolOp(op=ast.Or(), values=values):
            verdicts = [_static_truth(value) for value in values]
            return True if True in verdicts else (False if all(v is False for v in verdicts) else None)
        case ast.Compare(left=left, ops=[op], comparators=[right]):
            actual = _static_value(left)
            if actual is None:
                return None
            try:
                return _compare(actual, op, ast.literal_eval(right))
            except (ValueError, TypeError, SyntaxError):
                return None
        case ast.Call(
            func=ast.Attribute(value=ast.Attribute(value=ast.Name(id="sys"), attr="platform"), attr="startswith"),
            args=[ast.Constant(value=str() as prefix)],
        ):
            return TARGET_ENVIRONMENT["sys_platform"].startswith(prefix)
    return None


def _static_value(node: ast.expr) -> Any:
    """``sys.version_info`` (and its parts), ``sys.platform``, ``os.name`` and ``__name__`` under pytest."""
    match node:
        case ast.Attribute(value=ast.Name(id="sys"), attr="version_info"):
            return _TARGET_VERSION_INFO
        case ast.Attribute(value=ast.Attribute(value=ast.Name(id="sys"), attr="version_info"), attr="major"):
            return _TARGET_VERSION_INFO[0]
        case ast.Attribute(value=ast.Attribute(value=ast.Name(id="sys"), attr="version_info"), attr="minor"):
            return _TARGET_VERSION_INFO[1]
        case ast.Subscript(value=ast.Attribute(value=ast.Name(id="sys"), attr="version_info"), slice=index):
            try:
                if isinstance(index, ast.Slice):
                    parts = (index.lower, index.upper, index.step)
                    bounds = [None if part is None else ast.literal_eval(part) for part in parts]
                    return _TARGET_VERSION_INFO[slice(*bounds)]
                return _TARGET_VERSION_INFO[ast.literal_eval(index)]
            except (ValueError, TypeError, IndexError, SyntaxError):
                return None
        case ast.Attribute(value=ast.Name(id="sys"), attr="platform"):
            return TARGET_ENVIRONMENT["sys_platform"]
        case ast.Attribute(value=ast.Name(id="os"), attr="name"):
            return TARGET_ENVIRONMENT["os_name"]
        case ast.Name(id="__name__"):
            return "__test_module__"  # never "__main__" under pytest
    return None


def _compare(actual: Any, op: ast.cmpop, expected: Any) -> bool | None:
    match op:
        case ast.Eq():
            return bool(actual == expected)
        case ast.NotEq():
            return bool(actual != expected)
        case ast.Lt():
            return bool(actual < expected)
        case ast.LtE():
            return bool(actual <= expected)
        case ast.Gt():
            return bool(actual > expected)
        case ast.GtE():
            return bool(actual >= expected)
    return None

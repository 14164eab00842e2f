"""What the removal strategies share: the :class:`Removal` record, the strategies' names, and the
libcst editor that deletes definitions, hollows bodies and fixes imports, ``__all__`` and dispatch
tables (see :mod:`taskforge.mining.removal.cst` for the strategies)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal, TypeVar, get_args

import libcst as cst
from libcst.metadata import CodeRange

from taskforge.errors import TaskforgeError
from taskforge.repo.symbols import (
    SymbolIndex,
    absolute_module,
    definition_span,
    dotted_name,
    render_module,
)

__all__ = ["NOT_APPLICABLE", "STRATEGIES", "Removal", "StatementRemover", "Strategy"]

_WRAPPERS = frozenset({"classmethod", "staticmethod", "property"})
"""Builtins a registration may wrap the attached function in."""
# The underscored names are shared by the strategies' modules (cst, feature), not public API.

Strategy = Literal["body", "symbol", "module", "feature"]
STRATEGIES: tuple[Strategy, ...] = get_args(Strategy)

NOT_APPLICABLE = "removal_not_applicable"
_PARSED_CACHE_SIZE = 512  # files kept parsed by one agent (a large repository's package)


@dataclass(frozen=True, kw_only=True, slots=True)
class Removal:
    """What one removal changed."""

    strategy: Strategy
    """How the code was removed."""
    target: str
    """The symbol's qualname, or the dotted module name for ``module``."""
    removed: tuple[str, ...]
    """Qualnames whose code was removed: the target first, then its helpers (for ``module``: the
    module, then every symbol it defined; for ``feature``: the target, then the other members and
    the modules deleted whole)."""
    files: dict[str, str | None]
    """Repository-relative path -> new full text, None for a deleted file; changed files only."""
    removed_code: dict[str, str]
    """Target and helper qualnames (or the module) -> the source text taken out, blank lines at
    either end stripped (for ``body``: the statements after the docstring)."""
    options: tuple[str, ...] = ()
    """``feature``: the command-line options removed with it (``--yaml``)."""
    trajectory: dict[str, object] | None = None
    """How an LLM agent got there (messages, tool calls, usage), for the task's ``validation``
    record; None for the deterministic agent."""


def _refuse(message: str) -> TaskforgeError:
    return TaskforgeError(message, reason=NOT_APPLICABLE)


@dataclass(frozen=True, slots=True)
class _Parsed:
    text: str
    tree: cst.Module
    positions: Mapping[cst.CSTNode, CodeRange]

    def position(self, node: cst.CSTNode) -> CodeRange:
        return self.positions[node]


# import_action(kind, module, name) -> None (keep), "drop", or a module to import instead:
#   kind "from": ``from module import name``; "star": ``from module import *`` (name None);
#   "import": ``import module [as name]`` (name: the alias, or None).
_ImportAction = Callable[[str, str, str | None], str | None]


# --- helpers shared by the strategies ------------------------------------------------------------


def _code(parsed: _Parsed, tree: cst.Module) -> str:
    return render_module(tree, parsed.text)


def _local(qualname: str) -> str:
    return qualname.partition(":")[2]


def _is_package(path: str) -> bool:
    return PurePosixPath(path).name == "__init__.py"


def _listing(names: Sequence[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"


def _alias_targets(index: SymbolIndex, module: str, name: str) -> frozenset[str]:
    """What ``from module import name`` binds, as the index resolves it."""
    targets = {f"{module}:{name}"} | index.namespaces.get(module, {}).get(name, frozenset())
    if f"{module}.{name}" in index.modules:
        targets.add(f"{module}.{name}")
    return frozenset(targets)


def _modules_naming(index: SymbolIndex, is_dead: Callable[[frozenset[str]], bool]) -> set[str]:
    """Modules with a module-level name that resolves to removed code (imports, ``__all__``)."""
    return {m for m, names in index.namespaces.items() if any(is_dead(targets) for targets in names.values())}


def _dead_all_names(index: SymbolIndex, module: str, is_dead: Callable[[frozenset[str]], bool]) -> set[str]:
    names = index.namespaces.get(module, {})
    out = set()
    for name in index.all_names.get(module, ()):
        targets = names.get(name, frozenset())
        if f"{module}.{name}" in index.modules:
            targets |= {f"{module}.{name}"}
        if is_dead(targets):
            out.add(name)
    return out


def _assigned_name(statement: cst.BaseSmallStatement) -> str | None:
    """``NAME`` of ``NAME = ...`` or ``NAME: T = ...`` (one plain target), else None."""
    if isinstance(statement, cst.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0].target, cst.Name):
        return statement.targets[0].target.value
    if isinstance(statement, cst.AnnAssign) and isinstance(statement.target, cst.Name):
        return statement.target.value
    return None


def _extent(parsed: _Parsed, node: cst.BaseStatement) -> tuple[int, int]:
    """First and last line a statement occupies, its leading comments and blank lines included."""
    if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
        first = definition_span(node, parsed.position)[0]
    else:
        first = parsed.position(node).start.line
    first -= len(node.leading_lines)
    return first, first + parsed.tree.code_for_node(node).count("\n") - 1


def _lines(parsed: _Parsed, first: int, last: int) -> str:
    return "".join(parsed.text.splitlines(keepends=True)[first - 1 : last])


def _node_text(parsed: _Parsed, node: cst.BaseStatement) -> str:
    return _lines(parsed, *_extent(parsed, node))


def _statements_text(parsed: _Parsed, statements: Sequence[cst.CSTNode], *, footer: int) -> str:
    """The source of a hollowed body's removed statements (and its trailing comment lines)."""
    if isinstance(statements[0], cst.BaseSmallStatement):  # a one-line body: ``def f(): return 1``
        return "".join(parsed.tree.code_for_node(s) for s in statements).strip() + "\n"
    first = _extent(parsed, statements[0])[0]  # type: ignore[arg-type]
    last = _extent(parsed, statements[-1])[1] + footer  # type: ignore[arg-type]
    return _lines(parsed, first, last).strip("\n") + "\n"


def _is_docstring(statement: cst.CSTNode) -> bool:
    if isinstance(statement, cst.SimpleStatementLine):
        if len(statement.body) != 1:
            return False
        statement = statement.body[0]
    return isinstance(statement, cst.Expr) and isinstance(statement.value, (cst.SimpleString, cst.ConcatenatedString))


def _is_placeholder(statement: cst.CSTNode) -> bool:
    """``pass``, ``...`` or ``raise NotImplementedError[(...)]``: nothing to remove."""
    smalls: Sequence[cst.CSTNode]
    smalls = statement.body if isinstance(statement, cst.SimpleStatementLine) else [statement]
    for small in smalls:
        if isinstance(small, cst.Pass) or (isinstance(small, cst.Expr) and isinstance(small.value, cst.Ellipsis)):
            continue
        if isinstance(small, cst.Raise) and small.exc is not None:
            exc = small.exc.func if isinstance(small.exc, cst.Call) else small.exc
            if dotted_name(exc) == "NotImplementedError":
                continue
        return False
    return True


_Element = TypeVar("_Element", cst.ImportAlias, cst.Element, cst.BaseDictElement)
_Definition = cst.FunctionDef | cst.ClassDef


def _without(elements: Sequence[_Element], keep: Sequence[bool]) -> list[_Element]:
    """The kept elements of a comma-separated sequence, with the commas fixed: the new last element
    takes the old last element's comma (or its lack of one), so layouts stay as they were."""
    kept = [e for e, k in zip(elements, keep, strict=True) if k]
    if kept and not keep[-1]:
        kept[-1] = kept[-1].with_changes(comma=elements[-1].comma)
    return kept


# --- the editor ----------------------------------------------------------------------------------

_STATEMENT_LEVEL = (
    cst.Module,
    cst.BaseCompoundStatement,
    cst.BaseSuite,
    cst.SimpleStatementLine,
    cst.Else,
    cst.ExceptHandler,
    cst.ExceptStarHandler,
    cst.Finally,
    cst.MatchCase,
)


class StatementRemover(cst.CSTTransformer):
    """A transformer that deletes whole statements and leaves tidy blocks behind: an emptied block
    gets ``pass``, and when a block's first statement goes, the blank lines that separated it from
    the next one go too (comments stay). Subclasses call :meth:`drop` to delete a statement.
    Shared with :mod:`taskforge.mining.hiding`."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped: set[int] = set()  # ids of the original statements deleted

    def drop(self, original: cst.CSTNode) -> cst.RemovalSentinel:
        self.dropped.add(id(original))
        return cst.RemoveFromParent()

    def _tidy(
        self, original: Sequence[cst.BaseStatement], updated: Sequence[cst.BaseStatement]
    ) -> list[cst.BaseStatement]:
        body = list(updated)
        if body and original and id(original[0]) in self.dropped:
            lines = list(body[0].leading_lines)
            while lines and lines[0].comment is None:
                lines.pop(0)
            body[0] = body[0].with_changes(leading_lines=lines)
        return body

    def leave_Module(self, original_node: cst.Module, updated_node: cst.Module) -> cst.Module:
        return updated_node.with_changes(body=self._tidy(original_node.body, updated_node.body))

    def leave_IndentedBlock(
        self, original_node: cst.IndentedBlock, updated_node: cst.IndentedBlock
    ) -> cst.IndentedBlock:
        if original_node.body and not updated_node.body:
            return updated_node.with_changes(body=[cst.SimpleStatementLine(body=[cst.Pass()])])
        return updated_node.with_changes(body=self._tidy(original_node.body, updated_node.body))


class _Editor(StatementRemover):
    """One pass over a file: delete definitions, hollow one body, drop imports and ``__all__`` names.

    Definitions are matched by their qualname inside the module, computed the way the index
    computes it (the nesting of ``def`` and ``class``).
    """

    def __init__(
        self,
        *,
        module: str,
        is_package: bool,
        delete: set[str] | None = None,
        hollow: tuple[str, int] | None = None,
        import_action: _ImportAction | None = None,
        drop_all: set[str] | None = None,
        delete_vars: set[str] | None = None,
        drop_refs: set[str] | None = None,
    ) -> None:
        super().__init__()
        self.module = module
        self.is_package = is_package
        self.delete = delete or set()
        self.delete_vars = delete_vars or set()
        """Module-level variables whose assignment statements go (``NAME = ...``, one target)."""
        self.drop_refs = drop_refs if drop_refs is not None else set()
        """Names whose entries leave module-level ``dict``/``list``/``tuple``/``set`` literals."""
        self.hollow = hollow
        self.import_action = import_action
        self.drop_all = drop_all or set()
        self.stack: list[str] = []
        self.classes: set[str] = set()
        """Classes the module defines at its top level (seen so far)."""
        self.decorated_class: list[bool] = []  # parallel to stack
        self.seen: dict[str, int] = {}
        self.deleted: list[tuple[str, cst.BaseStatement]] = []
        self.deleted_from_decorated_class: list[str] = []
        self.hollowed: list[cst.CSTNode] | None = None  # the removed statements, once hollowed
        self.hollowed_footer = 0

    def on_visit(self, node: cst.CSTNode) -> bool:
        # Edits happen at statement level only: expressions, decorators and parameters are never
        # descended into (their leave hooks still run), which keeps a pass cheap on large files.
        if not isinstance(node, _STATEMENT_LEVEL):
            return False
        return super().on_visit(node)

    # -- definitions ------------------------------------------------------------------------------

    def _enter(self, node: cst.FunctionDef | cst.ClassDef) -> bool:
        self.stack.append(node.name.value)
        self.decorated_class.append(isinstance(node, cst.ClassDef) and bool(node.decorators))
        return ".".join(self.stack) not in self.delete

    def _leave(
        self, original: _Definition, updated: _Definition
    ) -> _Definition | cst.RemovalSentinel:
        qualname = ".".join(self.stack)
        self.stack.pop()
        self.decorated_class.pop()
        ordinal = self.seen.get(qualname, 0)
        self.seen[qualname] = ordinal + 1
        if qualname in self.delete:
            self.deleted.append((qualname, original))
            if self.decorated_class and self.decorated_class[-1]:
                self.deleted_from_decorated_class.append(qualname)
            return self.drop(original)
        if self.hollow == (qualname, ordinal) and isinstance(original, cst.FunctionDef):
            return self._hollow(original)
        return updated

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return self._enter(node)

    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> _Definition | cst.RemovalSentinel:
        return self._leave(original_node, updated_node)

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        if not self.stack:
            self.classes.add(node.name.value)
        return self._enter(node)

    def leave_ClassDef(
        self, original_node: cst.ClassDef, updated_node: cst.ClassDef
    ) -> _Definition | cst.RemovalSentinel:
        return self._leave(original_node, updated_node)

    def _hollow(self, node: cst.FunctionDef) -> cst.FunctionDef:
        # The original node: its statements are the ones the positions know. Nothing inside the
        # hollowed body is edited otherwise, so the update is the original.
        raise_ = cst.Raise(exc=cst.Name("NotImplementedError"))
        body = node.body
        statements = list(body.body)
        keep = statements[:1] if statements and _is_docstring(statements[0]) else []
        removed = statements[len(keep) :]
        if not removed or all(_is_placeholder(s) for s in removed):
            self.hollowed = []
            return node
        self.hollowed = removed
        if isinstance(body, cst.SimpleStatementSuite):
            return node.with_changes(body=body.with_changes(body=[*keep, raise_]))
        # Comments trailing the body are part of it; blank lines after it are not.
        self.hollowed_footer = len(body.footer)
        footer = [line for line in body.footer if line.comment is None]
        new_body = body.with_changes(body=[*keep, cst.SimpleStatementLine(body=[raise_])], footer=footer)
        return node.with_changes(body=new_body)

    # -- blocks left empty ------------------------------------------------------------------------

    def leave_SimpleStatementSuite(
        self, original_node: cst.SimpleStatementSuite, updated_node: cst.SimpleStatementSuite
    ) -> cst.SimpleStatementSuite:
        if original_node.body and not updated_node.body:
            return updated_node.with_changes(body=[cst.Pass()])
        return updated_node

    def leave_SimpleStatementLine(
        self, original_node: cst.SimpleStatementLine, updated_node: cst.SimpleStatementLine
    ) -> cst.SimpleStatementLine | cst.RemovalSentinel:
        if self.delete_vars and not self.stack and len(original_node.body) == 1:
            name = _assigned_name(original_node.body[0])
            if name in self.delete_vars:
                self.deleted.append((name, original_node))
                return self.drop(original_node)
        if original_node.body and not updated_node.body:
            return self.drop(original_node)
        if len(updated_node.body) < len(original_node.body):
            # ``a; b`` lost ``b``: the survivor must not keep a dangling semicolon.
            last = updated_node.body[-1]
            return updated_node.with_changes(
                body=[*updated_node.body[:-1], last.with_changes(semicolon=cst.MaybeSentinel.DEFAULT)]
            )
        return updated_node

    # -- imports ----------------------------------------------------------------------------------

    def leave_ImportFrom(
        self, original_node: cst.ImportFrom, updated_node: cst.ImportFrom
    ) -> cst.ImportFrom | cst.RemovalSentinel:
        if self.import_action is None:
            return updated_node
        source = absolute_module(
            self.module,
            is_package=self.is_package,
            level=len(updated_node.relative),
            name=dotted_name(updated_node.module) if updated_node.module is not None else None,
        )
        if source is None:
            return updated_node
        if isinstance(updated_node.names, cst.ImportStar):
            return cst.RemoveFromParent() if self.import_action("star", source, None) == "drop" else updated_node
        names = list(updated_node.names)
        keep = [self.import_action("from", source, dotted_name(alias.name)) != "drop" for alias in names]
        if all(keep):
            return updated_node
        if not any(keep):
            return cst.RemoveFromParent()
        return updated_node.with_changes(names=_without(names, keep))

    def leave_Import(self, original_node: cst.Import, updated_node: cst.Import) -> cst.Import | cst.RemovalSentinel:
        if self.import_action is None:
            return updated_node
        names: list[cst.ImportAlias] = []
        keep: list[bool] = []
        for alias in updated_node.names:
            dotted = dotted_name(alias.name)
            assert dotted is not None
            asname = None if alias.asname is None else dotted_name(alias.asname.name)  # type: ignore[arg-type]
            action = self.import_action("import", dotted, asname)
            if action is not None and action != "drop":
                alias = alias.with_changes(name=cst.parse_expression(action))
            names.append(alias)
            keep.append(action != "drop")
        if all(keep):
            return updated_node.with_changes(names=names)
        if not any(keep):
            return cst.RemoveFromParent()
        return updated_node.with_changes(names=_without(names, keep))

    # -- __all__ ----------------------------------------------------------------------------------

    def _filter_all(self, value: cst.BaseExpression) -> cst.BaseExpression:
        if not isinstance(value, (cst.List, cst.Tuple)):
            return value
        elements = list(value.elements)
        keep = [
            not (isinstance(e.value, cst.SimpleString) and e.value.evaluated_value in self.drop_all) for e in elements
        ]
        if all(keep):
            return value
        kept = _without(elements, keep)
        if isinstance(value, cst.Tuple) and len(kept) == 1 and kept[0].comma == cst.MaybeSentinel.DEFAULT:
            kept[0] = kept[0].with_changes(comma=cst.Comma())  # ("a",) stays a tuple
        return value.with_changes(elements=kept)

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign | cst.RemovalSentinel:
        if self.drop_refs and not self.stack and self._attaches_removed(updated_node):
            return cst.RemoveFromParent()
        if self.drop_all and not self.stack and any(dotted_name(t.target) == "__all__" for t in updated_node.targets):
            return updated_node.with_changes(value=self._filter_all(updated_node.value))
        if self.drop_refs and not self.stack:
            return updated_node.with_changes(value=self._filter_entries(updated_node.value))
        return updated_node

    def leave_AnnAssign(self, original_node: cst.AnnAssign, updated_node: cst.AnnAssign) -> cst.AnnAssign:
        if self.drop_all and not self.stack and dotted_name(updated_node.target) == "__all__" and updated_node.value:
            return updated_node.with_changes(value=self._filter_all(updated_node.value))
        if self.drop_refs and not self.stack and updated_node.value is not None:
            return updated_node.with_changes(value=self._filter_entries(updated_node.value))
        return updated_node

    def _attaches_removed(self, node: cst.Assign) -> bool:
        """A module-level statement that only attaches removed code to a class of this module as
        an attribute, a registration like a dispatch entry: ``Munch.toJSON = toJSON``,
        ``Munch.fromJSON = classmethod(fromJSON)`` (inside a top-level ``try`` too; an emptied
        block gets ``pass``). Attaching it to anything else (``json.JSONEncoder.default = f``)
        changes code the feature does not own, so that still refuses the removal."""
        value = node.value
        if (isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value in _WRAPPERS
                and len(value.args) == 1 and value.args[0].keyword is None and not value.args[0].star):
            value = value.args[0].value
        return (isinstance(value, cst.Name) and value.value in self.drop_refs
                and all(isinstance(t.target, cst.Attribute) and isinstance(t.target.value, cst.Name)
                        and t.target.value.value in self.classes for t in node.targets))

    def _filter_entries(self, value: cst.BaseExpression) -> cst.BaseExpression:
        """A dispatch table without the entries that name removed code: ``{"yaml": to_yaml}``."""
        def names_removed(expr: cst.BaseExpression | None) -> bool:
            return isinstance(expr, cst.Name) and expr.value in self.drop_refs

        elements: list[Any]
        if isinstance(value, cst.Dict):
            elements = list(value.elements)
            keep = [not (isinstance(e, cst.DictElement) and (names_removed(e.key) or names_removed(e.value)))
                    for e in elements]
        elif isinstance(value, (cst.List, cst.Tuple, cst.Set)):
            elements = list(value.elements)
            keep = [not (isinstance(e, cst.Element) and names_removed(e.value)) for e in elements]
        else:
            return value
        if all(keep):
            return value
        kept = _without(elements, keep)
        if isinstance(value, cst.Tuple) and len(kept) == 1 and kept[0].comma == cst.MaybeSentinel.DEFAULT:
            kept[0] = kept[0].with_changes(comma=cst.Comma())
        if isinstance(value, cst.Set) and not kept:
            return cst.parse_expression("set()")
        return value.with_changes(elements=kept)

    def leave_AugAssign(self, original_node: cst.AugAssign, updated_node: cst.AugAssign) -> cst.AugAssign:
        if self.drop_all and not self.stack and dotted_name(updated_node.target) == "__all__":
            return updated_node.with_changes(value=self._filter_all(updated_node.value))
        return updated_node

    def leave_Expr(self, original_node: cst.Expr, updated_node: cst.Expr) -> cst.Expr | cst.RemovalSentinel:
        call = updated_node.value
        if not (
            self.drop_all
            and not self.stack
            and isinstance(call, cst.Call)
            and isinstance(call.func, cst.Attribute)
            and dotted_name(call.func.value) == "__all__"
            and len(call.args) == 1
        ):
            return updated_node
        arg = call.args[0].value
        if call.func.attr.value == "append":
            if isinstance(arg, cst.SimpleString) and arg.evaluated_value in self.drop_all:
                return cst.RemoveFromParent()
            return updated_node
        if call.func.attr.value == "extend":
            new_arg = call.args[0].with_changes(value=self._filter_all(arg))
            return updated_node.with_changes(value=call.with_changes(args=[new_arg]))
        return updated_node

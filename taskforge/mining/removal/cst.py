"""Remove a feature from a package's source: the removal agents.

A :class:`RemovalAgent` takes a repository, its :class:`~taskforge.repo.symbols.SymbolIndex` and a target,
and returns a :class:`Removal`: the new text of every file it changed (``None`` for a deleted file)
and the exact code it took out. It writes nothing; the caller applies ``Removal.files``. Agents are
a plug point: :data:`REMOVAL_AGENTS` maps a short name to ``"module:Class"`` and :func:`load_agent`
builds one. :class:`LibcstRemovalAgent` (``"libcst"``) is the deterministic default.

Strategies:

``body``
    A function's or method's body becomes ``raise NotImplementedError``. The signature, the
    decorators, the comments above it and the docstring stay. Its helpers stay too (dead code).
    For a name defined more than once (``@overload`` stubs, a property's setter), the last
    definition is hollowed. Refused for classes, and for bodies with nothing to remove (``pass``,
    ``...``, already ``raise NotImplementedError``).
``symbol``
    The function, method or class is deleted, every definition of its name in its scope, with its
    exclusive private helpers (:meth:`SymbolIndex.exclusive_private_helpers`). The removed names
    leave every ``__all__`` literal that lists them and every import that only re-exports them (the
    statement goes when its last name does). Refused when any other package code still uses a
    removed name: the rest of the package must keep working. A block left empty gets ``pass``.
``module``
    A module file (not a package's ``__init__``, not a top-level module) is deleted. Imports of it
    (``from . import mod``, ``from .mod import x``, ``import pkg.mod``, star imports, re-exports of
    its names through other modules) are dropped, and so are the names they bound from ``__all__``;
    ``import pkg.mod`` becomes ``import pkg``. Refused when other package code uses anything of it.

Refusals raise ``TaskforgeError(reason="removal_not_applicable")``. Untouched code keeps its bytes:
only the removed statements, the edited import statements and ``__all__`` literals change. A
deleted definition takes its leading comments and blank lines with it. Results are deterministic.

Limits: the refusal check trusts the index's reference graph, so a use the index cannot see (see
:mod:`taskforge.repo.symbols`: method calls on arbitrary objects, ``getattr``, string imports) is not a
reason to refuse; the caller's validation catches the breakage. ``__all__`` is edited only where it
is a literal list or tuple (``=``, ``+=``, ``.extend``, ``.append``).
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal, Protocol, TypeVar, get_args

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from taskforge.errors import TaskforgeError
from taskforge.repo.symbols import (
    SymbolIndex,
    absolute_module,
    definition_span,
    dotted_name,
    parse_source,
    read_source,
    render_module,
)

__all__ = [
    "REMOVAL_AGENTS",
    "LibcstRemovalAgent",
    "Removal",
    "RemovalAgent",
    "Strategy",
    "load_agent",
]
# StatementRemover is shared with taskforge.mining.hiding, not public API.

Strategy = Literal["body", "symbol", "module"]
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
    module, then every symbol it defined)."""
    files: dict[str, str | None]
    """Repository-relative path -> new full text, None for a deleted file; changed files only."""
    removed_code: dict[str, str]
    """Target and helper qualnames (or the module) -> the source text taken out, blank lines at
    either end stripped (for ``body``: the statements after the docstring)."""
    trajectory: dict[str, object] | None = None
    """How an LLM agent got there (messages, tool calls, usage), for the task's ``validation``
    record; None for the deterministic agent."""


class RemovalAgent(Protocol):
    """Removes one target from a repository; pure: returns the edits, writes nothing."""

    name: str

    def remove(self, repo: Path, index: SymbolIndex, *, target: str, strategy: Strategy) -> Removal: ...


REMOVAL_AGENTS: dict[str, str] = {
    "libcst": "taskforge.mining.removal.cst:LibcstRemovalAgent",
    "llm": "taskforge.mining.removal.llm_agent:LLMRemovalAgent",
}
"""Short name -> ``"module:Class"`` of each removal agent."""


def load_agent(name: str, **kwargs: object) -> RemovalAgent:
    """Build the removal agent registered as ``name``; kwargs go to its constructor."""
    try:
        dotted = REMOVAL_AGENTS[name]
    except KeyError:
        raise ValueError(f"unknown removal agent {name!r}; valid names: {', '.join(sorted(REMOVAL_AGENTS))}") from None
    module_name, _, class_name = dotted.partition(":")
    agent_class = getattr(importlib.import_module(module_name), class_name)
    agent: RemovalAgent = agent_class(**kwargs)
    return agent


def _refuse(message: str) -> TaskforgeError:
    return TaskforgeError(message, reason=NOT_APPLICABLE)


# --- the libcst agent ----------------------------------------------------------------------------


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


class LibcstRemovalAgent:
    """The deterministic default agent. Keeps the parsed files it has seen, by content, for reuse."""

    name = "libcst"

    def __init__(self) -> None:
        self._parsed: dict[tuple[str, str], _Parsed] = {}

    def remove(self, repo: Path, index: SymbolIndex, *, target: str, strategy: Strategy) -> Removal:
        repo = Path(repo)
        if strategy == "body":
            return self._remove_body(repo, index, target)
        if strategy == "symbol":
            return self._remove_symbol(repo, index, target)
        if strategy == "module":
            return self._remove_module(repo, index, target)
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")

    # -- strategies -------------------------------------------------------------------------------

    def _remove_body(self, repo: Path, index: SymbolIndex, target: str) -> Removal:
        symbol = index.symbols.get(target)
        if symbol is None:
            raise _refuse(f"{target} is not a symbol of the index")
        if symbol.kind == "class":
            raise _refuse(f"{target} is a class: the body strategy applies to functions and methods")
        if target in index.import_time:
            raise _refuse(f"{target} runs while the package is imported")
        local = _local(target)
        parsed = self._parse(repo, symbol.path)
        last = len(index.spans[target]) - 1
        editor = _Editor(module=symbol.module, is_package=_is_package(symbol.path), hollow=(local, last))
        new_tree = parsed.tree.visit(editor)
        if editor.hollowed is None:
            raise _refuse(f"{target}: no definition found at the indexed place (index out of date?)")
        if not editor.hollowed:
            raise _refuse(f"{target} has no body to remove")
        return Removal(
            strategy="body",
            target=target,
            removed=(target,),
            files={symbol.path: _code(parsed, new_tree)},
            removed_code={target: _statements_text(parsed, editor.hollowed, footer=editor.hollowed_footer)},
        )

    def _remove_symbol(self, repo: Path, index: SymbolIndex, target: str) -> Removal:
        symbol = index.symbols.get(target)
        if symbol is None:
            raise _refuse(f"{target} is not a symbol of the index")
        removed = (target, *index.exclusive_private_helpers(target))
        dead = {d for q in removed for d in (q, *index.descendants(q))}
        if target in index.import_time:
            raise _refuse(f"{target} runs while the package is imported")
        blockers = sorted({user for q in dead for user in index.used_by.get(q, ()) if user not in dead})
        if blockers:
            raise _refuse(f"{target} is still used by {_listing(blockers)}")

        def is_dead(targets: frozenset[str]) -> bool:
            symbols = {t for t in targets if t in index.symbols}
            return bool(symbols) and symbols <= dead

        def import_action(kind: str, module: str, name: str | None) -> str | None:
            if kind == "from" and name is not None and is_dead(_alias_targets(index, module, name)):
                return "drop"
            return None

        affected = {symbol.module}
        for q in sorted(dead):
            affected |= index.imported_by.get(q, frozenset())
        affected |= _modules_naming(index, is_dead)
        files: dict[str, str | None] = {}
        removed_code: dict[str, str] = {}
        for module in sorted(affected):
            path = index.modules[module]
            parsed = self._parse(repo, path)
            delete = {_local(q) for q in removed} if module == symbol.module else set()
            editor = _Editor(
                module=module,
                is_package=_is_package(path),
                delete=delete,
                import_action=import_action,
                drop_all=_dead_all_names(index, module, is_dead),
            )
            new_text = _code(parsed, parsed.tree.visit(editor))
            if editor.deleted_from_decorated_class:
                # total_ordering, dataclass, attrs...: the decorator may need the method.
                raise _refuse(f"{target} belongs to a decorated class")
            if module == symbol.module:
                for q in removed:
                    nodes = [node for local, node in editor.deleted if local == _local(q)]
                    if len(nodes) != len(index.spans[q]):
                        raise _refuse(f"{q}: {len(nodes)} definitions found, the index has {len(index.spans[q])}")
                    removed_code[q] = "".join(_node_text(parsed, node) for node in nodes).strip("\n") + "\n"
            if new_text != parsed.text:
                files[path] = new_text
        return Removal(
            strategy="symbol",
            target=target,
            removed=removed,
            files=dict(sorted(files.items())),
            removed_code=removed_code,
        )

    def _remove_module(self, repo: Path, index: SymbolIndex, target: str) -> Removal:
        path = index.modules.get(target)
        if path is None:
            raise _refuse(f"{target} is not a module of the index")
        if PurePosixPath(path).name == "__init__.py":
            raise _refuse(f"{target} is a package: the module strategy deletes single modules")
        if "." not in target:
            raise _refuse(f"{target} is a top-level module: deleting it deletes the project")

        def inside(t: str) -> bool:
            return t == target or t.startswith(target + ":")

        def is_dead(targets: frozenset[str]) -> bool:
            return any(inside(t) for t in targets)

        own = f"<module {target}>"
        blockers = sorted(
            {
                user
                for t, users in index.used_by.items()
                if inside(t)
                for user in users
                if user != own and not inside(user)
            }
        )
        if blockers:
            raise _refuse(f"{target} is still used by {_listing(blockers)}")

        def import_action(kind: str, module: str, name: str | None) -> str | None:
            if kind == "import":
                if module == target or module.startswith(target + "."):
                    return "drop" if name is not None else target.rpartition(".")[0]
                return None
            if module == target:
                return "drop"
            if kind == "from" and name is not None and is_dead(_alias_targets(index, module, name)):
                return "drop"
            return None

        affected = set(index.importers(target)) | {target.rpartition(".")[0]}
        for t, modules in index.imported_by.items():
            if inside(t):
                affected |= modules
        affected |= _modules_naming(index, is_dead)
        affected.discard(target)
        files: dict[str, str | None] = {path: None}
        for module in sorted(m for m in affected if m in index.modules):
            module_path = index.modules[module]
            parsed = self._parse(repo, module_path)
            drop_all = _dead_all_names(index, module, is_dead)
            if module == target.rpartition(".")[0]:
                drop_all.add(target.rpartition(".")[2])
            editor = _Editor(
                module=module,
                is_package=_is_package(module_path),
                import_action=import_action,
                drop_all=drop_all,
            )
            new_text = _code(parsed, parsed.tree.visit(editor))
            if new_text != parsed.text:
                files[module_path] = new_text
        text = self._parse(repo, path).text
        removed = (target, *(q for q, s in index.symbols.items() if s.module == target))
        return Removal(
            strategy="module",
            target=target,
            removed=removed,
            files=dict(sorted(files.items())),
            removed_code={target: text},
        )

    # -- parsing ----------------------------------------------------------------------------------

    def _parse(self, repo: Path, rel: str) -> _Parsed:
        text = read_source(repo / rel, rel)
        key = (rel, hashlib.sha256(text.encode()).hexdigest())
        parsed = self._parsed.get(key)
        if parsed is None:
            if len(self._parsed) >= _PARSED_CACHE_SIZE:
                self._parsed.clear()
            tree = parse_source(text, rel)
            positions = MetadataWrapper(tree, unsafe_skip_copy=True).resolve(PositionProvider)
            parsed = self._parsed[key] = _Parsed(text, tree, positions)
        return parsed


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


_Element = TypeVar("_Element", cst.ImportAlias, cst.Element)
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
    ) -> None:
        super().__init__()
        self.module = module
        self.is_package = is_package
        self.delete = delete or set()
        self.hollow = hollow
        self.import_action = import_action
        self.drop_all = drop_all or set()
        self.stack: list[str] = []
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

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        if self.drop_all and not self.stack and any(dotted_name(t.target) == "__all__" for t in updated_node.targets):
            return updated_node.with_changes(value=self._filter_all(updated_node.value))
        return updated_node

    def leave_AnnAssign(self, original_node: cst.AnnAssign, updated_node: cst.AnnAssign) -> cst.AnnAssign:
        if self.drop_all and not self.stack and dotted_name(updated_node.target) == "__all__" and updated_node.value:
            return updated_node.with_changes(value=self._filter_all(updated_node.value))
        return updated_node

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

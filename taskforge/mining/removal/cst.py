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

``feature``
    A set of members (:func:`taskforge.mining.features.find_features`: functions, classes,
    methods and module-level constants, in any modules of the package) is deleted together, the
    target among them. Imports and ``__all__`` names of removed code go as for ``symbol``, and so do
    the entries of module-level dispatch tables (a ``dict``, ``list``, ``tuple`` or ``set`` literal)
    that name a removed function or class. A module left with nothing but its docstring, imports and
    ``__all__`` is deleted whole, and its imports are fixed as for ``module``. Refused when package
    code outside the members still uses one, when module-level code other than such entries still
    names one, or when a member runs while the package is imported.

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
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Protocol

from libcst.metadata import MetadataWrapper, PositionProvider

from taskforge.mining.removal.edits import (
    NOT_APPLICABLE,
    STRATEGIES,
    Removal,
    StatementRemover,
    Strategy,
    _alias_targets,
    _code,
    _dead_all_names,
    _Editor,
    _is_package,
    _listing,
    _local,
    _modules_naming,
    _node_text,
    _Parsed,
    _refuse,
    _statements_text,
)
from taskforge.mining.removal.feature import module_level_names, remove_feature
from taskforge.repo.symbols import SymbolIndex, parse_source, read_source

__all__ = [
    "NOT_APPLICABLE",
    "REMOVAL_AGENTS",
    "STRATEGIES",
    "LibcstRemovalAgent",
    "Removal",
    "RemovalAgent",
    "StatementRemover",
    "Strategy",
    "load_agent",
]
_PARSED_CACHE_SIZE = 512  # files kept parsed by one agent (a large repository's package)

class RemovalAgent(Protocol):
    """Removes one target from a repository; pure: returns the edits, writes nothing."""

    name: str

    def remove(
        self, repo: Path, index: SymbolIndex, *, target: str, strategy: Strategy, members: Sequence[str] = ()
    ) -> Removal:
        """``members``: for the ``feature`` strategy, everything the feature removal deletes (the
        target among them); ignored by the other strategies."""
        ...


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


# --- the libcst agent ----------------------------------------------------------------------------


class LibcstRemovalAgent:
    """The deterministic default agent. Keeps the parsed files it has seen, by content, for reuse."""

    name = "libcst"

    def __init__(self) -> None:
        self._parsed: dict[tuple[str, str], _Parsed] = {}
        self._names: dict[tuple[str, str], tuple[frozenset[str], frozenset[str]]] = {}

    def module_level_names(self, rel: str, text: str) -> tuple[frozenset[str], frozenset[str]]:
        """:func:`taskforge.mining.removal.feature.module_level_names` of a file, kept by content."""
        key = (rel, hashlib.sha256(text.encode()).hexdigest())
        if key not in self._names:
            if len(self._names) >= 4 * _PARSED_CACHE_SIZE:
                self._names.clear()
            self._names[key] = module_level_names(text)
        return self._names[key]

    def remove(
        self, repo: Path, index: SymbolIndex, *, target: str, strategy: Strategy, members: Sequence[str] = ()
    ) -> Removal:
        repo = Path(repo)
        if strategy == "feature":
            return remove_feature(repo, index, target, members, parse=self.parse,
                                  read_names=self.module_level_names)
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
        parsed = self.parse(repo, symbol.path)
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
            parsed = self.parse(repo, path)
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
            parsed = self.parse(repo, module_path)
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
        text = self.parse(repo, path).text
        removed = (target, *(q for q, s in index.symbols.items() if s.module == target))
        return Removal(
            strategy="module",
            target=target,
            removed=removed,
            files=dict(sorted(files.items())),
            removed_code={target: text},
        )

    # -- parsing ----------------------------------------------------------------------------------

    def parse(self, repo: Path, rel: str) -> _Parsed:
        """The file, parsed, with positions; kept by content."""
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



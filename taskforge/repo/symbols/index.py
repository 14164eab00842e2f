"""What :func:`~taskforge.repo.symbols.build_index` returns: the :class:`Symbol` records and the
:class:`SymbolIndex` with its reference graph, and the queries on it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = ["Symbol", "SymbolIndex", "SymbolKind"]


SymbolKind = Literal["function", "method", "class"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Symbol:
    """One function, method or class of the package."""

    qualname: str
    """``"pkg.mod:Class.method"``: the dotted module, ``:``, the dotted name inside the module."""
    module: str
    """The dotted module, ``"pkg"`` for ``pkg/__init__.py``."""
    path: str
    """Repository-relative POSIX path of the file."""
    kind: SymbolKind
    """``method`` for a function defined directly in a class body, else ``function`` or ``class``."""
    name: str
    """The bare name."""
    start_line: int
    """1-based first line of the definition, decorators included."""
    end_line: int
    """1-based last line of the definition's code (inclusive; trailing comments not included)."""
    signature: str
    """The header as written, on one line: ``"def f(a, b=1) -> int"``, ``"class C(Base)"``."""
    docstring: str | None
    """The docstring, cleaned like :func:`inspect.cleandoc`; None without one."""
    parent: str | None
    """Qualname of the enclosing class or function; None at module level."""

    @property
    def is_private(self) -> bool:
        return self.name.startswith("_") and not (self.name.startswith("__") and self.name.endswith("__"))


@dataclass(frozen=True, kw_only=True, slots=True)
class SymbolIndex:
    """The symbols of a package and its reference graph (see :mod:`taskforge.repo.symbols` for targets)."""

    repo: Path
    """The repository root every ``path`` is relative to."""
    symbols: dict[str, Symbol]
    """By qualname, in file then line order."""
    modules: dict[str, str]
    """Dotted module name -> repository-relative path."""
    references: dict[str, frozenset[str]]
    """Symbol qualname -> the symbols it uses or contains (a class contains its methods)."""
    referenced_by: dict[str, frozenset[str]]
    """The reverse of ``references``; module-level code appears as ``"<module pkg.mod>"``."""
    spans: dict[str, tuple[tuple[int, int], ...]]
    """Qualname -> (start_line, end_line) of every definition of that name, in line order."""
    uses: dict[str, frozenset[str]]
    """Referrer (qualname or ``"<module pkg.mod>"``) -> every target it uses: symbols, variables,
    import hops, modules. No containment edges, and an import statement alone is not a use."""
    used_by: dict[str, frozenset[str]]
    """The reverse of ``uses``."""
    imported_by: dict[str, frozenset[str]]
    """Target -> modules with an import statement (at any depth) that binds it."""
    imports: dict[str, frozenset[str]]
    """Module -> package modules it imports, or imports names from."""
    namespaces: dict[str, dict[str, frozenset[str]]]
    """Module -> module-level name (star imports included) -> the targets the name resolves to."""
    all_names: dict[str, tuple[str, ...]]
    """Module -> its literal ``__all__``, for the modules that define one."""
    line_owners: dict[str, tuple[str | None, ...]]
    """Path -> qualname of the innermost symbol owning each line (item 0 is line 1), or None."""
    import_time: frozenset[str]
    """Symbols that may run while the package is imported: those called (or used as decorators) by
    module-level code, class bodies, decorators and default values, every dunder method of a class
    instantiated then (its instances may be hashed, compared, called...), every method of an
    instance passed to a call then (``sys.meta_path.append(loader)``), a subclassed class's
    ``__init_subclass__``, and everything these use, transitively. Hollowing or deleting one could
    break the import itself."""

    def symbol_at(self, path: str, line: int) -> Symbol | None:
        """The innermost symbol whose span (any of its definitions) holds ``line`` of ``path``."""
        owners = self.line_owners.get(path)
        if owners is None or not 1 <= line <= len(owners):
            return None
        qualname = owners[line - 1]
        return None if qualname is None else self.symbols[qualname]

    def descendants(self, qualname: str) -> tuple[str, ...]:
        """Every symbol nested inside ``qualname`` (methods, nested functions and classes)."""
        prefix = qualname + "."
        return tuple(q for q in self.symbols if q.startswith(prefix))

    def exclusive_private_helpers(self, qualname: str) -> tuple[str, ...]:
        """Private symbols that only ``qualname`` (or another returned helper) uses, transitively.

        Candidates are the private module-level functions and classes of the target's module and,
        for a method, the private methods of its class. A candidate qualifies when it is used at
        least once, every use comes from the target, its nested definitions or other helpers, and
        no import statement anywhere in the package binds it. Containment does not count as a use.
        """
        target = self.symbols[qualname]
        same_class = target.parent if target.kind == "method" else None
        group = {qualname, *self.descendants(qualname)}
        candidates = [
            s.qualname
            for s in self.symbols.values()
            if s.module == target.module
            and s.is_private
            and s.qualname not in group
            and (s.parent is None or (same_class is not None and s.kind == "method" and s.parent == same_class))
        ]
        helpers: list[str] = []
        changed = True
        while changed:
            changed = False
            for candidate in candidates:
                if candidate in group:
                    continue
                inside = {candidate, *self.descendants(candidate)}
                users = self.used_by.get(candidate, frozenset()) - inside
                if users and users <= group and not self.imported_by.get(candidate):
                    helpers.append(candidate)
                    group |= inside
                    changed = True
        order = {q: i for i, q in enumerate(self.symbols)}
        return tuple(sorted(helpers, key=order.__getitem__))

    def importers(self, module: str) -> frozenset[str]:
        """Modules of the package that import ``module`` or names from it."""
        return frozenset(m for m, imported in self.imports.items() if module in imported and m != module)

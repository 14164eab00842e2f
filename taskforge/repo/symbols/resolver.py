"""Resolving every module's references by name, once all modules are scanned, into a :class:`SymbolIndex`."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from taskforge.repo.symbols.index import Symbol, SymbolIndex
from taskforge.repo.symbols.scanner import Binding, ModuleScan, Scope

__all__ = ["Resolver"]


class Resolver:
    """Resolves every module's references once all modules are scanned."""

    def __init__(self, repo: Path, scans: dict[str, ModuleScan]) -> None:
        self.repo = repo
        self.scans = scans
        self.class_scopes: dict[str, Scope] = {}
        self.class_bases: dict[str, list[tuple[Scope, tuple[str, ...]]]] = {}
        for scan in scans.values():
            self.class_scopes.update(scan.class_scopes)
            self.class_bases.update(scan.class_bases)
        self._lookups: dict[tuple[str, str], frozenset[str]] = {}
        self._active: set[tuple[str, str]] = set()
        self._names: dict[str, frozenset[str]] = {}
        self._mros: dict[str, tuple[str, ...]] = {}
        self._scope_modules = {id(scan.scope): scan.module for scan in scans.values()}
        # Variables assigned from a call (``x = Class(...)``): where, and what was called.
        self._constructed: dict[str, tuple[Scope, tuple[str, ...]]] = {}
        for scope in [*(scan.scope for scan in scans.values()), *self.class_scopes.values()]:
            for bindings in scope.names.values():
                for binding in bindings:
                    if binding[0] == "var" and len(binding) == 3:
                        self._constructed[binding[1]] = (scope, tuple(binding[2].split(".")))
        self._classes: dict[str, frozenset[str]] = {}
        self._constructing: set[tuple[int, str]] = set()

    # -- module namespaces ------------------------------------------------------------------------

    def names(self, module: str, _seen: frozenset[str] = frozenset()) -> frozenset[str]:
        """Every module-level name of ``module``, star-imported ones included."""
        if module in self._names:
            return self._names[module]
        scan = self.scans[module]
        out = set(scan.scope.names)
        for star in scan.stars:
            if star in self.scans and star not in _seen:
                out |= self.exported(star, _seen | {module})
        result = frozenset(out)
        if not _seen:
            self._names[module] = result
        return result

    def exported(self, module: str, _seen: frozenset[str] = frozenset()) -> frozenset[str]:
        """The names ``from module import *`` binds."""
        scan = self.scans[module]
        if scan.all_names is not None:
            return frozenset(scan.all_names)
        return frozenset(n for n in self.names(module, _seen) if not n.startswith("_"))

    def lookup(self, module: str, name: str) -> frozenset[str]:
        """Targets of ``module.name``: the binding's targets, a star import's, or a submodule."""
        key = (module, name)
        if key in self._lookups:
            return self._lookups[key]
        if key in self._active or module not in self.scans:
            return frozenset()
        self._active.add(key)
        scan = self.scans[module]
        out: set[str] = set()
        bindings = scan.scope.names.get(name)
        if bindings:
            for binding in bindings:
                out |= self.binding_targets(binding)
        else:
            for star in scan.stars:
                if star in self.scans and name in self.exported(star):
                    out.add(f"{star}:{name}")
                    out |= self.lookup(star, name)
        if f"{module}.{name}" in self.scans:
            out.add(f"{module}.{name}")
        self._active.discard(key)
        result = frozenset(out)
        self._lookups[key] = result
        return result

    def binding_targets(self, binding: Binding) -> frozenset[str]:
        kind = binding[0]
        if kind in ("symbol", "var"):
            return frozenset({binding[1]})
        if kind == "module":
            return frozenset({binding[1]}) if binding[1] in self.scans else frozenset()
        if kind == "from":
            source, name = binding[1], binding[2]
            if source not in self.scans:
                return frozenset()
            return frozenset({f"{source}:{name}"}) | self.lookup(source, name)
        return frozenset()

    # -- classes ----------------------------------------------------------------------------------

    def mro(self, cls: str) -> tuple[str, ...]:
        """The class and its in-package bases, depth first, each once."""
        if cls in self._mros:
            return self._mros[cls]
        self._mros[cls] = (cls,)  # guards a cycle
        order = [cls]
        for scope, chain in self.class_bases.get(cls, ()):
            for value in self._resolve_chain(scope, chain)[1]:
                if value in self.class_scopes:
                    order.extend(b for b in self.mro(value) if b not in order)
        self._mros[cls] = tuple(order)
        return self._mros[cls]

    def member(self, cls: str, attr: str, *, skip_self: bool = False) -> frozenset[str]:
        for klass in self.mro(cls)[1 if skip_self else 0 :]:
            bindings = self.class_scopes[klass].names.get(attr)
            if bindings:
                out: set[str] = set()
                for binding in bindings:
                    out |= self.binding_targets(binding)
                return frozenset(out)
        return frozenset()

    def classes_of(self, variable: str) -> frozenset[str]:
        """In-package classes a variable is an instance of, when it was assigned ``Class(...)``."""
        if variable in self._classes:
            return self._classes[variable]
        self._classes[variable] = frozenset()  # guards ``x = x.copy()``
        if variable in self._constructed:
            scope, chain = self._constructed[variable]
            called = self._resolve_chain(scope, chain)[1]
            self._classes[variable] = frozenset(c for c in called if c in self.class_scopes)
        return self._classes[variable]

    def _constructed_classes(self, scope: Scope, callee: str) -> set[str]:
        key = (id(scope), callee)
        if key in self._constructing:  # ``x = x.copy()``
            return set()
        self._constructing.add(key)
        called = self._resolve_chain(scope, tuple(callee.split(".")))[1]
        self._constructing.discard(key)
        return {c for c in called if c in self.class_scopes}

    # -- references -------------------------------------------------------------------------------

    def _name_values(self, scope: Scope, name: str) -> tuple[set[str], set[str]]:
        """(instance classes, targets) a bare name can denote, following Python's scoping."""
        current: Scope | None = scope
        first = True
        while current is not None:
            if current.kind == "module":
                break
            if (current.kind != "class" or first) and name in current.names and name not in current.globals:
                instances, targets = set(), set()
                for binding in current.names[name]:
                    if binding[0] == "self":
                        instances.add(binding[1])
                    elif binding[0] == "local" and len(binding) == 3:
                        instances |= self._constructed_classes(current, binding[2])
                    else:
                        targets |= self.binding_targets(binding)
                return instances, targets
            first = False
            current = current.parent
        module_scope = current if current is not None else scope
        module = self._module_of(module_scope)
        return set(), set(self.lookup(module, name))

    def _module_of(self, module_scope: Scope) -> str:
        return self._scope_modules[id(module_scope)]

    def _resolve_chain(
        self, scope: Scope, chain: tuple[str, ...], *, via_super: bool = False
    ) -> tuple[set[str], set[str]]:
        """(every target the chain touches, the targets of its last link)."""
        if via_super:
            assert scope.cls is not None
            instances: set[str] = set()
            values = set(self.member(scope.cls, chain[0], skip_self=True))
        else:
            instances, values = self._name_values(scope, chain[0])
        touched = set(values)
        for attr in chain[1:]:
            following: set[str] = set()
            for cls in instances:
                following |= self.member(cls, attr)
            for value in values:
                if value in self.class_scopes:
                    following |= self.member(value, attr)
                elif value in self.scans:
                    following |= self.lookup(value, attr)
                else:
                    for cls in self.classes_of(value):
                        following |= self.member(cls, attr)
            instances, values = set(), following
            touched |= following
            if not values:
                break
        return touched, values

    def index(self) -> SymbolIndex:
        symbols: dict[str, Symbol] = {}
        spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
        owners: dict[str, list[str | None]] = {}
        for scan in self.scans.values():
            lines: list[str | None] = [None] * scan.line_count
            for d in scan.defs:
                spans[d.qualname].append(d.span)
                symbol = Symbol(
                    qualname=d.qualname,
                    module=scan.module,
                    path=scan.path,
                    kind=d.kind,
                    name=d.name,
                    start_line=d.span[0],
                    end_line=d.span[1],
                    signature=d.signature,
                    docstring=d.docstring,
                    parent=d.parent,
                )
                symbols[d.qualname] = symbol  # a redefinition replaces the value, keeps the order
                # Pre-order: nested definitions come later and overwrite their lines.
                for line in range(d.span[0], min(d.span[1], scan.line_count) + 1):
                    lines[line - 1] = d.qualname
            owners[scan.path] = lines
        uses: dict[str, set[str]] = defaultdict(set)
        imported_by: dict[str, set[str]] = defaultdict(set)
        imports: dict[str, set[str]] = defaultdict(set)
        for scan in self.scans.values():
            for ref in scan.refs:
                touched, _ = self._resolve_chain(ref.scope, ref.chain, via_super=ref.via_super)
                uses[ref.referrer] |= touched
            for binding, modules in scan.import_events:
                targets = self.binding_targets(binding) | {m for m in modules if m in self.scans}
                for target in targets:
                    imported_by[target].add(scan.module)
                imports[scan.module] |= {m for m in modules if m in self.scans}
                if binding[0] == "from" and binding[1] in self.scans:
                    imports[scan.module].add(binding[1])
            imports.setdefault(scan.module, set())
        for referrer, targets in uses.items():
            targets.discard(referrer)
        references: dict[str, set[str]] = {q: set() for q in symbols}
        for referrer, targets in uses.items():
            if referrer in references:
                references[referrer] |= {t for t in targets if t in symbols}
        for symbol in symbols.values():
            if symbol.parent is not None:
                references[symbol.parent].add(symbol.qualname)
        referenced_by: dict[str, set[str]] = {q: set() for q in symbols}
        for referrer, targets in references.items():
            for target in targets:
                referenced_by[target].add(referrer)
        for referrer, targets in uses.items():
            if referrer.startswith("<module "):
                for target in targets:
                    if target in symbols:
                        referenced_by[target].add(referrer)
        used_by: dict[str, set[str]] = defaultdict(set)
        for referrer, targets in uses.items():
            for target in targets:
                used_by[target].add(referrer)
        namespaces = {m: {n: self.lookup(m, n) for n in sorted(self.names(m))} for m in self.scans}
        import_time = self._import_time(symbols, uses)
        return SymbolIndex(
            repo=self.repo,
            symbols=symbols,
            modules={m: scan.path for m, scan in self.scans.items()},
            references=_freeze(references),
            referenced_by=_freeze(referenced_by),
            spans={q: tuple(spans[q]) for q in symbols},
            uses=_freeze(uses),
            used_by=_freeze(used_by),
            imported_by=_freeze(imported_by),
            imports=_freeze(imports),
            namespaces=namespaces,
            all_names={m: tuple(s.all_names) for m, s in self.scans.items() if s.all_names is not None},
            line_owners={path: tuple(lines) for path, lines in owners.items()},
            import_time=import_time,
        )

    def _import_time(self, symbols: dict[str, Symbol], uses: dict[str, set[str]]) -> frozenset[str]:
        def constructors(cls: str) -> set[str]:
            # An instance that exists during the import can have any of its dunders called
            # implicitly (hash, eq, get, call...): count them all.
            dunders = {n for k in self.mro(cls) for n in self.class_scopes[k].names if n[:2] == n[-2:] == "__"}
            return {t for name in sorted(dunders) for t in self.member(cls, name) if t in symbols}

        def methods(cls: str) -> set[str]:
            names = {n for k in self.mro(cls) for n in self.class_scopes[k].names}
            return {t for name in sorted(names) for t in self.member(cls, name) if t in symbols}

        # Classes are never in the set (their bodies ran when they were defined); what calling
        # one runs is its dunders.
        reached: set[str] = set()
        for scan in self.scans.values():
            for scope, chain, kind in scan.import_calls:
                for target in self._resolve_chain(scope, chain)[1]:
                    if kind == "escape":
                        for cls in self.classes_of(target):
                            reached |= methods(cls)
                    elif target in self.class_scopes:
                        if kind == "call":
                            reached |= constructors(target)
                        else:
                            reached |= {t for t in self.member(target, "__init_subclass__") if t in symbols}
                    elif kind == "call" and target in symbols:
                        reached.add(target)
        todo = sorted(reached)
        while todo:
            for target in uses.get(todo.pop(), ()):
                if target in self.class_scopes:
                    new = constructors(target)
                elif target in symbols:
                    new = {target}
                else:
                    continue
                for item in sorted(new - reached):
                    reached.add(item)
                    todo.append(item)
        return frozenset(reached)


def _freeze(mapping: dict[str, set[str]]) -> dict[str, frozenset[str]]:
    return {key: frozenset(values) for key, values in sorted(mapping.items())}

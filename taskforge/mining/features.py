"""Feature-level candidates: the code a coherent group of tests exclusively reaches.

A *unit* is what a feature removal deletes whole: a module-level function or class, or a method of
a module-level class (nested definitions go with the unit around them). A *group* of tests is a
test file, a test class, or the tests that exercise one public unit. For each group:

1. the units it exclusively reaches: every unit whose exercising tests (per-test coverage, see
   :func:`taskforge.mining.candidates.tests_by_symbol`) are all in the group;
2. their closure of exclusive callees: units no test executed (error paths, rarely used helpers)
   and module-level constants, whose every user in the package is already in the set;
3. pruned to what the rest of the package can live without: a unit any code outside the set uses
   (by the symbol index's reference graph), or that runs while the package is imported, leaves it.
   Code that only *registers* a unit (an entry of a dispatch table, a name in ``__all__``, an
   import that re-exports it, a command-line option and the branch it guards, see
   :mod:`taskforge.mining.removal.switches`) does not keep it: the removal takes the entry out;
4. split into connected parts: two units belong together when one uses the other, they are
   methods of one class, or the same tests exercise them (Jaccard similarity of at least one half).

Each part with enough symbols is a :class:`Feature`, and so is the whole set when it has several
parts. Features found from several groups are one.
Dunder methods and the methods of decorated classes (``dataclass``, ``total_ordering``) are never
units of their own: their class's behaviour depends on them in ways no reference shows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from taskforge.difficulty import chain_depth
from taskforge.mining.removal.feature import module_variables, simple_name
from taskforge.mining.removal.switches import Switches, package_switches
from taskforge.repo.symbols import SymbolIndex

__all__ = ["Feature", "feature_units", "find_features"]

_MAX_GROUPS = 4000
"""Groups examined at most (test files and classes first, then per-unit groups by size)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Feature:
    """One feature: what a ``feature`` removal deletes, and the tests that exercise it."""

    anchor: str
    """The public unit its tests exercise most: the task's target."""
    members: tuple[str, ...]
    """Symbol qualnames (units) and module-level variables (``"pkg.mod:NAME"``), in index order."""
    tests: frozenset[str]
    files: tuple[str, ...]
    """Files the removal changes: where the members are, and where they are imported."""
    size: int
    """Lines of the removed definitions."""
    depth: int
    """Longest chain of uses among the members (1: none uses another)."""
    symbols: int
    """How many of the members are functions, methods or classes (the rest are variables)."""


class _Graph:
    """The index seen as units: who uses each unit, what each unit uses."""

    def __init__(self, index: SymbolIndex, exercised: Mapping[str, frozenset[str]],
                 switches: Switches | None = None) -> None:
        self.index = index
        self.exercised = exercised
        self.switches = switches or Switches()
        symbols = index.symbols
        self.unit_of: dict[str, str] = {q: self._unit(q) for q in symbols}
        decorated = {q for q, s in symbols.items() if s.kind == "class" and _has_decorator(index, q)}
        self.units = [
            q for q, unit in self.unit_of.items()
            if unit == q and not (symbols[q].kind == "method" and (_dunder(symbols[q].name) or symbols[q].parent in decorated))
        ]
        unit_set = set(self.units)
        self.owner = {q: (u if u in unit_set else self._class_unit(u)) for q, u in self.unit_of.items()}
        self.variables = module_variables(index)
        self.users: dict[str, frozenset[str]] = {}
        self.uses: dict[str, set[str]] = defaultdict(set)
        for unit in [*self.units, *self.variables]:
            inside = {unit, *index.descendants(unit)} if unit in symbols else {unit}
            found: set[str] = set()
            for member in inside:
                for user in index.used_by.get(member, ()):
                    if user in inside:
                        continue
                    mapped = self.owner.get(user, user)
                    found.add(mapped)
                    self.uses[mapped].add(unit)
            self.users[unit] = frozenset(found)

    def _unit(self, qualname: str) -> str:
        symbol = self.index.symbols[qualname]
        if symbol.parent is None or symbol.parent not in self.index.symbols:
            return qualname
        parent = self.index.symbols[symbol.parent]
        if parent.kind == "class" and parent.parent is None and symbol.kind == "method":
            return qualname
        return self._unit(symbol.parent)

    def _class_unit(self, qualname: str) -> str:
        """A dunder method's (or a decorated class's method's) owner: its class."""
        parent = self.index.symbols[qualname].parent
        return parent if parent is not None else qualname

    def tests_of(self, unit: str) -> frozenset[str]:
        return self.exercised.get(unit, frozenset())

    def switched(self, user: str, unit: str) -> bool:
        """``user`` reaches ``unit`` only through command-line switches that can be cut."""
        return bool(self.switches.cuts_for(user, [simple_name(unit)]))


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _has_decorator(index: SymbolIndex, qualname: str) -> bool:
    symbol = index.symbols[qualname]
    try:
        first = (index.repo / symbol.path).read_text(encoding="utf-8").splitlines()[symbol.start_line - 1]
    except (OSError, IndexError, UnicodeDecodeError):
        return False
    return first.lstrip().startswith("@")


def feature_units(
    graph: _Graph, group: frozenset[str], by_test: Mapping[str, set[str]]
) -> set[str]:
    """Steps 1 to 3 for one group: the units and variables the group's tests exclusively reach
    and the package can do without."""
    index = graph.index
    reached: set[str] = set()
    for test in group:
        reached |= by_test.get(test, set())
    members = {u for u in reached if graph.tests_of(u) and graph.tests_of(u) <= group}
    # A class in the set takes its methods' place.
    classes = {u for u in members if index.symbols[u].kind == "class"}
    members = {u for u in members if index.symbols[u].parent not in classes}

    def inside(user: str) -> bool:
        return user in members or any(user.startswith(c + ".") for c in classes)

    frontier = list(members)
    while frontier:  # the closure of exclusive callees
        used = {u for m in frontier for u in graph.uses.get(m, ())}
        frontier = []
        for unit in sorted(used):
            if unit in members or graph.tests_of(unit) or unit in index.import_time:
                continue
            if unit in graph.variables and index.imported_by.get(unit):
                continue
            if unit in index.symbols and index.symbols[unit].parent in classes:
                continue  # its class goes whole already
            users = graph.users.get(unit, frozenset())
            if users and all(inside(u) or graph.switched(u, unit) for u in users) and any(inside(u) for u in users):
                members.add(unit)
                frontier.append(unit)
    changed = True
    while changed:  # what the rest of the package still needs stays
        changed = False
        for unit in sorted(members):
            users = graph.users.get(unit, frozenset())
            blocked = unit in index.import_time or any(
                not inside(u) and not (u.startswith("<module ") and unit not in graph.variables)
                and not graph.switched(u, unit) for u in users
            )
            if blocked:
                members.discard(unit)
                changed = True
    return members


def _parts(graph: _Graph, members: set[str]) -> list[set[str]]:
    """Step 4: the connected parts of a group's units."""
    index = graph.index
    parent: dict[str, str] = {m: m for m in members}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def join(a: str, b: str) -> None:
        parent[find(a)] = find(b)

    ordered = sorted(members)
    for member in ordered:
        for used in graph.uses.get(member, ()):
            if used in members:
                join(member, used)
        for user in graph.users.get(member, ()):
            if user in members:
                join(member, user)
        symbol = index.symbols.get(member)
        if symbol is not None and symbol.parent is not None and symbol.parent in members:
            join(member, symbol.parent)
    by_class: dict[str, list[str]] = defaultdict(list)
    for member in ordered:
        symbol = index.symbols.get(member)
        if symbol is not None and symbol.kind == "method" and symbol.parent is not None:
            by_class[symbol.parent].append(member)
    for methods in by_class.values():
        for other in methods[1:]:
            join(methods[0], other)
    tested = [m for m in ordered if graph.tests_of(m)]
    for i, a in enumerate(tested):
        ta = graph.tests_of(a)
        for b in tested[i + 1:]:
            tb = graph.tests_of(b)
            if len(ta & tb) * 2 >= len(ta | tb):
                join(a, b)
    parts: dict[str, set[str]] = defaultdict(set)
    for member in ordered:
        parts[find(member)].add(member)
    return list(parts.values())


def _groups(graph: _Graph, passing: Iterable[str]) -> list[frozenset[str]]:
    files: dict[str, set[str]] = defaultdict(set)
    classes: dict[str, set[str]] = defaultdict(set)
    for test in passing:
        parts = test.split("::")
        files[parts[0]].add(test)
        if len(parts) > 2:
            classes["::".join(parts[:2])].add(test)
    groups = [frozenset(g) for g in files.values()] + [frozenset(g) for g in classes.values()]
    per_unit = sorted(
        {graph.tests_of(u) for u in graph.units if graph.tests_of(u) and not graph.index.symbols[u].is_private},
        key=lambda g: (len(g), sorted(g)),
    )
    seen: set[frozenset[str]] = set()
    out: list[frozenset[str]] = []
    for group in [*groups, *per_unit]:
        if group not in seen:
            seen.add(group)
            out.append(group)
    return out[:_MAX_GROUPS]


def find_features(
    index: SymbolIndex,
    exercised: Mapping[str, frozenset[str]],
    passing: Iterable[str],
    *,
    max_tests: int,
    min_symbols: int = 2,
) -> list[Feature]:
    """Every feature of at least ``min_symbols`` symbols whose tests number at most ``max_tests``,
    in a deterministic order (by anchor, then members)."""
    graph = _Graph(index, exercised, package_switches(index, _texts(index)))
    passing = sorted(set(passing))
    by_test: dict[str, set[str]] = defaultdict(set)
    for unit in graph.units:
        for test in graph.tests_of(unit):
            by_test[test].add(unit)
    order = {q: i for i, q in enumerate(index.symbols)}
    found: dict[frozenset[str], Feature] = {}
    for group in _groups(graph, passing):
        members = feature_units(graph, group, by_test)
        parts = _parts(graph, members)
        # The group's whole exclusive code is a feature too: a test file's tests of reading and
        # writing a format reach two parts that share no reference.
        for part in [*parts, *([members] if len(parts) > 1 else [])]:
            key = frozenset(part)
            if key in found:
                continue
            symbols = [m for m in part if m in index.symbols]
            if len(symbols) < min_symbols:
                continue
            tests = frozenset().union(*(graph.tests_of(m) for m in symbols))
            if not tests or len(tests) > max_tests:
                continue
            public = [m for m in symbols if not _private_path(index, m)]
            if not public:
                continue
            anchor = min(public, key=lambda m: (-len(graph.tests_of(m)), -_lines(index, m), m))
            files = {index.symbols[m].path for m in symbols}
            files |= {index.modules[m.partition(":")[0]] for m in part if m not in index.symbols}
            for member in part:
                for module in index.imported_by.get(member, ()):
                    if module in index.modules:
                        files.add(index.modules[module])
            found[key] = Feature(
                anchor=anchor,
                members=tuple(sorted(part, key=lambda m: (order.get(m, len(order)), m))),
                tests=tests,
                files=tuple(sorted(files)),
                size=sum(_lines(index, m) if m in index.symbols else 1 for m in part),
                depth=chain_depth(part, graph.uses),
                symbols=len(symbols),
            )
    return sorted(found.values(), key=lambda f: (f.anchor, f.members))


def _texts(index: SymbolIndex) -> dict[str, str]:
    texts = {}
    for path in index.modules.values():
        try:
            texts[path] = (index.repo / path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
    return texts


def _lines(index: SymbolIndex, qualname: str) -> int:
    return sum(end - start + 1 for start, end in index.spans.get(qualname, ()))


def _private_path(index: SymbolIndex, qualname: str) -> bool:
    module, _, local = qualname.partition(":")
    return any(part.startswith("_") and not _dunder(part) for part in (*module.split("."), *local.split(".")))

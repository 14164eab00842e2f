"""Index a package's functions, methods and classes, and who references whom, with libcst.

``build_index(repo, package_paths=["src/pkg"])`` parses every ``.py`` file under the package paths
(test files left out) and returns a :class:`SymbolIndex`: one :class:`Symbol` per qualified name
(``"pkg.mod:Class.method"``), with its span, one-line signature and docstring, plus the package's
reference graph. Nothing is imported or run: this is a reading of the source.

Qualified names follow the nesting of ``def`` and ``class`` only: a function nested in ``f`` is
``mod:f.inner`` (no ``<locals>``), and definitions under ``if``/``try``/``with`` blocks belong to
the scope around the block. A name defined more than once in one scope (``@overload`` stubs, a
property's setter, ``try``/``except ImportError`` fallbacks) is one symbol: its fields describe the
last definition, the one that wins at run time, and :attr:`SymbolIndex.spans` lists every one.

References are resolved by name, statically. A *target* is a string:

* ``"pkg.mod:Name"`` or ``"pkg.mod:Class.attr"``: a name in a module's (or a class's) namespace;
  a symbol's qualname when the name is a ``def``/``class``, else a module-level variable, a class
  attribute, or a name the module imports (an import *hop*: using a re-exported name uses every
  module it passes through, so removing any of them is seen);
* ``"pkg.mod"``: a module of the package, used as an object (``keys.hashkey`` uses ``pkg.keys``).

What resolves:

* module-level names, and names of enclosing functions' nested definitions, with Python's scoping
  (a class body's names are visible to the class body only, not to its methods);
* imports: ``import pkg.x``, ``import pkg.x as m`` then ``m.f``, ``from .x import y``, ``from pkg.x
  import y as z``, ``from . import mod``, star imports (through ``__all__`` when it is a literal),
  and re-export chains through any number of modules; imports inside functions too;
* ``self.attr`` and ``cls.attr`` (the first parameter of a method that is not a ``staticmethod``),
  ``Class.attr``, ``super().attr``, and ``x.attr`` where ``x = Class(...)`` (a variable or local
  assigned from a call to a package class): looked up in the class, then its in-package bases,
  depth first;
* code belongs to the innermost enclosing definition; a definition's decorators, default values,
  annotations and base classes belong to it; code outside any definition is ``"<module pkg.mod>"``;
* a class references its methods and nested classes, and a function its nested definitions
  (*containment*; kept in :attr:`SymbolIndex.references`, left out of :attr:`SymbolIndex.uses`).

:attr:`SymbolIndex.import_time` over-approximates what runs while the package is imported, so
that a removal never breaks the import itself (see the field).

Limits (the graph errs towards extra edges; a missing edge is a name the resolver cannot see):

* attributes of anything else are not resolved: ``param.method()``, ``self.helper_obj.method()``,
  ``type(self).method`` are invisible, so a method can be used where the index shows no reference;
* dynamic access is invisible: ``getattr(obj, "name")``, ``globals()["name"]``,
  ``importlib.import_module("pkg.mod")``, names in string annotations, ``__all__`` built at run time;
* local variables shadow a global name for the whole function, but comprehension and lambda
  variables shadow only inside them, and a ``match`` capture pattern counts as a use of its name;
* ``self.x`` in a base class resolves to the base's own ``x`` (or one of its bases'), never to
  an override in a subclass;
* an import of a module outside the package resolves to nothing: only package code is indexed.

A file that does not parse raises ``TaskforgeError(reason="syntax_error")``.
"""

from __future__ import annotations

import io
import tokenize
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from taskforge.errors import TaskforgeError
from taskforge.repo.testfiles import DEFAULT_LAYOUT, TestLayout, is_test_path

__all__ = ["Symbol", "SymbolIndex", "SymbolKind", "build_index", "is_test_path"]

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
    """The symbols of a package and its reference graph (see the module docstring for targets)."""

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


def build_index(repo: Path, *, package_paths: Sequence[str], layout: TestLayout = DEFAULT_LAYOUT) -> SymbolIndex:
    """Index every non-test ``.py`` file under ``package_paths`` (repo-relative packages or modules);
    which files are tests is ``layout``'s answer (the project's pytest configuration).

    Dotted module names come from each file's path relative to its package path's parent:
    ``src/iniconfig/_parse.py`` under ``src/iniconfig`` is ``iniconfig._parse``.
    """
    repo = Path(repo)
    if not package_paths:
        raise ValueError("package_paths must name at least one package or module")
    files: dict[str, str] = {}  # module -> repo-relative path
    for package_path in package_paths:
        for module, rel in _package_files(repo, package_path, layout):
            files.setdefault(module, rel)
    scans: dict[str, _ModuleScan] = {}
    for module, rel in sorted(files.items(), key=lambda item: item[1]):
        scans[module] = _scan_file(repo, rel, module)
    return _Resolver(repo, scans).index()


# --- files and modules ---------------------------------------------------------------------------


def _package_files(repo: Path, package_path: str, layout: TestLayout) -> Iterator[tuple[str, str]]:
    root = repo / package_path
    if root.is_file():
        if root.suffix != ".py":
            raise ValueError(f"package path {package_path!r} is not a .py file or a directory")
        yield root.stem, PurePosixPath(package_path).as_posix()
        return
    if not root.is_dir():
        raise ValueError(f"package path {package_path!r} does not exist under {repo}")
    base = root.parent
    for path in sorted(root.rglob("*.py")):
        rel_to_base = PurePosixPath(path.relative_to(base).as_posix())
        parts = list(rel_to_base.with_suffix("").parts)
        if layout.is_test_file(path.relative_to(root).as_posix()) or not all(p.isidentifier() for p in parts):
            continue
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join(parts), path.relative_to(repo).as_posix()


def absolute_module(module: str, *, is_package: bool, level: int, name: str | None) -> str | None:
    """The dotted module a (possibly relative) ``from ... import`` names; None if it climbs out."""
    if level == 0:
        return name
    parts = module.split(".")
    if not is_package:
        parts.pop()
    if level > 1:
        if level - 1 > len(parts):
            return None
        parts = parts[: len(parts) - (level - 1)]
    if not parts and not name:
        return None
    return ".".join([*parts, *([name] if name else [])])


def dotted_name(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted_name(node.value)
        return None if head is None else f"{head}.{node.attr.value}"
    return None


def literal_strings(node: cst.BaseExpression) -> list[str] | None:
    """The strings of a list or tuple literal made only of plain strings, else None."""
    if not isinstance(node, (cst.List, cst.Tuple)):
        return None
    out = []
    for element in node.elements:
        value = element.value
        if not isinstance(value, cst.SimpleString) or isinstance(element, cst.StarredElement):
            return None
        evaluated = value.evaluated_value
        if not isinstance(evaluated, str):
            return None
        out.append(evaluated)
    return out


def parse_source(text: str, rel: str) -> cst.Module:
    """Parse a file with libcst; a syntax error becomes ``TaskforgeError(reason="syntax_error")``."""
    try:
        return cst.parse_module(text)
    except cst.ParserSyntaxError as err:
        message = f"{rel}: syntax error at line {err.raw_line}: {err.message}"
        raise TaskforgeError(message, reason="syntax_error") from err


def render_module(tree: cst.Module, original: str) -> str:
    """The text of an edited tree, faithful to the original file's framing: a byte-order mark
    (libcst drops it) stays, and when the original lacks a final newline and its tail was
    removed, the line that is now last keeps the newline it had."""
    text = tree.code
    if original.startswith("\ufeff") and not text.startswith("\ufeff"):
        text = "\ufeff" + text
    if not original.endswith("\n") and not text.endswith(original.rpartition("\n")[2]):
        text += "\n"
    return text


def read_source(path: Path, rel: str) -> str:
    """A source file's text, exactly (no newline translation)."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise TaskforgeError(f"{rel}: not UTF-8 ({err.reason})", reason="syntax_error") from err


# --- scanning one file ---------------------------------------------------------------------------

# A binding is what a name is bound to in a scope:
#   ("symbol", qualname)     a def or class
#   ("var", target)          an assignment at module or class level: "pkg.mod:NAME" / "pkg.mod:C.NAME"
#   ("local", "")            a function-local variable or parameter: opaque, resolves to nothing
#                            (both take a third item, the dotted callee, for ``x = Class(...)``)
#   ("module", dotted)       ``import dotted`` / ``import a.b as m``
#   ("from", dotted, name)   ``from dotted import name``
#   ("self", class_qualname) the first parameter of a method
_Binding = tuple[str, ...]


class _Scope:
    __slots__ = ("cls", "globals", "kind", "names", "owner", "parent")

    def __init__(self, kind: str, parent: _Scope | None, owner: str | None) -> None:
        self.kind = kind  # "module" | "class" | "function" | "local" (lambda, comprehension)
        self.parent = parent
        self.owner = owner  # qualname of the class or function, None otherwise
        self.names: dict[str, list[_Binding]] = {}
        self.globals: set[str] = set()
        # The class whose method this scope is (or is nested in), for super().
        self.cls: str | None = parent.cls if parent is not None else None

    def bind(self, name: str, binding: _Binding) -> None:
        self.names.setdefault(name, []).append(binding)


@dataclass(slots=True)
class _Def:
    qualname: str
    kind: SymbolKind
    name: str
    span: tuple[int, int]
    signature: str
    docstring: str | None
    parent: str | None


@dataclass(slots=True)
class _Ref:
    referrer: str
    scope: _Scope
    chain: tuple[str, ...]
    via_super: bool = False


@dataclass(slots=True)
class _ModuleScan:
    module: str
    path: str
    is_package: bool
    line_count: int
    scope: _Scope
    defs: list[_Def]
    refs: list[_Ref]
    class_scopes: dict[str, _Scope]
    class_bases: dict[str, list[tuple[_Scope, tuple[str, ...]]]]
    stars: list[str]
    all_names: list[str] | None
    # (binding, modules the statement imports) for every import alias, at any depth
    import_events: list[tuple[_Binding, tuple[str, ...]]]
    # Chains called ("call"), subclassed ("base") or passed as arguments ("escape") by code that
    # runs at import time.
    import_calls: list[tuple[_Scope, tuple[str, ...], str]]


def _scan_file(repo: Path, rel: str, module: str) -> _ModuleScan:
    text = read_source(repo / rel, rel)
    tree = parse_source(text, rel)
    wrapper = MetadataWrapper(tree, unsafe_skip_copy=True)
    scanner = _Scanner(module=module, is_package=PurePosixPath(rel).name == "__init__.py", tree=tree)
    wrapper.visit(scanner)
    return _ModuleScan(
        module=module,
        path=rel,
        is_package=scanner.is_package,
        line_count=len(text.splitlines()),
        scope=scanner.module_scope,
        defs=scanner.defs,
        refs=scanner.refs,
        class_scopes=scanner.class_scopes,
        class_bases=scanner.class_bases,
        stars=scanner.stars,
        all_names=scanner.all_names,
        import_events=scanner.import_events,
        import_calls=scanner.import_calls,
    )


def definition_span(
    node: cst.FunctionDef | cst.ClassDef, position: Callable[[cst.CSTNode], CodeRange]
) -> tuple[int, int]:
    """(first line including decorators, last line of code) of a definition."""
    start = min([position(node).start.line, *(position(d).start.line for d in node.decorators)])
    return start, position(node).end.line


class _Scanner(cst.CSTVisitor):
    """Collects definitions, bindings and unresolved references of one module."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, *, module: str, is_package: bool, tree: cst.Module) -> None:
        super().__init__()
        self.module = module
        self.is_package = is_package
        self.tree = tree
        self.module_scope = _Scope("module", None, None)
        self.scope = self.module_scope
        self.referrer = f"<module {module}>"
        self.stack: list[str] = []
        self.defs: list[_Def] = []
        self.refs: list[_Ref] = []
        self.class_scopes: dict[str, _Scope] = {}
        self.class_bases: dict[str, list[tuple[_Scope, tuple[str, ...]]]] = {}
        self.stars: list[str] = []
        self.all_names: list[str] | None = None
        self.import_events: list[tuple[_Binding, tuple[str, ...]]] = []
        self.import_calls: list[tuple[_Scope, tuple[str, ...], str]] = []
        self.body_depth = 0  # > 0 inside a function or lambda body: code that does not run at import
        self.construction: str | None = None  # ``x = Class(...)``: the called chain, while binding x

    # -- helpers ----------------------------------------------------------------------------------

    def _position(self, node: cst.CSTNode) -> CodeRange:
        return self.get_metadata(PositionProvider, node)

    def _qualname(self, name: str) -> str:
        return f"{self.module}:{'.'.join([*self.stack, name])}"

    def _use(self, chain: tuple[str, ...], *, via_super: bool = False) -> None:
        self.refs.append(_Ref(self.referrer, self.scope, chain, via_super))

    def _bind_name(self, name: str) -> None:
        scope = self.scope
        # ``x = Class(...)`` remembers the call, so that ``x.method`` can resolve to Class.method.
        extra = () if self.construction is None else (self.construction,)
        if scope.kind == "module" or name in scope.globals:
            self.module_scope.bind(name, ("var", f"{self.module}:{name}", *extra))
        elif scope.kind == "class":
            scope.bind(name, ("var", f"{scope.owner}.{name}", *extra))
        else:
            scope.bind(name, ("local", "", *extra))

    def _bind_target(self, target: cst.BaseExpression) -> None:
        if isinstance(target, cst.Name):
            self._bind_name(target.value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._bind_target(element.value)
        elif isinstance(target, cst.StarredElement):
            self._bind_target(target.value)
        else:  # obj.attr = ..., obj[key] = ...: the object is used
            target.visit(self)

    def _visit_all(self, *nodes: cst.CSTNode | None) -> None:
        for node in nodes:
            if node is not None:
                node.visit(self)

    def _record_all(self, node: cst.BaseSmallStatement) -> None:
        """Note a literal ``__all__`` (assignment, ``+=``, ``.extend``, ``.append``) at module level."""
        if self.scope is not self.module_scope:
            return
        if isinstance(node, cst.Assign) and any(
            isinstance(t.target, cst.Name) and t.target.value == "__all__" for t in node.targets
        ):
            self.all_names = literal_strings(node.value)
        elif isinstance(node, cst.AnnAssign) and dotted_name(node.target) == "__all__" and node.value is not None:
            self.all_names = literal_strings(node.value)
        elif isinstance(node, cst.AugAssign) and dotted_name(node.target) == "__all__" and self.all_names is not None:
            more = literal_strings(node.value)
            self.all_names = None if more is None else [*self.all_names, *more]

    # -- definitions ------------------------------------------------------------------------------

    def _add_def(self, node: cst.FunctionDef | cst.ClassDef, kind: SymbolKind) -> str:
        qualname = self._qualname(node.name.value)
        parent = f"{self.module}:{'.'.join(self.stack)}" if self.stack else None
        self.defs.append(
            _Def(
                qualname=qualname,
                kind=kind,
                name=node.name.value,
                span=definition_span(node, self._position),
                signature=_signature(self.tree, node),
                docstring=node.get_docstring(clean=True),
                parent=parent,
            )
        )
        if self.scope.kind in ("module", "class", "function"):
            self.scope.bind(node.name.value, ("symbol", qualname))
        else:
            self.scope.bind(node.name.value, ("local", ""))
        return qualname

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        is_method = self.scope.kind == "class"
        qualname = self._add_def(node, "method" if is_method else "function")
        outer_referrer, self.referrer = self.referrer, qualname
        # Decorators, annotations and defaults run in the enclosing scope, but belong to this def.
        self._note_decorators(node)
        self._visit_all(*node.decorators)
        params = node.params
        every_param = [
            *params.posonly_params,
            *params.params,
            *([params.star_arg] if isinstance(params.star_arg, cst.Param) else []),
            *params.kwonly_params,
            *([params.star_kwarg] if params.star_kwarg is not None else []),
        ]
        for param in every_param:
            self._visit_all(param.annotation, param.default)
        if node.returns is not None:
            node.returns.visit(self)
        scope = _Scope("function", self.scope, qualname)
        if is_method:
            scope.cls = self.scope.owner
        positional = [*params.posonly_params, *params.params]
        static = any(dotted_name(d.decorator) == "staticmethod" for d in node.decorators)
        for i, param in enumerate(every_param):
            if i == 0 and is_method and not static and positional and param is positional[0]:
                scope.bind(param.name.value, ("self", self.scope.owner or ""))
            else:
                scope.bind(param.name.value, ("local", ""))
        outer_scope, self.scope = self.scope, scope
        self.stack.append(node.name.value)
        self.body_depth += 1
        node.body.visit(self)
        self.body_depth -= 1
        self.stack.pop()
        self.scope, self.referrer = outer_scope, outer_referrer
        return False

    def _note_decorators(self, node: cst.FunctionDef | cst.ClassDef) -> None:
        if self.body_depth == 0:
            for decorator in node.decorators:
                chain = dotted_name(decorator.decorator)
                if chain is not None:
                    self.import_calls.append((self.scope, tuple(chain.split(".")), "call"))

    def visit_Call(self, node: cst.Call) -> bool:
        if self.body_depth == 0:
            if (chain := dotted_name(node.func)) is not None:
                self.import_calls.append((self.scope, tuple(chain.split(".")), "call"))
            # An object handed to other code at import time (``sys.meta_path.append(loader)``)
            # may have any of its methods called then.
            for arg in node.args:
                if (chain := dotted_name(arg.value)) is not None:
                    self.import_calls.append((self.scope, tuple(chain.split(".")), "escape"))
        return True

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        qualname = self._add_def(node, "class")
        outer_referrer, self.referrer = self.referrer, qualname
        self._note_decorators(node)
        if self.body_depth == 0:
            for arg in node.bases:
                if (chain := dotted_name(arg.value)) is not None:
                    self.import_calls.append((self.scope, tuple(chain.split(".")), "base"))
            for arg in node.keywords:  # metaclass=M: M is called
                if (chain := dotted_name(arg.value)) is not None:
                    self.import_calls.append((self.scope, tuple(chain.split(".")), "call"))
        self._visit_all(*node.decorators, *node.bases, *node.keywords)
        self.class_bases[qualname] = [
            (self.scope, tuple(chain.split(".")))
            for base in node.bases
            if base.keyword is None and (chain := dotted_name(base.value)) is not None
        ]
        scope = _Scope("class", self.scope, qualname)
        self.class_scopes[qualname] = scope
        outer_scope, self.scope = self.scope, scope
        self.stack.append(node.name.value)
        node.body.visit(self)
        self.stack.pop()
        self.scope, self.referrer = outer_scope, outer_referrer
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        params = node.params
        every_param = [
            *params.posonly_params,
            *params.params,
            *([params.star_arg] if isinstance(params.star_arg, cst.Param) else []),
            *params.kwonly_params,
            *([params.star_kwarg] if params.star_kwarg is not None else []),
        ]
        for param in every_param:
            self._visit_all(param.default)
        scope = _Scope("local", self.scope, None)
        for param in every_param:
            scope.bind(param.name.value, ("local", ""))
        outer, self.scope = self.scope, scope
        self.body_depth += 1
        node.body.visit(self)
        self.body_depth -= 1
        self.scope = outer
        return False

    def _enter_comprehension(self) -> bool:
        self.scope = _Scope("local", self.scope, None)
        return True

    def _leave_comprehension(self) -> None:
        assert self.scope.parent is not None
        self.scope = self.scope.parent

    def visit_ListComp(self, node: cst.ListComp) -> bool:
        return self._enter_comprehension()

    def leave_ListComp(self, original_node: cst.ListComp) -> None:
        self._leave_comprehension()

    def visit_SetComp(self, node: cst.SetComp) -> bool:
        return self._enter_comprehension()

    def leave_SetComp(self, original_node: cst.SetComp) -> None:
        self._leave_comprehension()

    def visit_DictComp(self, node: cst.DictComp) -> bool:
        return self._enter_comprehension()

    def leave_DictComp(self, original_node: cst.DictComp) -> None:
        self._leave_comprehension()

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> bool:
        return self._enter_comprehension()

    def leave_GeneratorExp(self, original_node: cst.GeneratorExp) -> None:
        self._leave_comprehension()

    # -- imports ----------------------------------------------------------------------------------

    def visit_Import(self, node: cst.Import) -> bool:
        for alias in node.names:
            dotted = dotted_name(alias.name)
            assert dotted is not None
            if alias.asname is not None:  # import a.b as m: m is a.b
                name, binding = dotted_name(alias.asname.name), ("module", dotted)  # type: ignore[arg-type]
            else:  # import a.b: a is bound
                name, binding = dotted.split(".")[0], ("module", dotted.split(".")[0])
            if name is not None:
                self._bind_import(name, binding)
            self.import_events.append((binding, (dotted,)))
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        source = absolute_module(
            self.module,
            is_package=self.is_package,
            level=len(node.relative),
            name=dotted_name(node.module) if node.module is not None else None,
        )
        if source is None:
            return False
        if isinstance(node.names, cst.ImportStar):
            if self.scope is self.module_scope:
                self.stars.append(source)
            self.import_events.append((("module", source), (source,)))
            return False
        for alias in node.names:
            name = dotted_name(alias.name)
            assert name is not None
            bound = dotted_name(alias.asname.name) if alias.asname is not None else name  # type: ignore[arg-type]
            binding = ("from", source, name)
            if bound is not None:
                self._bind_import(bound, binding)
            self.import_events.append((binding, (source, f"{source}.{name}")))
        return False

    def _bind_import(self, name: str, binding: _Binding) -> None:
        scope = self.module_scope if name in self.scope.globals else self.scope
        scope.bind(name, binding)
        # In a package, ``from .sub import x`` also binds ``sub`` (the import system sets it).
        if self.is_package and binding[0] == "from" and binding[1].startswith(self.module + "."):
            sub = binding[1][len(self.module) + 1 :].split(".")[0]
            self.module_scope.names.setdefault(sub, [("module", f"{self.module}.{sub}")])

    def visit_Global(self, node: cst.Global) -> bool:
        self.scope.globals.update(item.name.value for item in node.names)
        return False

    def visit_Nonlocal(self, node: cst.Nonlocal) -> bool:
        return False

    # -- bindings and uses ------------------------------------------------------------------------

    def visit_Assign(self, node: cst.Assign) -> bool:
        self._record_all(node)
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) and isinstance(node.value, cst.Call):
            self.construction = dotted_name(node.value.func)
        for target in node.targets:
            self._bind_target(target.target)
        self.construction = None
        node.value.visit(self)
        return False

    def visit_AnnAssign(self, node: cst.AnnAssign) -> bool:
        self._record_all(node)
        self._bind_target(node.target)
        self._visit_all(node.annotation, node.value)
        return False

    def visit_AugAssign(self, node: cst.AugAssign) -> bool:
        self._record_all(node)
        node.target.visit(self)  # ``x += 1`` reads x too
        if isinstance(node.target, cst.Name):
            self._bind_name(node.target.value)
        node.value.visit(self)
        return False

    def visit_Expr(self, node: cst.Expr) -> bool:
        call = node.value
        if (
            self.scope is self.module_scope
            and isinstance(call, cst.Call)
            and isinstance(call.func, cst.Attribute)
            and dotted_name(call.func.value) == "__all__"
            and self.all_names is not None
            and len(call.args) == 1
        ):
            arg = call.args[0].value
            if call.func.attr.value == "extend":
                more = literal_strings(arg)
                self.all_names = None if more is None else [*self.all_names, *more]
            elif call.func.attr.value == "append":
                value = arg.evaluated_value if isinstance(arg, cst.SimpleString) else None
                self.all_names = [*self.all_names, value] if isinstance(value, str) else None
        return True

    def visit_For(self, node: cst.For) -> bool:
        self._bind_target(node.target)
        self._visit_all(node.iter, node.body, node.orelse)
        return False

    def visit_CompFor(self, node: cst.CompFor) -> bool:
        self._bind_target(node.target)
        self._visit_all(node.iter, *node.ifs, node.inner_for_in)
        return False

    def visit_WithItem(self, node: cst.WithItem) -> bool:
        node.item.visit(self)
        if node.asname is not None:
            self._bind_target(node.asname.name)
        return False

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> bool:
        self._visit_all(node.type)
        if node.name is not None:
            self._bind_target(node.name.name)
        node.body.visit(self)
        return False

    def visit_ExceptStarHandler(self, node: cst.ExceptStarHandler) -> bool:
        node.type.visit(self)
        if node.name is not None:
            self._bind_target(node.name.name)
        node.body.visit(self)
        return False

    def visit_NamedExpr(self, node: cst.NamedExpr) -> bool:
        # The walrus binds in the enclosing function, not in a comprehension's own scope.
        scope = self.scope
        while scope.kind == "local" and scope.parent is not None:
            scope = scope.parent
        outer, self.scope = self.scope, scope
        self._bind_target(node.target)
        self.scope = outer
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)  # not the keyword: ``f(key=1)`` does not use a global ``key``
        return False

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        chain = dotted_name(node)
        if chain is not None:
            self._use(tuple(chain.split(".")))
            return False
        attrs = [node.attr.value]
        value: cst.BaseExpression = node.value
        while isinstance(value, cst.Attribute):
            attrs.insert(0, value.attr.value)
            value = value.value
        if (
            isinstance(value, cst.Call)
            and isinstance(value.func, cst.Name)
            and value.func.value == "super"
            and self.scope.cls is not None
        ):
            self._use(tuple(attrs), via_super=True)
        value.visit(self)
        return False

    def visit_Name(self, node: cst.Name) -> bool:
        self._use((node.value,))
        return False


# --- signatures ----------------------------------------------------------------------------------

_OPENERS = frozenset("([{")
_CLOSERS = frozenset(")]}")


def _signature(tree: cst.Module, node: cst.FunctionDef | cst.ClassDef) -> str:
    """The header as written (``def f(a, b=1) -> int``), on one line, without comments."""
    placeholder = cst.SimpleStatementSuite(body=[cst.Pass()])
    header = tree.code_for_node(node.with_changes(decorators=(), leading_lines=(), body=placeholder))
    suffix = ": pass\n"
    assert header.endswith(suffix), header
    header = header[: -len(suffix)]
    return _one_line(header.rstrip())


def _one_line(text: str) -> str:
    """Join a multi-line header: drop comments and line breaks, keep same-line spacing, drop a
    trailing comma that a line break separated from its closing bracket (``(\\n a,\\n)`` -> ``(a)``)."""
    tokens = [
        t
        for t in tokenize.generate_tokens(io.StringIO(text + "\n").readline)
        if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENDMARKER, tokenize.INDENT)
        and t.type != tokenize.DEDENT
    ]
    out: list[str] = []
    previous: tokenize.TokenInfo | None = None
    for i, token in enumerate(tokens):
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        if (
            token.string == ","
            and following is not None
            and following.string in _CLOSERS
            and following.start[0] != token.end[0]
        ):
            continue  # a magic trailing comma
        if previous is not None:
            if previous.end[0] == token.start[0]:
                if token.start[1] > previous.end[1]:
                    out.append(" ")
            elif previous.string not in _OPENERS and token.string not in _CLOSERS:
                out.append(" ")
        out.append(token.string)
        previous = token
    return "".join(out)


# --- resolution ----------------------------------------------------------------------------------


class _Resolver:
    """Resolves every module's references once all modules are scanned."""

    def __init__(self, repo: Path, scans: dict[str, _ModuleScan]) -> None:
        self.repo = repo
        self.scans = scans
        self.class_scopes: dict[str, _Scope] = {}
        self.class_bases: dict[str, list[tuple[_Scope, tuple[str, ...]]]] = {}
        for scan in scans.values():
            self.class_scopes.update(scan.class_scopes)
            self.class_bases.update(scan.class_bases)
        self._lookups: dict[tuple[str, str], frozenset[str]] = {}
        self._active: set[tuple[str, str]] = set()
        self._names: dict[str, frozenset[str]] = {}
        self._mros: dict[str, tuple[str, ...]] = {}
        self._scope_modules = {id(scan.scope): scan.module for scan in scans.values()}
        # Variables assigned from a call (``x = Class(...)``): where, and what was called.
        self._constructed: dict[str, tuple[_Scope, tuple[str, ...]]] = {}
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

    def binding_targets(self, binding: _Binding) -> frozenset[str]:
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

    def _constructed_classes(self, scope: _Scope, callee: str) -> set[str]:
        key = (id(scope), callee)
        if key in self._constructing:  # ``x = x.copy()``
            return set()
        self._constructing.add(key)
        called = self._resolve_chain(scope, tuple(callee.split(".")))[1]
        self._constructing.discard(key)
        return {c for c in called if c in self.class_scopes}

    # -- references -------------------------------------------------------------------------------

    def _name_values(self, scope: _Scope, name: str) -> tuple[set[str], set[str]]:
        """(instance classes, targets) a bare name can denote, following Python's scoping."""
        current: _Scope | None = scope
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

    def _module_of(self, module_scope: _Scope) -> str:
        return self._scope_modules[id(module_scope)]

    def _resolve_chain(
        self, scope: _Scope, chain: tuple[str, ...], *, via_super: bool = False
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

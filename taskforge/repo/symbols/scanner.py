"""Scanning one file: its definitions, the names each scope binds, and the references left to resolve."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from taskforge.repo.symbols.index import SymbolKind
from taskforge.repo.symbols.signatures import signature_of
from taskforge.repo.symbols.source import (
    absolute_module,
    definition_span,
    dotted_name,
    literal_strings,
    parse_source,
    read_source,
)

__all__ = ["Binding", "ModuleScan", "Scope", "scan_file"]


# A binding is what a name is bound to in a scope:
#   ("symbol", qualname)     a def or class
#   ("var", target)          an assignment at module or class level: "pkg.mod:NAME" / "pkg.mod:C.NAME"
#   ("local", "")            a function-local variable or parameter: opaque, resolves to nothing
#                            (both take a third item, the dotted callee, for ``x = Class(...)``)
#   ("module", dotted)       ``import dotted`` / ``import a.b as m``
#   ("from", dotted, name)   ``from dotted import name``
#   ("self", class_qualname) the first parameter of a method
Binding = tuple[str, ...]


class Scope:
    __slots__ = ("cls", "globals", "kind", "names", "owner", "parent")

    def __init__(self, kind: str, parent: Scope | None, owner: str | None) -> None:
        self.kind = kind  # "module" | "class" | "function" | "local" (lambda, comprehension)
        self.parent = parent
        self.owner = owner  # qualname of the class or function, None otherwise
        self.names: dict[str, list[Binding]] = {}
        self.globals: set[str] = set()
        # The class whose method this scope is (or is nested in), for super().
        self.cls: str | None = parent.cls if parent is not None else None

    def bind(self, name: str, binding: Binding) -> None:
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
    scope: Scope
    chain: tuple[str, ...]
    via_super: bool = False


@dataclass(slots=True)
class ModuleScan:
    module: str
    path: str
    is_package: bool
    line_count: int
    scope: Scope
    defs: list[_Def]
    refs: list[_Ref]
    class_scopes: dict[str, Scope]
    class_bases: dict[str, list[tuple[Scope, tuple[str, ...]]]]
    stars: list[str]
    all_names: list[str] | None
    # (binding, modules the statement imports) for every import alias, at any depth
    import_events: list[tuple[Binding, tuple[str, ...]]]
    # Chains called ("call"), subclassed ("base") or passed as arguments ("escape") by code that
    # runs at import time.
    import_calls: list[tuple[Scope, tuple[str, ...], str]]


def scan_file(repo: Path, rel: str, module: str) -> ModuleScan:
    text = read_source(repo / rel, rel)
    tree = parse_source(text, rel)
    wrapper = MetadataWrapper(tree, unsafe_skip_copy=True)
    scanner = _Scanner(module=module, is_package=PurePosixPath(rel).name == "__init__.py", tree=tree)
    wrapper.visit(scanner)
    return ModuleScan(
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


class _Scanner(cst.CSTVisitor):
    """Collects definitions, bindings and unresolved references of one module."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, *, module: str, is_package: bool, tree: cst.Module) -> None:
        super().__init__()
        self.module = module
        self.is_package = is_package
        self.tree = tree
        self.module_scope = Scope("module", None, None)
        self.scope = self.module_scope
        self.referrer = f"<module {module}>"
        self.stack: list[str] = []
        self.defs: list[_Def] = []
        self.refs: list[_Ref] = []
        self.class_scopes: dict[str, Scope] = {}
        self.class_bases: dict[str, list[tuple[Scope, tuple[str, ...]]]] = {}
        self.stars: list[str] = []
        self.all_names: list[str] | None = None
        self.import_events: list[tuple[Binding, tuple[str, ...]]] = []
        self.import_calls: list[tuple[Scope, tuple[str, ...], str]] = []
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
                signature=signature_of(self.tree, node),
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
        scope = Scope("function", self.scope, qualname)
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
        scope = Scope("class", self.scope, qualname)
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
        scope = Scope("local", self.scope, None)
        for param in every_param:
            scope.bind(param.name.value, ("local", ""))
        outer, self.scope = self.scope, scope
        self.body_depth += 1
        node.body.visit(self)
        self.body_depth -= 1
        self.scope = outer
        return False

    def _enter_comprehension(self) -> bool:
        self.scope = Scope("local", self.scope, None)
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

    def _bind_import(self, name: str, binding: Binding) -> None:
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

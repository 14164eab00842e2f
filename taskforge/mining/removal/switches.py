"""Command-line options as registrations of a feature: an option and the branch it guards.

A feature is often reached through a command-line option: ``parser.add_argument("--yaml", ...)``
(argparse) or ``@click.option("--yaml")`` declares it, and the command runs it in a branch,
``if args.yaml: ...``. The command itself is shared with every other option, so the feature's
code is "used" by it; but that use is a registration, like an entry of a dispatch table. A
*switch* is such a branch: an ``if`` (or ``elif``) whose test is just the option's value. With
the option gone the value would always be false, so a switch reduces to its ``else`` part.

An option can be cut when every read of its value in the package is the test of a switch (for
argparse, any ``NAME.dest`` attribute read; for click, the parameter inside the command it
decorates), and its declaration is a statement or a decorator of its own. The removal then drops
the declaration and every switch, and for click the command's parameter too.

:func:`package_switches` reads a package once (``ast``); :func:`cut_switches` edits a module's
text (libcst), keeping everything else as it was.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import libcst as cst

from taskforge.repo.symbols import SymbolIndex

__all__ = ["Option", "Switches", "cut_switches", "package_switches"]

_ARGPARSE_CALLS = frozenset({"add_argument"})
_CLICK_DECORATORS = frozenset({"option", "Option"})


@dataclass(frozen=True, slots=True)
class Option:
    """One command-line option whose value a switch tests."""

    dest: str
    """The name its value has: ``args.DEST`` (argparse) or the command's parameter (click)."""
    kind: str
    """``argparse`` or ``click``."""
    module: str
    """Where it is declared."""
    command: str | None = None
    """click: the qualname of the command it decorates."""
    spelling: str = ""
    """How a user writes it: ``--yaml``."""


@dataclass(kw_only=True)
class Switches:
    """What :func:`package_switches` found: the options that can be cut, and per function the
    names its switches read and the names it reads elsewhere."""

    options: dict[tuple[str, str | None], Option] = field(default_factory=dict)
    """(dest, command) → option; command is None for argparse."""
    inside: dict[str, dict[tuple[str, str | None], frozenset[str]]] = field(default_factory=dict)
    """Function qualname → option key → names read in the branches that option guards."""
    outside: dict[str, frozenset[str]] = field(default_factory=dict)
    """Function qualname → names it reads outside every switch of a cuttable option."""

    def cuts_for(self, function: str, names: Iterable[str]) -> list[Option] | None:
        """The options to cut so that ``function`` no longer reads any of ``names`` (simple names:
        a function's, a class's or a method's last part); None when some read is not inside a
        switch; [] when it reads none of them."""
        wanted = set(names)
        if not wanted or function not in self.inside and function not in self.outside:
            return None
        if wanted & self.outside.get(function, frozenset()):
            return None
        keys = [key for key, read in self.inside.get(function, {}).items() if read & wanted]
        return [self.options[key] for key in sorted(keys, key=lambda k: (k[0], k[1] or ""))]


def _names_read(nodes: Iterable[ast.AST]) -> set[str]:
    found: set[str] = set()
    for top in nodes:
        for node in ast.walk(top):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                found.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                found.add(node.attr)
    return found


def _literal_strings(call: ast.Call) -> list[str]:
    return [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]


def _keyword(call: ast.Call, name: str) -> str | None:
    for keyword in call.keywords:
        if keyword.arg == name and isinstance(keyword.value, ast.Constant) and isinstance(keyword.value.value, str):
            return keyword.value.value
    return None


def _long_option(strings: list[str]) -> str | None:
    longs = [s for s in strings if s.startswith("--") and len(s) > 2]
    return longs[0] if longs else None


def _callee(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _off_by_default(call: ast.Call) -> bool:
    """The option's value is false when the option is not given: no ``store_false`` action, no
    ``default`` but a false constant."""
    for keyword in call.keywords:
        if keyword.arg == "action" and isinstance(keyword.value, ast.Constant) and keyword.value.value == "store_false":
            return False
        if keyword.arg == "default" and not (isinstance(keyword.value, ast.Constant) and not keyword.value.value):
            return False
        if keyword.arg is None:  # **kwargs: unknown
            return False
    return True


def _argparse_dest(call: ast.Call) -> tuple[str, str] | None:
    strings = _literal_strings(call)
    spelling = _long_option(strings)
    if spelling is None or any(not s.startswith("-") for s in strings) or not _off_by_default(call):
        return None  # a positional argument is not an option; one on by default is not a switch
    dest = _keyword(call, "dest") or spelling.lstrip("-").replace("-", "_")
    return (dest, spelling) if dest.isidentifier() else None


def _click_dest(call: ast.Call) -> tuple[str, str] | None:
    strings = _literal_strings(call)
    spelling = _long_option(strings)
    if spelling is None or "/" in spelling or not _off_by_default(call):
        return None  # an on/off pair (--yaml/--no-yaml) is not a plain switch
    named = [s for s in strings if not s.startswith("-")]
    dest = named[0] if named else spelling.lstrip("-").replace("-", "_").lower()
    return (dest, spelling) if dest.isidentifier() else None


def _is_switch(test: ast.expr, key: tuple[str, str | None], params: frozenset[str]) -> bool:
    dest, command = key
    if command is None:
        return isinstance(test, ast.Attribute) and test.attr == dest and isinstance(test.value, ast.Name)
    return isinstance(test, ast.Name) and test.id == dest and dest in params


def package_switches(index: SymbolIndex, texts: Mapping[str, str]) -> Switches:
    """The package's cuttable options and switches; ``texts`` maps a module's path to its source
    (modules missing from it, or that do not parse, have none)."""
    trees: dict[str, ast.Module] = {}
    for module, path in index.modules.items():
        text = texts.get(path)
        if text is None:
            continue
        try:
            trees[module] = ast.parse(text)
        except SyntaxError:
            continue
    functions: dict[str, tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = {}
    for qualname, symbol in index.symbols.items():
        if symbol.kind in ("function", "method") and symbol.module in trees:
            node = _function_at(trees[symbol.module], symbol.start_line)
            if node is not None:
                functions[qualname] = (symbol.module, node)

    declared: dict[tuple[str, str | None], list[Option]] = defaultdict(list)
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and _callee(node.value) in _ARGPARSE_CALLS:
                found = _argparse_dest(node.value)
                if found:
                    declared[(found[0], None)].append(Option(dest=found[0], kind="argparse", module=module, spelling=found[1]))
    for qualname, (module, node) in functions.items():
        for decorator in node.decorator_list:
            if isinstance(decorator, ast.Call) and _callee(decorator) in _CLICK_DECORATORS:
                found = _click_dest(decorator)
                if found:
                    declared[(found[0], qualname)].append(
                        Option(dest=found[0], kind="click", module=module, command=qualname, spelling=found[1]))
    # An argparse dest declared twice, or read anywhere but as a switch's test, stays.
    options = {key: found[0] for key, found in declared.items() if len(found) == 1}
    argparse_dests = {key[0] for key in options if key[1] is None}
    switch_tests: set[int] = set()
    for qualname, (_, node) in functions.items():
        params = frozenset(a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs))
        for inner in ast.walk(node):
            if isinstance(inner, ast.If):
                for key in options:
                    if (key[1] is None or key[1] == qualname) and _is_switch(inner.test, key, params):
                        switch_tests.add(id(inner.test))
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in argparse_dests and id(node) not in switch_tests:
                if isinstance(node.ctx, ast.Load):
                    options.pop((node.attr, None), None)
    for (dest, command) in list(options):
        if command is None:
            continue
        node = functions[command][1]
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name) and inner.id == dest and id(inner) not in switch_tests:
                options.pop((dest, command), None)
                break

    switches = Switches(options=options)
    for qualname, (_, node) in functions.items():
        params = frozenset(a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs))
        inside: dict[tuple[str, str | None], set[str]] = defaultdict(set)
        guarded: set[int] = set()
        for inner in ast.walk(node):
            if not isinstance(inner, ast.If):
                continue
            key = next((k for k in options if (k[1] is None or k[1] == qualname) and _is_switch(inner.test, k, params)), None)
            if key is None:
                continue
            inside[key] |= _names_read(inner.body)
            guarded.update(id(n) for stmt in inner.body for n in ast.walk(stmt))
            guarded.add(id(inner.test))
        outside = {
            n.id if isinstance(n, ast.Name) else n.attr
            for n in ast.walk(node)
            if id(n) not in guarded and (isinstance(n, ast.Name) or isinstance(n, ast.Attribute))
            and isinstance(n.ctx, ast.Load)
        }
        # The function's own decorators and defaults run whatever the switches do.
        switches.outside[qualname] = frozenset(outside)
        if inside:
            switches.inside[qualname] = {k: frozenset(v) for k, v in inside.items()}
    return switches


def _function_at(tree: ast.Module, line: int) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if line in (first, node.lineno):
                return node
    return None


# -- the edit -------------------------------------------------------------------------------------


def _string_values(call: cst.Call) -> list[str]:
    out = []
    for arg in call.args:
        if arg.keyword is None and isinstance(arg.value, cst.SimpleString):
            out.append(arg.value.evaluated_value if isinstance(arg.value.evaluated_value, str) else "")
    return out


def _cst_callee(call: cst.Call) -> str | None:
    if isinstance(call.func, cst.Attribute):
        return call.func.attr.value
    if isinstance(call.func, cst.Name):
        return call.func.value
    return None


def _declares(call: cst.Call, option: Option) -> bool:
    return option.spelling in _string_values(call)


class _Cutter(cst.CSTTransformer):
    def __init__(self, options: list[Option]) -> None:
        super().__init__()
        self.argparse = {o.dest: o for o in options if o.kind == "argparse"}
        self.click = {o.command.rpartition(":")[2]: o for o in options if o.kind == "click" and o.command}
        self.stack: list[str] = []
        self.cut: set[str] = set()  # spellings whose declaration went

    def _switch_key(self, test: cst.BaseExpression) -> bool:
        if isinstance(test, cst.Attribute) and isinstance(test.value, cst.Name) and test.attr.value in self.argparse:
            return True
        option = self.click.get(".".join(self.stack))
        return option is not None and isinstance(test, cst.Name) and test.value == option.dest

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.stack.append(node.name.value)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.stack.append(node.name.value)

    def leave_ClassDef(self, original: cst.ClassDef, updated: cst.ClassDef) -> cst.ClassDef:
        self.stack.pop()
        return updated

    def leave_FunctionDef(self, original: cst.FunctionDef, updated: cst.FunctionDef) -> cst.FunctionDef:
        option = self.click.get(".".join(self.stack))
        self.stack.pop()
        if option is None:
            return updated
        decorators = [d for d in updated.decorators
                      if not (isinstance(d.decorator, cst.Call) and _cst_callee(d.decorator) in _CLICK_DECORATORS
                              and _declares(d.decorator, option))]
        if len(decorators) != len(updated.decorators):
            self.cut.add(option.spelling)
        params = updated.params
        params = params.with_changes(
            params=[p for p in params.params if p.name.value != option.dest],
            kwonly_params=[p for p in params.kwonly_params if p.name.value != option.dest],
        )
        return updated.with_changes(decorators=decorators, params=params)

    def leave_If(self, original: cst.If, updated: cst.If) -> cst.If:
        # An ``elif`` that is a switch goes from the chain; the statement itself is handled by
        # its block (an ``if`` that is a switch becomes what its ``else`` held).
        orelse = updated.orelse
        while isinstance(orelse, cst.If) and self._switch_key(orelse.test):
            orelse = orelse.orelse
        return updated.with_changes(orelse=orelse)

    def _statements(self, body: Iterable[cst.BaseStatement]) -> list[cst.BaseStatement]:
        out: list[cst.BaseStatement] = []
        for stmt in body:
            if isinstance(stmt, cst.If) and self._switch_key(stmt.test):
                if isinstance(stmt.orelse, cst.If):
                    out.append(stmt.orelse.with_changes(leading_lines=stmt.leading_lines))
                elif isinstance(stmt.orelse, cst.Else):
                    inner = stmt.orelse.body
                    if isinstance(inner, cst.IndentedBlock):
                        out.extend(inner.body)
                    else:
                        out.append(cst.SimpleStatementLine(body=list(inner.body)))
                continue
            if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr):
                call = stmt.body[0].value
                if isinstance(call, cst.Call) and _cst_callee(call) in _ARGPARSE_CALLS:
                    declared = [o for o in self.argparse.values() if _declares(call, o)]
                    if declared:
                        self.cut.update(o.spelling for o in declared)
                        continue
            out.append(stmt)
        return out

    def leave_IndentedBlock(self, original: cst.IndentedBlock, updated: cst.IndentedBlock) -> cst.IndentedBlock:
        body = self._statements(updated.body)
        if not body:
            body = [cst.SimpleStatementLine(body=[cst.Pass()])]
        return updated.with_changes(body=body)

    def leave_Module(self, original: cst.Module, updated: cst.Module) -> cst.Module:
        return updated.with_changes(body=self._statements(updated.body))


def cut_switches(text: str, options: list[Option]) -> tuple[str, set[str]]:
    """``text`` without the declarations of ``options`` (those declared in it) and every switch
    on them; also returns the spellings whose declarations it removed."""
    if not options:
        return text, set()
    cutter = _Cutter(options)
    tree = cst.parse_module(text)
    return tree.visit(cutter).code, cutter.cut

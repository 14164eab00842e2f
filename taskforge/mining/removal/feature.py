"""The ``feature`` strategy of the libcst agent: a set of members deleted together, across modules.

See :mod:`taskforge.mining.removal.cst` for what the strategy does and refuses; it uses the same
editor (:mod:`taskforge.mining.removal.edits`).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from taskforge.mining.removal.edits import (
    Removal,
    _alias_targets,
    _code,
    _dead_all_names,
    _Editor,
    _is_package,
    _listing,
    _modules_naming,
    _node_text,
    _Parsed,
    _refuse,
)
from taskforge.mining.removal.switches import Option, cut_switches, package_switches
from taskforge.repo.symbols import SymbolIndex

__all__ = ["drop_entry_points", "module_level_names", "module_variables", "remove_feature", "simple_name"]


def simple_name(qualname: str) -> str:
    """How code names a symbol or variable where it uses it: the last part (``pkg.mod:Cls.meth`` → ``meth``)."""
    return qualname.partition(":")[2].rpartition(".")[2]


def remove_feature(
    repo: Path, index: SymbolIndex, target: str, members: Sequence[str], *,
    parse: Callable[[Path, str], _Parsed], read_names: Callable[[str, str], tuple[frozenset[str], frozenset[str]]],
) -> Removal:
    """The ``feature`` strategy of the libcst agent (see :mod:`taskforge.mining.removal.cst`);
    ``parse`` and ``read_names`` are the agent's cached :func:`parse` and :func:`module_level_names`."""
    if target not in members:
        raise _refuse(f"{target} is not among the feature's members")
    variables = module_variables(index)
    unknown = [m for m in members if m not in index.symbols and m not in variables]
    if unknown:
        raise _refuse(f"{unknown[0]} is neither a symbol nor a module-level variable of the index")
    units = [m for m in members if m in index.symbols]
    dead = {d for q in units for d in (q, *index.descendants(q))} | {m for m in members if m in variables}
    running = sorted(q for q in dead if q in index.import_time)
    if running:
        raise _refuse(f"{running[0]} runs while the package is imported")
    blockers = sorted({u for q in dead for u in index.used_by.get(q, ()) if u not in dead and not u.startswith("<module ")})
    options: dict[tuple[str, str | None], Option] = {}
    if blockers:
        # A use inside the branch a command-line option guards is a registration: option and branch go.
        switches = package_switches(index, {p: parse(repo, p).text for p in index.modules.values()})
        kept = []
        for user in blockers:
            cuts = switches.cuts_for(user, {simple_name(q) for q in dead if user in index.used_by.get(q, ())})
            if cuts:
                options.update(((o.dest, o.command), o) for o in cuts)
            else:
                kept.append(user)
        if kept:
            raise _refuse(f"{target}'s feature is still used by {_listing(kept)}")
    known = set(index.symbols) | variables
    gone_modules: set[str] = set()

    def is_dead(targets: frozenset[str]) -> bool:
        if any(t in gone_modules or t.partition(":")[0] in gone_modules for t in targets):
            return True
        named = {t for t in targets if t in known}
        return bool(named) and named <= dead

    dropped: dict[str, set[str]] = defaultdict(set)  # module -> names its dropped imports bound

    def edit(module: str, parsed: _Parsed) -> tuple[_Editor, str]:
        def import_action(kind: str, source: str, name: str | None) -> str | None:
            if kind == "import":
                gone = next((g for g in gone_modules if source == g or source.startswith(g + ".")), None)
                if gone is None:
                    return None
                if name is not None:
                    dropped[module].add(name)
                    return "drop"
                return gone.rpartition(".")[0]
            if source in gone_modules or (kind == "from" and name is not None and is_dead(_alias_targets(index, source, name))):
                if name is not None:
                    dropped[module].add(name)
                return "drop"
            return None

        local = {q.partition(":")[2] for q in dead if q.partition(":")[0] == module and q not in variables}
        local_vars = {q.partition(":")[2] for q in dead if q.partition(":")[0] == module and q in variables}
        drop_all = _dead_all_names(index, module, is_dead)
        drop_all |= {g.rpartition(".")[2] for g in gone_modules if g.rpartition(".")[0] == module}
        refs = dropped[module]  # the editor sees the names the imports above drop as it goes
        refs |= {name for name in local | local_vars if "." not in name}
        editor = _Editor(
            module=module,
            is_package=_is_package(index.modules[module]),
            delete={name for name in local if "." not in name or name.rpartition(".")[0] not in local},
            delete_vars=local_vars,
            import_action=import_action,
            drop_all=drop_all,
            drop_refs=refs,
        )
        return editor, _code(parsed, parsed.tree.visit(editor))

    own = {q.partition(":")[0] for q in dead}
    affected = set(own)
    for q in dead:
        affected |= index.imported_by.get(q, frozenset())
    affected |= _modules_naming(index, is_dead)
    affected |= {u[len("<module "):-1] for q in dead for u in index.used_by.get(q, ()) if u.startswith("<module ")}
    switch_modules = {index.symbols[u].module for u in blockers if u in index.symbols} | {o.module for o in options.values()}
    affected |= switch_modules
    removed_code: dict[str, str] = {}
    for _ in range(2):  # once more when a module is left empty: its importers change too
        files: dict[str, str | None] = {}
        cut_spellings: set[str] = set()
        dropped.clear()
        emptied: set[str] = set()
        for module in sorted(m for m in affected if m in index.modules and m not in gone_modules):
            path = index.modules[module]
            parsed = parse(repo, path)
            editor, new_text = edit(module, parsed)
            if module in switch_modules:
                new_text, declared = cut_switches(new_text, list(options.values()))
                cut_spellings |= declared
            if editor.deleted_from_decorated_class:
                raise _refuse(f"{editor.deleted_from_decorated_class[0]} belongs to a decorated class")
            if module in own:
                for q in sorted(dead):
                    name = q.partition(":")[2]
                    if q.partition(":")[0] != module or name not in editor.delete | editor.delete_vars:
                        continue
                    nodes = [node for local_name, node in editor.deleted if local_name == name]
                    expected = len(index.spans[q]) if q in index.symbols else 1
                    if len(nodes) != expected:
                        raise _refuse(f"{q}: {len(nodes)} definitions found, the index has {expected}")
                    removed_code[q] = "".join(_node_text(parsed, node) for node in nodes).strip("\n") + "\n"
                if not _is_package(path) and "." in module and _only_imports_left(new_text) \
                        and not any(u not in dead and not u.startswith(f"<module {module}>")
                                    for u in index.used_by.get(module, ())):
                    emptied.add(module)
            if new_text != parsed.text:
                files[path] = new_text
        if not emptied - gone_modules:
            break
        gone_modules |= emptied
        affected |= {m for g in gone_modules for m in index.importers(g)} | {g.rpartition(".")[0] for g in gone_modules}
    undeclared = sorted(o.spelling for o in options.values() if o.spelling not in cut_spellings)
    if undeclared:
        raise _refuse(f"the option {undeclared[0]} is not declared by a statement or decorator of its own")
    for module in sorted(gone_modules):
        files[index.modules[module]] = None
    files.update(drop_entry_points(repo, index, dead, gone_modules))
    top = {q.partition(":")[2] for q in dead if "." not in q.partition(":")[2]}
    for module, path in sorted(index.modules.items()):
        if module in gone_modules:
            continue
        text = files.get(path) or parse(repo, path).text
        gone = {q.partition(":")[2] for q in dead if q.partition(":")[0] == module and "." not in q.partition(":")[2]}
        read, attributes = read_names(path, text)
        # Where the module is edited, its own removed names and the imports dropped from it;
        # anywhere, a removed name read as an attribute (``pkg.name``), which the index misses.
        still = sorted((read & (gone | dropped[module]) if path in files else set()) | (attributes & top))
        if still:
            raise _refuse(f"module-level code of {module} still uses {_listing(still)}")
    removed = (target, *(m for m in members if m != target), *sorted(gone_modules))
    return Removal(
        strategy="feature",
        target=target,
        removed=removed,
        options=tuple(sorted(o.spelling for o in options.values())),
        files=dict(sorted(files.items())),
        removed_code={q: removed_code[q] for q in (target, *members) if q in removed_code},
    )


def module_variables(index: SymbolIndex) -> set[str]:
    """``"pkg.mod:NAME"`` of every module-level name a module binds itself that is not a ``def``,
    a ``class`` or a submodule (imports resolve elsewhere)."""
    return {
        f"{module}:{name}"
        for module, names in index.namespaces.items()
        for name, targets in names.items()
        if f"{module}:{name}" in targets and f"{module}:{name}" not in index.symbols
        and f"{module}.{name}" not in index.modules and not name.startswith("__")
    }


def _only_imports_left(text: str) -> bool:
    """Nothing but a docstring, imports, ``__all__`` and ``pass`` at module level."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return False
    for i, node in enumerate(tree.body):
        if isinstance(node, (ast.Import, ast.ImportFrom, ast.Pass)):
            continue
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        if targets and all(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            continue
        return False
    return True


def module_level_names(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """Names that code run at import reads: everything outside function bodies (class bodies,
    decorators, default values and annotations included), and the attribute names it reads
    (``toolz.curry(toolz.peekn)`` reads a re-exported name the index does not resolve): (names,
    attribute names)."""
    names: set[str] = set()
    attributes: set[str] = set()

    def walk(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for child in (*node.decorator_list, node.args, node.returns):
                if child is not None:
                    walk(child)
            return
        if isinstance(node, ast.Lambda):
            walk(node.args)
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            attributes.add(node.attr)
        for inner in ast.iter_child_nodes(node):
            walk(inner)

    walk(ast.parse(text))
    return frozenset(names), frozenset(attributes)



_ENTRY_TABLES = re.compile(r"^\[(project\.(scripts|gui-scripts|entry-points\.[^\]]+)|tool\.poetry\.(scripts|plugins\.[^\]]+))\]\s*$")
_ENTRY_LINE = re.compile(r"""^\s*["']?[\w.\-]+["']?\s*=\s*["']?\s*([\w.]+)\s*(?::\s*([\w.]+))?\s*(\[[^\]]*\])?\s*["']?\s*(#.*)?$""")


def drop_entry_points(repo: Path, index: SymbolIndex, dead: set[str], gone_modules: set[str]) -> dict[str, str]:
    """pyproject.toml and setup.cfg without the entry points (scripts, plugins) whose object is
    removed: ``pkg.mod:func`` with ``func`` removed, or any object of a deleted module. Only the
    changed files, path → new text."""
    def gone(module: str, attr: str | None) -> bool:
        if any(module == g or module.startswith(g + ".") for g in gone_modules):
            return True
        if attr is None:
            return False
        head = attr.partition(".")[0]
        if f"{module}:{head}" in dead:
            return True
        targets = index.namespaces.get(module, {}).get(head, frozenset())  # a re-export
        return bool(targets) and all(t in dead or t.partition(":")[0] in gone_modules for t in targets)

    out: dict[str, str] = {}
    for name, in_table in (("pyproject.toml", _ENTRY_TABLES.match), ("setup.cfg", None)):
        path = repo / name
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        kept: list[str] = []
        table = False
        for line in text.splitlines(keepends=True):
            stripped = line.strip()
            if stripped.startswith("["):
                table = bool(in_table(stripped)) if in_table else stripped == "[options.entry_points]"
            elif table and stripped and not stripped.startswith("#"):
                match = _ENTRY_LINE.match(line.rstrip("\r\n"))
                if match and gone(match.group(1), match.group(2)):
                    continue
            kept.append(line)
        if "".join(kept) != text:
            out[name] = "".join(kept)
    return out

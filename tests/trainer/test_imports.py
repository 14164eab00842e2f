"""The trainer's import rules, read from its source with ast (imports inside functions count):
no import cycle between its modules, no `_private` name imported from another module, taskforge
only through its top-level API, and torch in no taskforge module."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted((ROOT / "trainer").rglob("*.py"))}


def imports_in(source: str, module: str, *, is_package: bool = False) -> Iterator[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import statement of `source`, at
    any depth (inside functions and ``if`` blocks too), relative imports resolved against `module`."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[:len(parts) - node.level + 1], *([base] if base else [])])
            for alias in node.names:
                yield base, alias.name, node.lineno


def _imports(module: str) -> list[tuple[str, str | None, int]]:
    path = MODULES[module]
    return list(imports_in(path.read_text(), module, is_package=path.name == "__init__.py"))


def edges(module: str, imported: Sequence[tuple[str, str | None, int]], modules: Mapping[str, object]) -> set[str]:
    """The modules of `modules` that `module` imports (``from trainer.rl import kl`` imports trainer.rl.kl)."""
    found = set()
    for target, name, _ in imported:
        if name is not None and f"{target}.{name}" in modules:
            found.add(f"{target}.{name}")
        elif target in modules:
            found.add(target)
    return found - {module}


def cycles(graph: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Every cycle a depth-first walk of `graph` closes (empty: the graph is acyclic)."""
    found: list[list[str]] = []
    state = dict.fromkeys(graph, 0)  # 0 unseen, 1 on the current path, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in graph[node]:
            if state[target] == 1:
                found.append([*path[path.index(target):], target])
            elif state[target] == 0:
                visit(target, [*path, target])
        state[node] = 2

    for node in graph:
        if state[node] == 0:
            visit(node, [node])
    return found


def test_the_trainer_has_no_import_cycle() -> None:
    graph = {module: sorted(edges(module, _imports(module), MODULES)) for module in MODULES}
    assert {"trainer.cli", "trainer.rl.loop", "trainer.pretrain.loop", "trainer.runtime"} <= set(graph)
    assert "trainer.rl.kl" in graph["trainer.rl.policy"]  # the walk sees the edges
    assert cycles(graph) == []


def test_no_private_name_is_imported_from_another_module() -> None:
    private = [f"{module}:{line} imports {target}.{name}" for module in MODULES
               for target, name, line in _imports(module)
               if name is not None and name.startswith("_") and f"{target}.{name}" not in MODULES
               and target.split(".")[0] in ("trainer", "taskforge")]
    assert private == []


def test_taskforge_only_through_its_top_level_api() -> None:
    inside = [f"{module}:{line} imports {target}" for module in MODULES
              for target, _, line in _imports(module) if target.startswith("taskforge.")]
    assert inside == []


def test_no_taskforge_module_imports_torch() -> None:
    found = [f"{path.relative_to(ROOT)}:{line}" for path in sorted((ROOT / "taskforge").rglob("*.py"))
             for target, _, line in imports_in(path.read_text(), _module_name(path))
             if target == "torch" or target.startswith("torch.")]
    assert found == []


def test_the_checks_see_imports_in_functions_and_find_cycles() -> None:
    source = "import os\ndef f():\n    from trainer.rl import kl\n    from ..recipe import _x\n"
    found = list(imports_in(source, "trainer.rl.loop"))
    assert found == [("os", None, 1), ("trainer.rl", "kl", 3), ("trainer.recipe", "_x", 4)]
    assert edges("trainer.rl.loop", found, {"trainer.rl.kl": 0, "trainer.recipe": 0}) == {"trainer.rl.kl",
                                                                                          "trainer.recipe"}
    assert cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c", "a"]]
    assert cycles({"a": ["b"], "b": [], "c": ["a", "b"]}) == []

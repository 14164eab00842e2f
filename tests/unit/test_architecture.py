"""The package's shape, read from its own imports with ``ast`` (imports inside functions count;
those under ``if TYPE_CHECKING:`` do not run and do not).

- taskforge never imports trainer; trainer uses taskforge's top-level API only;
- taskforge's packages sit on layers and import only from their own layer or below; mining and
  scoring, on the same layer, never import each other;
- Docker, Ray and torch are each imported in one place;
- no import cycle; no module over 800 lines but the two guest programs that must run whole, as
  one file, inside the sandbox (the leak scanner and the scoring guard).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAYERS: list[set[str]] = [
    {"taskforge.errors", "taskforge.config", "taskforge.paths", "taskforge.task", "taskforge.difficulty", "taskforge.guest"},
    {"taskforge.sandbox"},
    {"taskforge.repo", "taskforge.llm"},
    {"taskforge.datasets"},
    {"taskforge.mining", "taskforge.scoring"},
    {"taskforge.cli"},
]
"""Bottom to top. A module imports from its own package, and from packages of its layer or below;
mining and scoring are one layer but never import each other."""

HEAVY = {"docker": {"taskforge.sandbox.docker"}, "ray": {"taskforge.mining.distributed"}, "torch": {"trainer"}}
"""Each heavy dependency, and the one place (a module, or a package) allowed to import it."""

LONG_MODULES = {"taskforge.guest.scanner", "taskforge.guest.guard"}
"""The modules that may exceed 800 lines: each is copied into the sandbox as one file and runs
there whole (the scanner, and the guard, which pytest loads as one plugin module)."""


@dataclass(frozen=True, slots=True)
class Import:
    module: str
    """The importing module."""
    target: str
    """What it imports: a module, or (``from M import name``) ``M.name`` when that is a module."""
    line: int
    names: tuple[str, ...] = ()
    """For ``from M import a, b``: the names."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _files() -> dict[str, Path]:
    files = {}
    for top in ("taskforge", "trainer"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if "sandboxes" in path.relative_to(ROOT).parts:  # taskforge/sandboxes links to the image definitions
                continue
            files[_module_name(path)] = path
    return files


FILES = _files()


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, less the bodies of ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and ast.unparse(child.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def _imports(module: str, path: Path) -> list[Import]:
    found = []
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            names = tuple(alias.name for alias in node.names)
            submodules = [f"{base}.{n}" for n in names if f"{base}.{n}" in FILES]
            found += [Import(module, target, node.lineno, names) for target in submodules]
            if len(submodules) < len(names):
                found.append(Import(module, base, node.lineno, names))
    return found


IMPORTS = {module: _imports(module, path) for module, path in FILES.items()}


def _ours(target: str) -> bool:
    return target.split(".")[0] in ("taskforge", "trainer")


def _package(module: str) -> str:
    """The layer package a module belongs to (``taskforge.mining.audit.scan`` -> ``taskforge.mining``)."""
    return ".".join(module.split(".")[:2])


def _layer(module: str) -> int:
    package = _package(module)
    for i, layer in enumerate(LAYERS):
        if package in layer:
            return i
    raise AssertionError(f"{module} is on no layer: add its package to LAYERS")


def _violations(rule) -> list[str]:  # type: ignore[no-untyped-def]
    return [f"{imp.module}:{imp.line} imports {imp.target}" for imports in IMPORTS.values() for imp in imports
            if rule(imp)]


def test_the_tree_is_read() -> None:
    assert {"taskforge.mining.pipeline", "taskforge.scoring.scorer", "taskforge.repo.testfiles",
            "taskforge.guest.driver", "trainer.cli"} <= FILES.keys()
    assert sum(len(v) for v in IMPORTS.values()) > 500


def test_taskforge_never_imports_trainer() -> None:
    assert _violations(lambda i: i.module.startswith("taskforge") and i.target.split(".")[0] == "trainer") == []


def test_trainer_uses_only_the_top_level_api() -> None:
    assert _violations(lambda i: i.module.startswith("trainer") and i.target.startswith("taskforge.")) == []
    import taskforge

    used = {name for imports in IMPORTS.values() for i in imports
            if i.module.startswith("trainer") and i.target == "taskforge" for name in i.names}
    assert used and used <= set(taskforge.__all__), used - set(taskforge.__all__)


def test_every_package_imports_from_its_layer_or_below() -> None:
    def upward(imp: Import) -> bool:
        if not (imp.module.startswith("taskforge.") and imp.target.startswith("taskforge.")):
            return False
        return _package(imp.target) != _package(imp.module) and _layer(imp.target) > _layer(imp.module)

    assert _violations(upward) == []


def test_mining_and_scoring_never_import_each_other() -> None:
    pairs = {("taskforge.mining", "taskforge.scoring"), ("taskforge.scoring", "taskforge.mining")}
    assert _violations(lambda i: (_package(i.module), _package(i.target)) in pairs) == []


def test_the_package_itself_is_imported_for_its_version_only() -> None:
    """``taskforge/__init__`` is the API for the outside: inside, only ``__version__`` is taken from it."""
    assert _violations(lambda i: i.module.startswith("taskforge.") and i.target == "taskforge"
                       and set(i.names) != {"__version__"}) == []


@pytest.mark.parametrize("dependency", sorted(HEAVY))
def test_each_heavy_dependency_is_imported_in_one_place(dependency: str) -> None:
    allowed = HEAVY[dependency]
    importers = {i.module for imports in IMPORTS.values() for i in imports if i.target.split(".")[0] == dependency}
    assert importers, f"nothing imports {dependency}: is the rule stale?"
    assert sorted(m for m in importers if not any(m == a or m.startswith(f"{a}.") for a in allowed)) == []


def test_no_import_cycle() -> None:
    graph = {m: sorted({i.target for i in imports if i.target in FILES and i.target != m})
             for m, imports in IMPORTS.items()}
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in graph[node]:
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for module in graph:
        if module not in state:
            visit(module)
    assert [" -> ".join(c) for c in cycles] == []


def test_at_most_one_module_is_over_800_lines() -> None:
    long = {m for m, path in FILES.items() if len(path.read_text(encoding="utf-8").splitlines()) > 800}
    assert long <= LONG_MODULES, sorted(long - LONG_MODULES)


def test_scoring_and_the_api_load_no_miner() -> None:
    """``taskforge serve`` and the trainer's imports load neither the miner nor libcst."""
    import subprocess
    import sys

    code = ("import sys, taskforge, taskforge.scoring.server, taskforge.scoring.scorer, taskforge.datasets.reader, "
            "taskforge.cli; taskforge.Task, taskforge.Scorer, taskforge.RewardClient, taskforge.rebuild_start_state; "
            "print(sorted(m for m in sys.modules if m.startswith(('taskforge.mining', 'libcst', 'ray', 'torch'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_public_api_resolves_every_name_it_lists() -> None:
    import taskforge

    assert set(taskforge.__all__) == {"__version__", *taskforge._API}
    for name in taskforge._API:
        assert getattr(taskforge, name) is getattr(__import__(taskforge._API[name], fromlist=[name]), name)


def test_every_import_of_ours_in_the_benchmarks_resolves() -> None:
    """The benchmarks are run by hand: an import that moved (inside a function too) must fail here."""
    import importlib
    import importlib.util

    broken = []
    for path in sorted((ROOT / "tests" / "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and _ours(node.module) and not node.level:
                try:
                    module = importlib.import_module(node.module)
                except ImportError as err:
                    broken.append(f"{path.name}:{node.lineno}: {err}")
                    continue
                broken += [f"{path.name}:{node.lineno}: {node.module} has no {a.name}" for a in node.names
                           if not hasattr(module, a.name)
                           and importlib.util.find_spec(f"{node.module}.{a.name}") is None]
    assert broken == []

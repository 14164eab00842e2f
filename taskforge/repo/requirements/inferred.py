"""Requirements inferred from the test suite's code: what its files import, followed through test helpers
and project modules, and the plugin fixtures its tests request."""

from __future__ import annotations

import ast
import fnmatch
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from packaging.utils import canonicalize_name

from taskforge.repo.requirements.distributions import distribution_for_import
from taskforge.repo.requirements.files import called_name, parse_python, read_text
from taskforge.repo.requirements.found import Found
from taskforge.repo.requirements.imports import children, imports_in_tree
from taskforge.repo.requirements.pytest_config import PYTEST_BUILTIN_PLUGINS, PytestConfig

__all__ = ["inferred_from_test_imports"]


_LARGEST_PARSED_FILE = 1_000_000
"""Bytes; larger ``.py`` files under tests are data dumps (intervaltree has a 5 MB one)."""
_SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "build", "dist", "site-packages", "venv"})
_TEST_DIRS = frozenset({"test", "tests", "testing"})
_TEST_FILE_PATTERNS = ("test_*.py", "*_test.py", "tests.py", "test.py", "conftest.py")

_PLUGIN_FOR_FIXTURE: Mapping[str, str] = {
    "benchmark": "pytest-benchmark",
    "mocker": "pytest-mock",
    "class_mocker": "pytest-mock",
    "module_mocker": "pytest-mock",
    "session_mocker": "pytest-mock",
    "httpserver": "pytest-httpserver",
    "httpx_mock": "pytest-httpx",
    "requests_mock": "requests-mock",
    "freezer": "pytest-freezer",
}
"""Fixtures that plugins provide, requested by name in test functions (no import says so)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class _Layout:
    """Where a repository's Python files are, as the import inference needs them."""

    local_modules: frozenset[str]
    """Every module or package name present anywhere: imports of these are not third-party."""
    test_files: tuple[PurePosixPath, ...]
    """Files pytest collects (``test_*.py``, ``conftest.py``, ``python_files`` patterns...)."""
    test_helpers: Mapping[str, tuple[PurePosixPath, ...]]
    """Other files under test folders, by module name: read only if a test file imports them."""
    project_modules: Mapping[str, PurePosixPath]
    """The project's own (non-test, non-package) modules by dotted name, ``src/`` stripped."""


def inferred_from_test_imports(found: Found, pytest_config: PytestConfig | None, runtime: frozenset[str]) -> None:
    """Third-party modules imported by test files, by the helpers they import, and by the project
    modules they import by name (``from cattrs.preconf.orjson import ...`` needs orjson).

    Distributions the project itself depends on are left out: they come with the project.
    """
    patterns = list(_TEST_FILE_PATTERNS)
    if pytest_config is not None:
        patterns += [p for p in pytest_config.args("python_files") if p.endswith(".py")]
    extra_paths = pytest_config.args("pythonpath") if pytest_config is not None else []
    layout = _scan_layout(found.repo, patterns, extra_paths)
    queue = list(layout.test_files)
    queued = set(queue)
    followed: set[PurePosixPath] = set()

    def add(module: str, origin: str) -> None:
        distribution = distribution_for_import(module)
        if distribution is not None and canonicalize_name(distribution) not in runtime:
            found.add(distribution, origin, declared=False)

    requested_fixtures: dict[str, PurePosixPath] = {}
    defined_fixtures: set[str] = set()
    while queue:
        relative = queue.pop(0)
        tree = _parse_file(found.repo / relative)
        if tree is None:
            continue
        for name in _requested_fixtures(tree):
            requested_fixtures.setdefault(name, relative)
        defined_fixtures.update(_defined_fixtures(tree))
        for imported in imports_in_tree(tree):
            if imported.how == "pytest_plugins" and imported.module in PYTEST_BUILTIN_PLUGINS:
                continue
            top = imported.module.split(".")[0]
            if imported.level == 0 and top not in layout.local_modules:
                add(imported.module, f"{imported.how} in {relative}")
                continue
            for name in [*imported.module.split("."), *imported.names]:
                for helper in layout.test_helpers.get(name, ()):
                    if helper not in queued:
                        queued.add(helper)
                        queue.append(helper)
            if imported.level > 0:
                continue
            for dotted in [imported.module, *(f"{imported.module}.{name}" for name in imported.names)]:
                module_file = layout.project_modules.get(dotted)
                if module_file is None or module_file in followed:
                    continue
                followed.add(module_file)
                module_tree = _parse_file(found.repo / module_file)
                for inner in imports_in_tree(module_tree, module_level_only=True) if module_tree else []:
                    if inner.level == 0 and inner.module.split(".")[0] not in layout.local_modules:
                        add(inner.module, f"import in {module_file} (imported by {relative})")
    for name, relative in requested_fixtures.items():
        if name in _PLUGIN_FOR_FIXTURE and name not in defined_fixtures:
            found.add(_PLUGIN_FOR_FIXTURE[name], f"fixture {name} in {relative}", declared=False)


def _scan_layout(repo: Path, test_patterns: Iterable[str], extra_paths: Iterable[str]) -> _Layout:
    """Sort the Python files, and find what test code can import without installing anything.

    That is what lies on ``sys.path`` under pytest: the root and ``src/``, the folders of
    ``pythonpath`` in the pytest configuration, and each test file's *basedir* (the first folder
    up from it without ``__init__.py``, which pytest's default import mode inserts); and, since
    suites put their own test data on ``sys.path``, any module or folder inside a test folder.
    """
    files = [(relative, is_package) for relative, is_package in _python_files(repo)]
    packages = {relative.parent for relative, is_package in files if is_package}
    test_files: list[PurePosixPath] = []
    test_helpers: dict[str, list[PurePosixPath]] = {}
    project_modules: dict[str, PurePosixPath] = {}
    for relative, _ in files:
        in_test_folder = any(part in _TEST_DIRS for part in relative.parts[:-1])
        if relative.name != "__init__.py" and any(fnmatch.fnmatch(relative.name, p) for p in test_patterns):
            test_files.append(relative)
        elif in_test_folder:
            name = relative.parent.name if relative.name == "__init__.py" else relative.stem
            test_helpers.setdefault(name, []).append(relative)
        elif relative.name != "__init__.py" and relative.suffix == ".py":
            parts = relative.with_suffix("").parts
            project_modules[".".join(parts[1:] if parts[0] == "src" else parts)] = relative

    search_path = {PurePosixPath("."), PurePosixPath("src")} | {PurePosixPath(p) for p in extra_paths}
    for relative in test_files:
        basedir = relative.parent
        while basedir in packages and basedir != PurePosixPath("."):
            basedir = basedir.parent
        search_path.add(basedir)
    local_modules: set[str] = set()
    for relative, _ in files:
        test_folder = next((i for i, part in enumerate(relative.parts[:-1]) if part in _TEST_DIRS), None)
        if test_folder is not None:  # test data that a conftest puts on sys.path itself
            local_modules.update(relative.parts[test_folder + 1 : -1])
            local_modules.add(relative.stem)
        for folder in [relative.parent, *relative.parent.parents]:
            if folder in search_path:
                inside = relative.relative_to(folder).parts
                local_modules.add(inside[0] if len(inside) > 1 else relative.stem)
    return _Layout(
        local_modules=frozenset(local_modules),
        test_files=tuple(test_files),
        test_helpers={name: tuple(paths) for name, paths in test_helpers.items()},
        project_modules=project_modules,
    )


def _python_files(repo: Path) -> Iterator[tuple[PurePosixPath, bool]]:
    """Python files under ``repo`` (relative, sorted), each with whether its folder is a package."""
    for folder, dirnames, filenames in os.walk(repo):
        dirnames[:] = sorted(
            d for d in dirnames if not d.startswith(".") and d not in _SKIPPED_DIRS and not d.endswith(".egg-info")
        )
        is_package = "__init__.py" in filenames
        relative_folder = PurePosixPath(Path(folder).relative_to(repo).as_posix())
        for filename in sorted(filenames):
            if filename.endswith((".py", ".pyi", ".pyx")):
                yield relative_folder / filename, is_package


def _parse_file(path: Path) -> ast.Module | None:
    """A ``.py`` file's syntax tree; None for other files, unparseable ones and data dumps."""
    if path.suffix != ".py" or path.stat().st_size > _LARGEST_PARSED_FILE:
        return None
    return parse_python(read_text(path))


def _function_definitions(statements: Iterable[ast.AST]) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Functions defined at any depth, found through statements only (data literals are skipped)."""
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node
        yield from _function_definitions(child for child in children(node) if isinstance(child, ast.stmt))


def _requested_fixtures(tree: ast.Module) -> Iterator[str]:
    """Argument names of test functions and fixtures: the fixtures they request."""
    for function in _function_definitions(tree.body):
        if function.name.startswith("test") or _is_fixture(function):
            for argument in [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]:
                yield argument.arg


def _defined_fixtures(tree: ast.Module) -> Iterator[str]:
    """Names of the fixtures a file defines (a suite may define its own ``benchmark``)."""
    for function in _function_definitions(tree.body):
        if _is_fixture(function):
            yield function.name


def _is_fixture(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(
        called_name(decorator.func if isinstance(decorator, ast.Call) else decorator) in ("fixture", "yield_fixture")
        for decorator in function.decorator_list
    )

"""Building the index: which files of the package paths are indexed, each scanned, then all resolved."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path, PurePosixPath

from taskforge.repo.symbols.index import SymbolIndex
from taskforge.repo.symbols.resolver import Resolver
from taskforge.repo.symbols.scanner import ModuleScan, scan_file
from taskforge.repo.testfiles import DEFAULT_LAYOUT, TestLayout

__all__ = ["build_index"]


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
    scans: dict[str, ModuleScan] = {}
    for module, rel in sorted(files.items(), key=lambda item: item[1]):
        scans[module] = scan_file(repo, rel, module)
    return Resolver(repo, scans).index()


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

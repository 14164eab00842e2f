"""The twins under test: each project's test files, and one twin per plain test function, made by
taskforge's own ``make_twins`` and placed by its ``place_twin``.

Per test the best-ranked twin kind is kept (value 0, raises/input 1, negated 2, plain 3; random
among equals), as scoring's plan prefers them; offline there is no gold to calibrate against, so
no twin is dropped for passing gold.
"""

from __future__ import annotations

import ast
import random
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from taskforge.repo.canaries import TWIN_RANK, Twin, make_twins

__all__ = ["PROJECTS", "TestFile", "TwinnedTest", "project_files", "sdist_tree"]

PROJECTS = ("iniconfig==2.3.1", "addict==2.4.0", "cachetools==8.0.2", "six==1.17.0", "boltons==26.2.0",
            "toolz==1.2.0")
"""Development projects (pinned sdists): none is in recipes/heldout.toml."""


_FUNCTIONS_PER_CALL = 60  # make_twins twins at most 64 functions per call: a file is fed in slices


@dataclass(frozen=True, kw_only=True, slots=True)
class TwinnedTest:
    """One plain test function of a file and the twin it gets."""

    test: str
    """Node id, relative to the sdist's top folder (``tests/test_x.py::TestA::test_b``)."""
    classes: tuple[str, ...]
    """The classes the function is defined in, outermost first."""
    name: str
    """The function's name."""
    twin: Twin
    """The chosen twin (of the best-ranked kind this test has)."""
    kinds: tuple[str, ...]
    """Every kind ``make_twins`` offered for this test."""

    @property
    def kind(self) -> str:
        return self.twin.kind


@dataclass(frozen=True, kw_only=True, slots=True)
class TestFile:
    """A test file as the sdist ships it, and its twinned tests (in ``make_twins``'s order)."""

    __test__ = False  # not a pytest class, whatever its name

    path: str
    """Relative to the sdist's top folder."""
    text: str
    """The file's text, line endings as on disk."""
    tests: tuple[TwinnedTest, ...]


def sdist_tree(spec: str, *, cache: Path) -> Path:
    """The extracted sdist of ``spec`` (``name==version``), downloaded with pip into ``cache``."""
    name, version = spec.split("==")
    sdists = cache / "sdists"

    def archive() -> Path | None:
        hits = sorted(p for p in sdists.glob("*.tar.gz") if p.name.lower().startswith(f"{name.lower()}-{version}"))
        return hits[0] if hits else None

    found = archive()
    if found is None:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", spec,
                        "-d", str(sdists)], check=True)
        found = archive()
        if found is None:
            raise FileNotFoundError(f"pip download of {spec} left no {name}-{version}*.tar.gz in {sdists}")
    top = cache / "src" / found.name.removesuffix(".tar.gz")
    if not top.is_dir():
        partial = top.with_name(top.name + ".partial")  # an interrupted extraction never counts as done
        with tarfile.open(found) as tar:
            tar.extractall(partial, filter="data")
        (partial / top.name).rename(top)
        partial.rmdir()
    return top


def _test_paths(top: Path) -> list[Path]:
    found = {p for pattern in ("test_*.py", "*_test.py") for p in top.rglob(pattern)}
    return sorted(p for p in found if p.is_file())


def _parametrized(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any("parametrize" in ast.dump(d) for d in function.decorator_list)


def _plain_tests(text: str) -> list[tuple[tuple[str, ...], str]]:
    """``(classes, name)`` of every plain (not parametrized) test function of a module: module-level
    ``test*`` functions, and ``test*`` methods of ``Test*`` / ``TestCase`` classes, those inherited
    from a base class of the same module included."""
    tree = ast.parse(text)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    out: list[tuple[tuple[str, ...], str]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test") \
                and not _parametrized(node):
            out.append(((), node.name))
        elif isinstance(node, ast.ClassDef) and (node.name.startswith("Test") or any(
                "TestCase" in ast.dump(b) for b in node.bases)):
            seen = set()
            bases = [classes[b.id] for b in node.bases if isinstance(b, ast.Name) and b.id in classes]
            for cls in [node, *bases]:
                for sub in cls.body:
                    if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef) and sub.name.startswith("test") \
                            and not _parametrized(sub) and sub.name not in seen:
                        seen.add(sub.name)
                        out.append(((node.name,), sub.name))
    return out


def project_files(spec: str, *, cache: Path) -> list[TestFile]:
    """The test files of ``spec`` that hold at least one twinned test, each test with one twin.

    Deterministic: the seeds derive from ``spec`` and the file's path. Twins are made afresh on
    every call (a few seconds), so they always come from the canaries code installed now.
    """
    top = sdist_tree(spec, cache=cache)
    rng = random.Random(spec)
    files = []
    for path in _test_paths(top):
        rel = str(path.relative_to(top))
        with path.open(encoding="utf-8", errors="surrogateescape", newline="") as handle:
            text = handle.read()  # newline="": a CRLF file stays CRLF, as a run's container holds it
        try:
            tests = _plain_tests(text)
        except SyntaxError:
            continue  # Python 2 only files of old projects: no run would hold them either
        ids = [f"{rel}::{'::'.join([*classes, name])}" for classes, name in tests]
        names = sorted({i.rsplit("::", 1)[1] for i in ids})
        by_test: dict[str, list[Twin]] = {}
        for start in range(0, len(names), _FUNCTIONS_PER_CALL):
            part = set(names[start:start + _FUNCTIONS_PER_CALL])
            chunk = [i for i in ids if i.rsplit("::", 1)[1] in part]
            for twin in make_twins({rel: text}, chunk, seed=f"{spec}:{rel}:{start}"):
                by_test.setdefault(twin.test, []).append(twin)
        twinned = []
        for test, twins in by_test.items():
            best = min(TWIN_RANK[t.kind] for t in twins)
            pick = rng.choice([t for t in twins if TWIN_RANK[t.kind] == best])
            twinned.append(TwinnedTest(test=test, classes=pick.classes, name=pick.name, twin=pick,
                                       kinds=tuple(sorted({t.kind for t in twins}))))
        if twinned:
            files.append(TestFile(path=rel, text=text, tests=tuple(twinned)))
    return files

"""What is common knowledge, and so no evidence of a leak: the Python standard library's names,
signatures and literals (``stdlib_vocabulary``, cached per interpreter), and what the
environment's dependencies define and install (:func:`interface_names`: full signatures, so a hook or
an override that matches its declaration is no copy; the files they install, which hold what they
hold whatever a task removed)."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import sys
import sysconfig
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import PurePosixPath
from typing import Any

from taskforge.guest.scanner import (
    normalize_docstring,
)

__all__ = ["IDENTIFIER", "PYTHON_SUFFIXES", "Interfaces", "Vocabulary", "collapsed", "format_signature", "interface_names", "interior_words", "parse", "runs", "stdlib_vocabulary", "task_interfaces"]


PYTHON_SUFFIXES = (".py", ".pyi")


IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse(text: str | None) -> ast.Module | None:
    if text is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def format_signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)
    parts = []
    for i, arg in enumerate(positional):
        parts.append(arg.arg + ("=..." if i >= first_default else ""))
        if args.posonlyargs and i == len(args.posonlyargs) - 1:
            parts.append("/")
    if args.vararg is not None:
        parts.append("*" + args.vararg.arg)
    elif args.kwonlyargs:
        parts.append("*")
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        parts.append(arg.arg + ("=..." if default is not None else ""))
    if args.kwarg is not None:
        parts.append("**" + args.kwarg.arg)
    keyword = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    return f"{keyword} {node.name}({', '.join(parts)})"


_RUN = re.compile(r"[A-Za-z0-9_]+")


@lru_cache(maxsize=4096)
def runs(text: str) -> frozenset[str]:
    """The maximal runs of word characters of ``text``, once per text and process."""
    return frozenset(_RUN.findall(text))


def interior_words(value: str) -> frozenset[str]:
    """The runs of word characters of ``value`` with a non-word character on both sides inside
    it: wherever ``value`` occurs, each of them is a whole run there too (a cheap test before a
    substring search; the first and last may be parts of longer words)."""
    return frozenset(m.group() for m in _RUN.finditer(value) if 0 < m.start() and m.end() < len(value))


@lru_cache(maxsize=4096)
def collapsed(text: str) -> str:
    return normalize_docstring(text)


@dataclass(frozen=True, kw_only=True, slots=True)
class Vocabulary:
    """How common words and strings are in Python code at large, judged by the standard library."""

    document_frequency: dict[str, int]
    """identifier -> how many standard library modules use it."""
    literals: str
    """Every short string literal of the standard library and its tests, NUL-separated."""
    modules: int
    found_in: dict[str, list[int]] = field(default_factory=dict)
    """identifier -> the modules that use it, for identifiers in at most :data:`_FOUND_IN_MAX`."""

    def co_occur(self, words: Sequence[str]) -> bool:
        """Whether some standard library module uses all of ``words``: then they make an idiom
        (``textwrap`` with ``dedent``, ``chain`` with ``from_iterable``) that any package may hold,
        however rare each word is. A word used too widely to be listed is taken to be in every
        module that holds the others."""
        listed: list[list[int]] = []
        for word in words:
            count = self.document_frequency.get(word, 0)
            if count == 0:
                return False
            if count <= _FOUND_IN_MAX:
                listed.append(self.found_in.get(word, []))
        if not listed:
            return True
        listed.sort(key=len)
        common = set(listed[0])
        for other in listed[1:]:
            common.intersection_update(other)
            if not common:
                return False
        return bool(common)

    def common_literal(self, value: str) -> bool:
        """Whether ``value`` is (part of) a standard library literal, or one of its identifiers."""
        if value in self.document_frequency:
            return True
        if len(value) > _LITERAL_CHARS or "\0" in value:
            return False  # longer than any literal kept, or across two of them
        return value in self.literals

    def rate(self, word: str) -> float:
        """The share of modules that hold ``word`` (smoothed: an unseen word is not impossible)."""
        return (self.document_frequency.get(word, 0) + 1) / self.modules


@lru_cache(maxsize=1)
def stdlib_vocabulary() -> Vocabulary:
    """The identifiers and short string literals of the standard library's sources, as a stand-in
    for what any third-party package may hold. Literals come from its test suite too: hidden tests
    assert on CPython's own error messages (``"invalid literal for int"``), which other packages'
    tests quote as well. Reading the sources takes a second or so; the result is kept in the cache
    folder, keyed by the interpreter and the standard library's location."""
    from taskforge.paths import cache_root

    root = sysconfig.get_paths()["stdlib"]
    key = hashlib.sha256(f"{sys.version}\0{root}\0{_VOCABULARY_FORMAT}".encode()).hexdigest()[:16]
    stored = cache_root() / "audit" / f"vocabulary-{key}.json"
    try:
        data = json.loads(stored.read_text(encoding="utf-8"))
        return Vocabulary(document_frequency=data["document_frequency"], literals=data["literals"],
                           modules=data["modules"], found_in=data["found_in"])
    except (OSError, ValueError, KeyError):
        pass  # not stored yet (or damaged): read the sources
    vocabulary = _read_stdlib_vocabulary(root)
    stored.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".vocabulary-", dir=stored.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"document_frequency": vocabulary.document_frequency, "literals": vocabulary.literals,
                   "modules": vocabulary.modules, "found_in": vocabulary.found_in}, handle)
    os.replace(tmp, stored)
    return vocabulary


_VOCABULARY_FORMAT = 2


_LITERAL_CHARS = 80
"""The longest standard library literal kept in the vocabulary."""


_FOUND_IN_MAX = 64


def _read_stdlib_vocabulary(root: str) -> Vocabulary:
    skip = {"site-packages", "dist-packages", "idlelib", "__pycache__"}
    tests = {"test", "tests"}
    frequency: dict[str, int] = {}
    found_in: dict[str, list[int]] = {}
    literals: set[str] = set()
    literal = re.compile(rf"""'([^'\\\n]{{1,{_LITERAL_CHARS}}})'|"([^"\\\n]{{1,{_LITERAL_CHARS}}})\"""")
    modules = 0
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [s for s in subfolders if s not in skip]
        in_tests = not tests.isdisjoint(PurePosixPath(os.path.relpath(folder, root)).parts)
        for name in files:
            if not name.endswith(".py"):
                continue
            try:
                with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as handle:
                    text = handle.read()
            except OSError:
                continue
            for single, double in literal.findall(text):
                literals.add(single or double)
            if in_tests:
                continue  # word rarity is judged on library code only
            modules += 1
            for word in set(IDENTIFIER.findall(text)):
                frequency[word] = frequency.get(word, 0) + 1
                found_in.setdefault(word, []).append(modules)
    found_in = {word: ids for word, ids in found_in.items() if len(ids) <= _FOUND_IN_MAX}
    return Vocabulary(document_frequency=frequency, literals="\0".join(sorted(literals)), modules=max(modules, 1),
                       found_in=found_in)


_INTERFACES_FORMAT = 4


_INTERFACE_FILE_BYTES = 1 << 20
_SITE_PACKAGES = re.compile(r"/opt/venv/lib/python3\.\d+/site-packages/(.+)")
"""Where the environment image's venv (``sandboxes/templates/env.Dockerfile``) installs the wheels."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Interfaces:
    """What the environment's dependencies define and install (:func:`interface_names`)."""

    signatures: frozenset[str] = frozenset()
    """Every function's and method's signature, as the fingerprint writes them."""
    files: frozenset[str] = frozenset()
    """Every file their wheels install, relative to ``site-packages``."""

    def installs(self, path: str) -> bool:
        """Whether ``path`` (in an image of the environment; ``FILE!member`` for what a scan found
        inside a file) is a file one of their wheels installs into the image's venv, or the
        bytecode Python compiled from one (``pkg/__pycache__/mod.cpython-311.pyc`` of ``pkg/mod.py``)."""
        where = _SITE_PACKAGES.fullmatch(path.split("!", 1)[0])
        if where is None:
            return False
        relative = where[1]
        folder, _, name = relative.rpartition("/")
        if folder.endswith("__pycache__") and name.endswith(".pyc"):
            source = f"{folder.removesuffix('__pycache__')}{name.split('.', 1)[0]}.py"
            return source.lstrip("/") in self.files
        return relative in self.files


def interface_names(wheelhouse: str | os.PathLike[str], *, own: Sequence[str] = ()) -> Interfaces:
    """What the wheels in ``wheelhouse`` (the environment's dependencies, which the image installs)
    define and install: the signatures (``def name(a, b=...)``) of the functions and methods of
    their Python files, the interfaces a project may implement or override; and the files they
    install, which hold what they hold whatever a task removed (:func:`Interfaces.installs`).

    Every file that lies under a folder or module named like one of ``own`` (the project's
    top-level packages and modules) is left out: a dependency that vendors the project
    (``setuptools/_vendor/more_itertools``) holds copies, not interfaces, and a copy in the image
    must stay evidence (the project's own wheel is not installed: ``taskforge.repo.environment``). Read once per set of wheels and kept in the cache folder; an
    absent wheelhouse (a task audited on another machine) gives none, which only makes the audit
    stricter."""
    import zipfile

    from taskforge.paths import cache_root

    folder = os.fspath(wheelhouse)
    try:
        wheels = sorted(name for name in os.listdir(folder) if name.endswith(".whl"))
    except OSError:
        return Interfaces()
    own_names = sorted({PurePosixPath(name).stem for name in own})
    key = hashlib.sha256("\0".join([str(_INTERFACES_FORMAT), *own_names, "", *wheels]).encode()).hexdigest()[:16]
    stored = cache_root() / "audit" / f"interfaces-{key}.json"
    try:
        data = json.loads(stored.read_text(encoding="utf-8"))
        return Interfaces(signatures=frozenset(data["signatures"]), files=frozenset(data["files"]))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    signatures: set[str] = set()
    files: set[str] = set()
    for wheel in wheels:
        try:
            with zipfile.ZipFile(os.path.join(folder, wheel)) as archive:
                for info in archive.infolist():
                    parts = PurePosixPath(info.filename).parts
                    if any(PurePosixPath(part).stem in own_names for part in parts):
                        continue
                    files.add(info.filename)
                    if not info.filename.endswith(PYTHON_SUFFIXES) or info.file_size > _INTERFACE_FILE_BYTES:
                        continue
                    text = archive.read(info).decode("utf-8", "replace")
                    tree = parse(text)
                    if tree is not None:
                        signatures.update(format_signature(node) for node in ast.walk(tree)
                                          if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))
        except (OSError, zipfile.BadZipFile):
            continue  # an unreadable wheel would not install either
    found = Interfaces(signatures=frozenset(signatures), files=frozenset(files))
    stored.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".interfaces-", dir=stored.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"signatures": sorted(signatures), "files": sorted(files)}, handle)
    os.replace(tmp, stored)
    return found


def task_interfaces(task: Any) -> Interfaces:
    """:func:`interface_names` of a task row's environment (its ``environment`` JSON)."""
    env = json.loads(task.environment)
    return interface_names(env["wheelhouse"], own=env.get("package_paths", ()))

"""Compare a start state with the original snapshot: which of its files keep a copy of the answer.

A fingerprint must hold nothing an agent may legitimately see, or every clean task would be
flagged; but "everything the start state shows" is too much to leave out: a verbatim copy of
the removed function in a stub, a code block of the docs, a backup under a name the scrub does
not know, a base64 blob, is visible too, and it is exactly the leak to find. So the start state
is compared with the original, place by place (:func:`compare`):

* **The project's code** (Python sources outside the docs, under a name Python can import, read
  as themselves) is the place the original had its code; the start state must keep it. What it
  shares with the removed code (another method with the same loop, a constant used twice, the
  kept signature and docstring of a hollowed body) is no evidence, and leaves the fingerprint.
  One exception: a module that is, as a whole, a copy of an original the task changed
  (``legacy.py`` beside ``headers.py``, ``headers_old.py``) is a stale copy, not code the start
  state needs.
* **Everywhere else** (documentation, stubs, notebooks, data, anything not named as Python
  source, copies under a Python suffix that no import reaches such as ``grammar.py
  pre-rewriting.py``, and whatever the audit decodes or unquotes out of any file: base64, hex,
  rot13, UTF-16, commented-out lines, doctest sessions, patches) the start state holds code only
  as a copy. A stretch there that repeats enough of the removed *implementation* verbatim (see
  :meth:`Removed.is_copy`) is a copy of the answer: a finding, whatever the original held at
  that place. Less than that (a usage example, an idiom, a signature the docs spell out) is no
  evidence, and leaves the fingerprint as before.

Only the implementation counts towards a copy: signatures, decorators and docstrings are what the
task shows anyway (a hollowed body keeps them, a problem statement's Interface section quotes
them). Hidden tests are not measured this way: test code repeats itself, and what of it the start
state shows leaves the fingerprint as everything visible did before.
"""

from __future__ import annotations

import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from taskforge.guest.scanner import UnitEvidence, iter_tokens, ngram_hashes, unit_evidence

__all__ = ["CODE_SUFFIXES", "COPY_SHARE", "COPY_TOKENS", "DOC_FOLDERS", "DUPLICATE_SHARE", "MIN_SHARED_RUN",
           "Comparison", "Removed", "compare", "is_code"]

CODE_SUFFIXES = (".py", ".pyw", ".pyx", ".pxd", ".pxi")
"""Python (and Cython) sources: the project's code, when they lie outside the docs."""

DOC_FOLDERS = frozenset({"doc", "docs", "documentation"})
"""A Python file under one of these (at any depth) is an example of the docs, not the project's code."""

COPY_TOKENS = 64
"""Tokens of the removed implementation, in one stretch, that make a copy: about seven lines of
code. Documentation shows a project's usage patterns, and the code repeats them: wsproto's README
has the 33 tokens of an event loop that its example server's handler is built around, mistune's
docs 20 tokens of the registration every plugin ends with. Those are no copy of the answer."""

COPY_SHARE = 0.75
"""Or this share of one removed run of implementation (a body too short for :data:`COPY_TOKENS`),
if that run has at least :data:`MIN_SHARED_RUN` tokens: mistune's registration boilerplate is 57%
of the shortest plugin's body."""

MIN_SHARED_RUN = 24

DUPLICATE_SHARE = 0.75
"""A Python module is a stale copy of a changed original when this share of its n-grams are the
original's (and it holds a copy's worth of the removed implementation)."""


@dataclass(kw_only=True, slots=True)
class Removed:
    """The removed implementation, token by token: what a copy would repeat."""

    n: int
    windows: dict[int, frozenset[int]] = field(default_factory=dict)
    """n-gram hash -> the implementation tokens (numbered over all runs) its window covers."""
    runs: list[frozenset[int]] = field(default_factory=list)
    """The implementation tokens of each removed run."""
    originals: Mapping[str, str] = field(default_factory=dict)
    """Original text of every changed file: a module that repeats one whole is a stale copy."""

    @classmethod
    def of(cls, runs: Iterable[list[tuple[str, bool]]], *, n: int, originals: Mapping[str, str]) -> Removed:
        """From token runs whose tokens say whether they are implementation."""
        removed = cls(n=n, originals=originals)
        number = 0
        windows: dict[int, set[int]] = {}
        for run in runs:
            ids = [number + i if implementation else -1 for i, (_, implementation) in enumerate(run)]
            number += len(run)
            removed.runs.append(frozenset(i for i in ids if i >= 0))
            for start, h in enumerate(ngram_hashes([token for token, _ in run], n)):
                covered = {i for i in ids[start:start + n] if i >= 0}
                if covered:
                    windows.setdefault(h, set()).update(covered)
        removed.windows = {h: frozenset(ids) for h, ids in windows.items()}
        return removed

    def copied(self, stretch: Iterable[int]) -> set[int]:
        """The implementation tokens a stretch of n-grams repeats."""
        covered: set[int] = set()
        for h in stretch:
            covered.update(self.windows.get(h, ()))
        return covered

    def is_copy(self, covered: set[int]) -> bool:
        """Whether repeating ``covered`` (:meth:`copied`) is a copy of the implementation: see
        :data:`COPY_TOKENS` and :data:`COPY_SHARE`."""
        if len(covered) >= COPY_TOKENS:
            return True
        return any(len(run) >= MIN_SHARED_RUN and len(covered & run) >= COPY_SHARE * len(run) for run in self.runs)


@dataclass(kw_only=True, slots=True)
class Comparison:
    """The start state against the original: what it shows legitimately, and its copies."""

    shown: dict[str, set[Any]] = field(default_factory=dict)
    """Family -> fingerprint items found where the start state may show them: they leave the
    fingerprint."""
    copies: list[dict[str, str]] = field(default_factory=list)
    """Each copy of the removed implementation: ``path`` (in the start state), ``kind`` (the
    channel it was read through) and ``detail``."""


def is_code(path: str) -> bool:
    """Whether a start-state path is the project's code (see the module doc): a Python source
    outside the docs whose name Python can import. ``grammar.py pre-rewriting.py``,
    ``headers copy.py`` or ``headers.orig.py`` is a copy kept under a Python suffix."""
    pure = PurePosixPath(path)
    return (pure.suffix in CODE_SUFFIXES and pure.stem.isidentifier()
            and DOC_FOLDERS.isdisjoint(part.lower() for part in pure.parts[:-1]))


def compare(
    fingerprint: Mapping[str, Any], removed: Removed, *, visible: Mapping[str, str], changed: Iterable[str],
    codes: Mapping[str, types.CodeType],
) -> Comparison:
    """Read the start state (``visible`` texts and the bytecode of its Python files) for
    ``fingerprint`` as the audit reads files, and sort what it holds into what may stay and what
    is a copy. ``changed``: the files the task edited, where the kept text is the original's own."""
    request = {**fingerprint, "copy_ngrams": sorted(removed.windows)}
    edited = frozenset(changed)
    comparison = Comparison()
    copies: dict[str, tuple[int, dict[str, str]]] = {}
    for unit in unit_evidence(request, visible, codes):
        copy = _copy(unit, removed, visible, edited)
        if copy is None:
            for family, items in unit.items.items():
                comparison.shown.setdefault(family, set()).update(items)
        elif unit.path not in copies or copies[unit.path][0] < copy[0]:
            # A file read several ways (as text, its quoted lines): the reading that repeats most.
            copies[unit.path] = copy[0], {"path": unit.path, "kind": unit.chain[0], "detail": copy[1]}
    comparison.copies = [copies[path][1] for path in sorted(copies)]
    return comparison


def _copy(unit: UnitEvidence, removed: Removed, visible: Mapping[str, str],
          edited: frozenset[str]) -> tuple[int, str] | None:
    """(tokens repeated, why) if ``unit`` is a copy of the removed implementation; else None."""
    if unit.chain == ("code",):
        return None  # a visible file's bytecode: that file is judged as text
    copied = [covered for stretch in unit.stretches if removed.is_copy(covered := removed.copied(stretch))]
    if not copied:
        return None
    tokens = max(map(len, copied))
    what = f"{tokens} tokens of the removed implementation, verbatim"
    if unit.chain != ("text",) or not is_code(unit.path):
        return tokens, what
    if unit.path in edited:
        return None  # the task's own file: the rest of the original, kept where it was
    original = _duplicated(visible[unit.path], removed)
    return (tokens, f"{what}: the module repeats {original}") if original is not None else None


def _duplicated(text: str, removed: Removed) -> str | None:
    """The changed original that ``text`` repeats as a whole (:data:`DUPLICATE_SHARE` of its
    n-grams), if any."""
    hashes = set(ngram_hashes([token for _, token in iter_tokens(text)], removed.n))
    if not hashes:
        return None
    for path, original in sorted(removed.originals.items()):
        shared = hashes & set(ngram_hashes([token for _, token in iter_tokens(original)], removed.n))
        if len(shared) >= DUPLICATE_SHARE * len(hashes):
            return path
    return None

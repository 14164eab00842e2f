"""Scan a filesystem for leftover copies of removed code: the leak audit of a task's sandbox.

A task deletes a feature; a model trained on such tasks will find any copy of it that was left
behind: bytecode, a type-checker cache, git objects, an installed wheel, built docs. This script
walks the given roots and looks inside every file for the *fingerprint* of the removed code (built
on the host by :mod:`taskforge.mining.audit.fingerprint`). It is one stdlib-only file: it is copied into the
sandbox and run with the sandbox's Python, and the host imports it too (the tokenizer, the n-gram
hash and the matchers live here so both sides agree bit for bit)::

    python audit_scan.py REQUEST.json      # or the request on stdin; prints one JSON object

Request::

    {"fingerprints": {"<task id>": <Fingerprint.to_json()>, ...},
     "roots": ["/workspace", "/usr/local/lib/python3.11/site-packages", "/tmp", ...],
     "exclude": ["/tmp/audit_scan.py"], "max_file_bytes": 67108864}

Response::

    {"findings": {"<task id>": [{"path", "kind", "match", "detail", "score", "evidence"}, ...]},
     "files": n, "bytes": n, "skipped": [{"path", "reason", "errno"?}], "seconds": s}

A skip names what was left unread and why: over the size limit, nested too deep, inflating or
decoding past the budget, an error of the file system (with its ``errno``), or a damaged
container whose raw bytes were read. The caller decides which make an audit unclean.

``"clean_texts"`` (in-process callers only, bytes): texts every fingerprint was already read
against, as this scan reads them (:func:`unit_evidence`, :func:`reads_alike`); a text unit with
exactly those bytes is passed over. The host's scan of a start state gives its files there, and
their git blobs go too.

``kind`` is the channel the copy was found in: its outermost container (``zip``, ``tar``,
``gzip``, ``bz2``, ``xz``, ``zlib``, ``lzma``, ``git-loose``, ``git-pack``, ``git-bundle``,
``sqlite``), the encoding it was decoded from (``base64``, ``hex``, ``rot13``, ``utf-16``,
``utf-32``), ``quoted`` for lines behind a quoting prefix (commented-out code, a doctest session,
a patch), or, for a plain file, its format (``text``, ``pyc``, ``json``, ``notebook``, ``html``,
``java-class``, ``binary``). A decoded blob or a file's quoted lines are a unit of their own,
reported as ``FILE!base64@OFFSET``, ``FILE!quoted``.
``match`` is the strongest kind of evidence (``ngram``, ``signature``, ``docstring``, ``body``,
``test_id``, ``name``, ``constant``, ``path``); ``evidence`` lists all of it.

Zero findings on a clean task matter as much as catching leaks, so evidence is scored and a unit
(a file, an archive member, a git object) is reported only at :data:`REPORT_SCORE` points. Strong
evidence alone reaches it: at least :data:`NGRAM_HITS` distinct n-grams of the removed code, a
docstring, a hidden test id, a dotted name (``pkg.mod.func``), a removed function's signature with
a distinctive name, a prose string constant, or a bytecode function whose names are those of the
removed body. Weak evidence (a bare name in a ``def``, a short constant, a path) must add up.
The fingerprint itself holds nothing the start state may legitimately show, and nothing common
in the standard library; see :mod:`taskforge.mining.audit.fingerprint` and
:mod:`taskforge.mining.audit.original`, which read the start state with :func:`unit_evidence`.

Cost: every file is read once; a single regex pass collects its identifier-like words and only
files that contain an *anchor* word of some fingerprint are tokenized. ``.pyc`` files are
unmarshalled (cheaper than a regex pass); archives, git objects and compressed files are inflated.
Encoded blobs are looked for only in text units whose words leave room for one (a long word that
reads as base64 or hex, many hex escapes), decoded only if their first 4 KiB decode to text or a
known format, and all of a scan's decoding is bounded (:data:`DECODE_BUDGET_FACTOR`). rot13 is
tried only where a unit holds an item's word in rot13, quoted lines only where some n-gram's
words are there.
"""

from __future__ import annotations

import binascii
import bz2
import errno
import hashlib
import html
import importlib.util
import io
import json
import lzma
import marshal
import os
import re
import sqlite3
import stat
import struct
import sys
import tarfile
import time
import types
import urllib.parse
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "NGRAM_HITS",
    "REPORT_SCORE",
    "anchor_word",
    "anchor_words",
    "code_signature_key",
    "gate_words",
    "is_distinctive",
    "iter_tokens",
    "main",
    "ngram_hashes",
    "normalize_docstring",
    "parse_signature",
    "reads_alike",
    "UnitEvidence",
    "unit_evidence",
    "scan",
    "test_id_patterns",
    "token_words",
]

# ---------------------------------------------------------------------------------------------
# Limits and scores
# ---------------------------------------------------------------------------------------------

DEFAULT_MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 4
"""Containers nested deeper than this (a zip in a tar in a git pack ...) are not opened."""
INFLATE_FACTOR = 8
"""A container may inflate to this many times ``max_file_bytes`` in all before it is skipped."""

REPORT_SCORE = 3
NGRAM_HITS = 4
"""Distinct n-gram hits that make n-gram evidence strong: four overlapping windows already span
n + 3 tokens, longer than any idiom two projects share by chance once the start state's own
n-grams are taken out."""
STRONG, MEDIUM, WEAK = 3, 2, 1
MIN_WORD = 5
"""Anchor words have at least this many characters: shorter ones are in every file."""
ANCHOR_WORDS = 3
"""Words per anchor: a file is looked at closely only if it holds all words of an anchor."""
BINARY_NGRAM_BYTES = 4 * 1024 * 1024
"""Unknown binaries above this size (shared libraries, data blobs) are checked for strings only
(constants, dotted names, docstrings, test ids), not for n-grams of source code: they hold no
source, and their megabytes of text make every combination of common words appear."""

PROGRAM_CONSTANT_CHARS = 24
"""In a compiled program or library (:func:`program_format`), a string constant shorter than this
and not prose (``_constant_weight`` below STRONG) is evidence only beside other evidence: a
program's string tables hold tens of thousands of short words and labels (a 24 MB linter held 15
of one project's hidden test strings), while a compiled copy of the removed code also holds its
names, docstrings, longer strings or test ids. A long single word (a URL, a regex) still counts."""
PROGRAM_CLUSTER = 3
PROGRAM_CLUSTER_CHARS = 512
"""... or when this many distinct short constants of one task lie within this many characters of
the program's strings: a copied test's data, not words scattered over megabytes."""

MIN_ENCODED_BYTES = 48
"""Encoded blobs (base64, hex) are decoded only if they hold at least this many bytes: a dozen
tokens of code, about what one n-gram spans. Hashes and ids (a sha256 is 32 bytes) stay below."""
DECODE_BUDGET_FACTOR = 4
"""A scan decodes at most this many times ``max_file_bytes`` of blobs that look like text or a
known format once decoded; what is left over is reported unread, not passed over."""
_PEEK_CHARS = 4096
"""Encoded characters decoded first to see whether a blob holds text or a known format at all:
random data (images, certificates, hashes) costs this much and no more."""
QUOTED_MIN_LINES = 3
"""Lines behind a quoting prefix (``#``, ``>>>``, ``...``, ``>``, ``+``, ``-``, ``|``) a text needs
before its quoted lines are also read as code on their own: commented-out code, doctest sessions,
patches, quoted mail."""

SKIP_DIRS = ("/proc", "/sys", "/dev")
_MATCH_ORDER = ("ngram", "signature", "docstring", "body", "test_id", "name", "constant", "path")

# ---------------------------------------------------------------------------------------------
# Tokens, n-grams, words: shared with taskforge.mining.audit.fingerprint
# ---------------------------------------------------------------------------------------------

# One alternation, no groups, so ``findall`` returns plain strings. Order matters: comments, then
# strings (a prefix letter belongs to the string), names, numbers, operators.
_TOKEN_RE = re.compile(
    r"""\#[^\r\n]*"""
    r"""|(?:[rRbBuUfF]{1,2})?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\""""
    r"""|'(?:\\.|[^'\\\r\n])*'|"(?:\\.|[^"\\\r\n])*")"""
    r"""|[^\W\d]\w*"""
    r"""|0[xXoObB][0-9a-fA-F_]+|(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][-+]?\d+)?[jJ]?"""
    r"""|\*\*=?|//=?|>>=?|<<=?|->|:=|\.\.\.|[-+*/%&|^@<>=!]=|[^\s\w\\]"""
)
_QUOTES = "'\""
# Words are maximal runs of ASCII letters, digits and "_" that start with a letter or "_" and
# have five characters or more: anchors are chosen with this regex ...
_WORD_S = re.compile(rf"(?<![A-Za-z0-9_])[A-Za-z_][A-Za-z0-9_]{{{MIN_WORD - 1},}}")
# ... and found in files by splitting (translate + split runs at C speed, four times faster than
# a regex on binaries): every byte that cannot be in a word becomes a space.
_WORD_TABLE = bytes(c if chr(c).isascii() and (chr(c).isalnum() or c == 0x5F) else 0x20 for c in range(256))
_PRINTABLE_B = re.compile(rb"[\x20-\x7e\t]{%d,}" % MIN_WORD)

_HASH_MOD = (1 << 61) - 1
_HASH_BASE = 0x5BD1E995

# Words that make useless anchors: keywords, builtins, the names every Python file uses, and the
# test tooling every sandbox installs (the standard library, which judges rarity, never says
# "pytest"). A fixed list, so the host and any sandbox interpreter choose the same anchors.
_COMMON_WORDS_TEXT = """
    False await break class continue except finally global import lambda nonlocal raise
    return while yield assert async
    append args bytes callable classmethod delattr divmod enumerate
    Exception filter float format frozenset getattr globals hasattr input isinstance issubclass
    kwargs locals object other print property range reversed round
    setattr slice sorted staticmethod string super tuple value values items index count start
    result update extend insert remove clear unicode encode decode strip split lower
    upper replace startswith endswith __init__ __name__ __all__ __doc__ __file__ __class__
    typing Optional Union Callable Iterable Iterator Sequence Mapping Any TypeError
    ValueError KeyError IndexError RuntimeError AttributeError NotImplementedError
    pytest raises fixture fixtures parametrize monkeypatch tmp_path tmpdir capsys caplog approx
    skipif xfail unittest TestCase assertEqual assertTrue assertFalse assertRaises assertIn setUp
    tearDown hypothesis given strategies"""
_COMMON_WORDS = frozenset(_COMMON_WORDS_TEXT.split())


def iter_tokens(text: str) -> Iterator[tuple[int, str]]:
    """(offset, normalized token) for every token of ``text``; comments and layout are dropped.

    Names, keywords, numbers and operators stay as written (numbers lower-cased); a string keeps
    its body but loses its prefix and quote style, so ``r'a'`` and ``"a"`` are the same token.
    """
    for match in _TOKEN_RE.finditer(text):
        token = match.group()
        normal = _normalize_token(token)
        if normal is not None:
            yield match.start(), normal


def _normalize_token(token: str) -> str | None:
    first = token[0]
    if first == "#":
        return None
    if len(token) >= 2 and token[-1] in _QUOTES:
        body = token.lstrip("rRbBuUfF")
        quote = 3 if body[:3] in ("'''", '"""') and len(body) >= 6 else 1
        return '"' + body[quote:-quote] + '"'
    if first.isdigit() or (first == "." and len(token) > 1):
        return token.lower()
    return token


_NORMAL_CACHE: dict[str, str | None] = {}
_NORMAL_CACHE_SIZE = 1 << 17


def _tokens(text: str) -> list[str]:
    """The normalized tokens of ``text`` (:func:`iter_tokens` without offsets, faster)."""
    cache = _NORMAL_CACHE
    if len(cache) > _NORMAL_CACHE_SIZE:
        cache.clear()
    out: list[str] = []
    append = out.append
    for token in _TOKEN_RE.findall(text):
        normal = cache.get(token, token)
        if normal is token:
            # Names and operators repeat endlessly; normalize each spelling once.
            normal = cache[token] = _normalize_token(token)
        if normal is not None:
            append(normal)
    return out


class _TextCache:
    """Per-process results for whole texts, keyed by the text itself: the tasks of one repository
    scan nearly the same start-state files, so each file's tokens and n-gram hashes are computed
    once. Small texts are not kept (cheap to redo); the total kept is bounded, oldest out first."""

    def __init__(self, limit_chars: int, min_chars: int = 2048) -> None:
        self.limit_chars = limit_chars
        self.min_chars = min_chars
        self.chars = 0
        self.entries: dict[tuple[str, int], list[Any]] = {}

    def get(self, text: str, n: int) -> list[Any] | None:
        return self.entries.get((text, n)) if len(text) >= self.min_chars else None

    def put(self, text: str, n: int, value: list[Any]) -> list[Any]:
        if len(text) < self.min_chars:
            return value
        while self.entries and self.chars + len(text) > self.limit_chars:
            (old, _), _ = next(iter(self.entries.items()))
            self.chars -= len(old)
            del self.entries[next(iter(self.entries))]
        self.entries[(text, n)] = value
        self.chars += len(text)
        return value


_TEXTS = _TextCache(limit_chars=64 << 20)
_UNIT_WORDS = _TextCache(limit_chars=32 << 20)
"""The words of start-state files (bytes) for the host's :func:`unit_evidence`, once per file."""
_UNIT_VIEWS = _TextCache(limit_chars=32 << 20)
"""Their decoded blobs and quoted lines, likewise."""


def _cached_tokens(text: str) -> list[str]:
    """``_tokens(text)``, from the per-process cache when the text was seen (do not modify it)."""
    found = _TEXTS.get(text, 0)
    return found if found is not None else _TEXTS.put(text, 0, _tokens(text))


def _text_words(text: str) -> set[bytes]:
    """``_word_set`` of a text, from the per-process cache when the text was seen (do not modify
    it): each task of a repository matches its fingerprint against the same start-state files."""
    found = _TEXTS.get(text, -1)
    if found is not None:
        return found  # type: ignore[return-value]
    words = _word_set(text.encode("utf-8", "replace"), glued=False)
    _TEXTS.put(text, -1, words)  # type: ignore[arg-type]
    return words


def _cached_ngram_hashes(text: str, tokens: Sequence[str], n: int) -> list[int]:
    """``ngram_hashes(tokens, n)`` of ``text``'s tokens, cached like them (do not modify it)."""
    found = _TEXTS.get(text, n)
    return found if found is not None else _TEXTS.put(text, n, ngram_hashes(tokens, n))


@lru_cache(maxsize=1 << 17)
def _token_value(token: str) -> int:
    digest = hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % _HASH_MOD


def ngram_hashes(tokens: Sequence[str], n: int) -> list[int]:
    """The hash of every window of ``n`` tokens, in order (``len(tokens) - n + 1`` of them).

    A polynomial rolling hash mod 2**61 - 1 over BLAKE2b values of the tokens: the same on every
    machine and process (unlike ``hash``), and one multiply-add per window.
    """
    if len(tokens) < n:
        return []
    values = [_token_value(token) for token in tokens]
    drop = pow(_HASH_BASE, n - 1, _HASH_MOD)
    h = 0
    for value in values[:n]:
        h = (h * _HASH_BASE + value) % _HASH_MOD
    out = [h]
    for i in range(n, len(values)):
        h = ((h - values[i - n] * drop) * _HASH_BASE + values[i]) % _HASH_MOD
        out.append(h)
    return out


def token_words(token: str) -> list[str]:
    """Anchor candidates in a normalized token: the token itself if it is a long enough name, or
    the long words inside a string."""
    return [word for word in _WORD_S.findall(token) if word not in _COMMON_WORDS]


def anchor_word(text: str) -> str | None:
    """The longest word (five characters or more, not a keyword or builtin) of ``text``; None when
    it has none: then nothing can anchor ``text`` and it is no evidence."""
    words = anchor_words(text)
    return words[0] if words else None


def anchor_words(text: str, limit: int = ANCHOR_WORDS) -> tuple[str, ...]:
    """The ``limit`` longest distinct words of ``text``, longest first (the later one on ties:
    the first word of a string in a binary format may be glued to a length byte). A file can
    hold ``text`` only if it holds all of them, a much rarer event than holding one."""
    words = [word for word in _WORD_S.findall(text) if word not in _COMMON_WORDS]
    ranked = sorted(range(len(words)), key=lambda i: (len(words[i]), i), reverse=True)
    chosen: list[str] = []
    for i in ranked:
        if words[i] not in chosen:
            chosen.append(words[i])
        if len(chosen) == limit:
            break
    return tuple(chosen)


def gate_words(text: str, first: str | None = None) -> tuple[str, ...]:
    """The words a unit must hold, as whole words, for ``text`` to be found in it by the matchers
    (which want every identifier of a constant, docstring or dotted name among the unit's
    identifiers): ``first`` if given, else :func:`anchor_words`, then every word of ``text`` split
    as units are split (:data:`_WORD_TABLE`). Only a leading word that starts with a digit is left
    out ("3rd" may sit in "13rd"). A unit is looked at closely only if it holds all of them: a
    constant's longest words alone let through every file that says "source" and "support"."""
    raw = text.encode("utf-8", "replace")
    parts = raw.translate(_WORD_TABLE).split()
    if parts and raw[:1].isdigit():
        parts = parts[1:]
    lead = [first] if first else [] if first == "" else list(anchor_words(text))
    return tuple(dict.fromkeys([*lead, *(word.decode("ascii") for word in parts)]))


def normalize_docstring(text: str) -> str:
    """Whitespace collapsed to single spaces: indentation and line breaks do not matter."""
    return " ".join(text.split())


def test_id_patterns(node_id: str) -> list[str]:
    """How a pytest node id shows up on disk: the id without parameters (``.pytest_cache``,
    pytest-cov contexts) and coverage.py's ``test_function`` context ``module.Class.test``."""
    plain = node_id.split("[", 1)[0]
    patterns = [plain]
    file_part, _, rest = plain.partition("::")
    if rest:
        stem = file_part.rsplit("/", 1)[-1].removesuffix(".py")
        patterns.append(".".join([stem, *rest.split("::")]))
    return patterns


def _signature_key(name: str, positional: Sequence[str], kwonly: Sequence[str], vararg: str, varkw: str) -> str:
    # Annotations and default values are left out: bytecode has neither.
    return f"{name}({','.join(positional)};{','.join(kwonly)};{vararg};{varkw})"


_OPENERS = frozenset("([{")
_CLOSERS = frozenset(")]}")


def _def_signature(tokens: Sequence[str], at: int) -> tuple[str, str] | None:
    """(name, key) of the ``def`` whose ``def`` keyword is ``tokens[at]``."""
    if at + 2 >= len(tokens) or tokens[at + 2] != "(":
        return None
    name = tokens[at + 1]
    params: list[list[str]] = [[]]
    depth = 0
    i = at + 3
    while i < len(tokens):
        token = tokens[i]
        if token in _OPENERS:
            depth += 1
        elif token in _CLOSERS:
            if depth == 0:
                break
            depth -= 1
        elif token == "," and depth == 0:
            params.append([])
            i += 1
            continue
        params[-1].append(token)
        i += 1
    else:
        return None
    positional: list[str] = []
    kwonly: list[str] = []
    vararg = varkw = ""
    star_seen = False
    for param in params:
        if not param or param[0] == "/":
            continue
        if param[0] == "*":
            star_seen = True
            if len(param) > 1 and param[1] not in (":", "="):
                vararg = param[1]
            continue
        if param[0] == "**":
            if len(param) > 1:
                varkw = param[1]
            continue
        (kwonly if star_seen else positional).append(param[0])
    return name, _signature_key(name, positional, kwonly, vararg, varkw)


def parse_signature(text: str) -> tuple[str, str] | None:
    """(name, key) of a signature such as ``def parse(line, *, strict=...)``; None if not one."""
    tokens = _tokens(text)
    for i, token in enumerate(tokens):
        if token == "def":
            return _def_signature(tokens, i)
    return None


def code_signature_key(code: types.CodeType) -> str:
    """The signature key of a function's code object (its parameters are its first varnames)."""
    names = code.co_varnames
    argcount, kwcount = code.co_argcount, code.co_kwonlyargcount
    i = argcount + kwcount
    vararg = varkw = ""
    if code.co_flags & 0x04:  # CO_VARARGS
        vararg = names[i]
        i += 1
    if code.co_flags & 0x08:  # CO_VARKEYWORDS
        varkw = names[i]
    return _signature_key(code.co_name, names[:argcount], names[argcount:argcount + kwcount], vararg, varkw)


def _mypy_signature_key(name: str, arg_names: Sequence[Any], arg_kinds: Sequence[Any]) -> str | None:
    # mypy.nodes.ArgKind: 0 ARG_POS, 1 ARG_OPT, 2 ARG_STAR, 3 ARG_NAMED, 4 ARG_STAR2, 5 ARG_NAMED_OPT
    positional, kwonly = [], []
    vararg = varkw = ""
    for arg, kind in zip(arg_names, arg_kinds):
        if not isinstance(arg, str):
            return None
        if kind in (0, 1):
            positional.append(arg)
        elif kind == 2:
            vararg = arg
        elif kind in (3, 5):
            kwonly.append(arg)
        elif kind == 4:
            varkw = arg
    return _signature_key(name, positional, kwonly, vararg, varkw)


def is_distinctive(name: str) -> bool:
    """A name no unrelated project is likely to define: long, and made of several words."""
    core = name.strip("_")
    return len(core) >= 8 and ("_" in core or any(c.isupper() for c in core[1:]))


def _constant_weight(text: str) -> int:
    words = [word for word in text.split() if sum(c.isalpha() for c in word) >= 2]
    if len(text) >= 16 and len(words) >= 3:
        return STRONG
    return MEDIUM if len(text) >= 10 else WEAK


# ---------------------------------------------------------------------------------------------
# The index: every fingerprint of the request, arranged for lookups
# ---------------------------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class _Task:
    task_id: str
    n: int
    ngrams: frozenset[int]
    names: frozenset[str]
    """Bare removed names; evidence only where something is defined under that name."""
    dotted: tuple[str, ...]
    """Qualified names (``pkg.mod.func``, ``pkg.mod``): specific enough to count anywhere."""
    paths: tuple[str, ...]
    """``pkg/mod.py`` for every dotted name: a module file that no longer exists."""
    signatures: dict[str, dict[str, str]]
    """name -> signature key -> the signature as the fingerprint spells it."""
    constants: tuple[str, ...]
    docstrings: tuple[str, ...]
    tests: dict[str, str]
    """pattern -> node id."""
    bodies: dict[str, frozenset[str]]
    modules: tuple[str, ...] = ()
    """How a compiled build of the project names the modules the task changed."""
    def_names: frozenset[str] = frozenset()
    """Names whose ``def``/``class`` is evidence: the bare names and the signatures' names."""
    dotted_items: tuple[str, ...] = ()
    """The dotted names, then their module paths."""
    test_patterns: tuple[str, ...] = ()
    """The keys of ``tests``."""
    def_words: frozenset[bytes] = frozenset()
    """``def_names`` as words: a text without any of them has no ``def`` of interest."""
    copy_ngrams: frozenset[int] = frozenset()
    """Further n-grams of the removed implementation, unfiltered (the host's comparison with the
    original only): no evidence on their own, they make a verbatim copy's stretch whole."""
    stretch_ngrams: frozenset[int] = frozenset()
    """``ngrams`` and ``copy_ngrams``: what a stretch (:class:`_Evidence`) is made of."""
    interface_ngrams: frozenset[int] = frozenset()
    """Of ``ngrams``, those at the header of a function that implements a dependency's interface:
    the n-gram evidence says how many of its hits they are (the host weighs a dependency's own
    files without them)."""



# Every ``def``/``class`` name of a text, found once per text for all tasks (a per-task alternation
# of names costs a pass over the text per task, and is slow with many names).
_DEF_ANY = re.compile(r"(?<![A-Za-z0-9_])(?:def|class)\s+([A-Za-z_][A-Za-z0-9_]*)(?![A-Za-z0-9_])")


@lru_cache(maxsize=256)
def _compiled_boundary_re(patterns: frozenset[str], left: bool) -> re.Pattern[str]:
    """One alternation of ``patterns`` with word boundaries. It is built of the items a unit's
    words let through only: an item that does not pass cannot occur in the unit, so it could not
    have taken a match from one that does, and a short alternation compiles fast."""
    items = sorted(patterns, key=len, reverse=True)
    body = "|".join(re.escape(item) for item in items)
    return re.compile(("(?<![A-Za-z0-9_])" if left else "") + f"(?:{body})(?![A-Za-z0-9_])")


def _build_task(task_id: str, data: Mapping[str, Any]) -> _Task:
    names = [str(name) for name in data.get("names", ())]
    dotted = tuple(name for name in names if "." in name)
    bare = frozenset(name for name in names if "." not in name)
    signatures: dict[str, dict[str, str]] = {}
    for text in data.get("signatures", ()):
        parsed = parse_signature(text)
        if parsed is not None:
            signatures.setdefault(parsed[0], {})[parsed[1]] = text
    tests: dict[str, str] = {}
    for node_id in data.get("test_ids", ()):
        for pattern in test_id_patterns(node_id):
            tests[pattern] = node_id
    task = _Task(
        task_id=task_id,
        n=int(data.get("n", 12)),
        ngrams=frozenset(int(h) for h in data.get("ngrams", ())),
        names=bare,
        dotted=dotted,
        paths=tuple("/".join(name.split(".")) + ".py" for name in dotted),
        signatures=signatures,
        constants=tuple(data.get("constants", ())),
        docstrings=tuple(normalize_docstring(d) for d in data.get("docstrings", ())),
        tests=tests,
        bodies={q: frozenset(ns) for q, ns in dict(data.get("bodies", {})).items()},
        copy_ngrams=frozenset(int(h) for h in data.get("copy_ngrams", ())),
        interface_ngrams=frozenset(int(h) for h in data.get("interface_ngrams", ())),
        modules=tuple(str(m) for m in data.get("modules", ())),
    )
    task.stretch_ngrams = task.ngrams | task.copy_ngrams if task.copy_ngrams else task.ngrams
    task.def_names = frozenset(bare) | frozenset(signatures)
    task.dotted_items = (*dotted, *task.paths)
    task.test_patterns = tuple(tests)
    task.def_words = frozenset(name.encode() for name in task.def_names)
    return task


def _needs(item: str) -> list[str]:
    """The words of ``item`` that a text holding it holds too (:func:`gate_words`), longest first
    (the first is the gate's key: the rarer, the fewer units try the rest)."""
    return sorted(gate_words(item, first=""), key=lambda word: (-len(word), word))


def _word_set(data: bytes, *, glued: bool) -> set[bytes]:
    """The words of ``data``. ``glued``: also every word without its first character, because in
    binary formats a length byte or type tag may sit right before a string ("Fpkg", "8fold") and
    in JSON an escape ("\\nFold")."""
    words = set(data.translate(_WORD_TABLE).split())
    if glued:
        words.update([word[1:] for word in words if len(word) > MIN_WORD])
    return words


_ROT13 = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    b"NOPQRSTUVWXYZABCDEFGHIJKLMnopqrstuvwxyzabcdefghijklm",
)

# What a gate entry lets through: an n-gram anchor, a task (its names, signatures and test
# names, to be looked for as definitions), or one item of a task: a dotted name (with its module
# path, whose words are the name's and "py"), a constant, a docstring, a test id pattern.
_NGRAM, _ADMIT, _DOTTED, _CONSTANT, _DOCSTRING, _TEST = range(6)

_Gate = dict[bytes, list[tuple[tuple[bytes, ...], int, int, int]]]
"""first word -> (the other words, task, kind, item number) for every entry."""


@dataclass(slots=True)
class _Gated:
    """What a unit's words let through: tasks with an n-gram anchor, and per task with any item
    entry the items (kind, number) whose every word the unit holds."""

    ngrams: set[int] = field(default_factory=set)
    items: dict[int, set[tuple[int, int]]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.ngrams or self.items)

    def has(self, task: int, kind: int) -> bool:
        return any(k == kind for k, _ in self.items.get(task, ()))


@dataclass(kw_only=True, slots=True)
class _Index:
    tasks: list[_Task]
    gate: _Gate
    names: dict[str, set[int]]
    signature_names: dict[str, set[int]]
    bodies: dict[str, set[int]]
    rot13_keys: frozenset[bytes] = frozenset()
    """The gate's first words as rot13 spells them: a unit holding one may be a rot13 copy."""

    @classmethod
    def build(cls, fingerprints: Mapping[str, Mapping[str, Any]]) -> _Index:
        tasks = [_build_task(task_id, data) for task_id, data in sorted(fingerprints.items())]
        gate: _Gate = {}
        names: dict[str, set[int]] = {}
        signature_names: dict[str, set[int]] = {}
        bodies: dict[str, set[int]] = {}

        def add(words: Sequence[str], task: int, kind: int, item: int = 0) -> None:
            if words:
                rest = tuple(word.encode() for word in words[1:])
                gate.setdefault(words[0].encode(), []).append((rest, task, kind, item))

        for i, task in enumerate(tasks):
            for words in fingerprints[task.task_id].get("anchors", ()):
                add([str(w) for w in words], i, _NGRAM)
            items = [*task.names, *(t.split("::")[-1] for t in task.tests.values())]
            for item in items:
                add(anchor_words(item), i, _ADMIT)
            for name, keys in task.signatures.items():
                for key in keys:  # the name and the parameters: defaults and annotations may differ
                    add(gate_words(key, name), i, _ADMIT)
            # Each item as its own entry, with exactly the words the matcher needs: a unit that
            # passes holds all of them, and one that does not cannot hold the item.
            for kind, group in ((_DOTTED, task.dotted_items), (_CONSTANT, task.constants),
                                (_DOCSTRING, task.docstrings), (_TEST, task.test_patterns)):
                for number, item in enumerate(group):
                    add(_needs(item), i, kind, number)
            for name in task.names:
                names.setdefault(name, set()).add(i)
            for name in task.signatures:
                signature_names.setdefault(name, set()).add(i)
            for qualname in task.bodies:
                bodies.setdefault(qualname, set()).add(i)
        rot13_keys = frozenset(word.translate(_ROT13) for word in gate) - frozenset(gate)
        return cls(tasks=tasks, gate=gate, names=names, signature_names=signature_names, bodies=bodies,
                   rot13_keys=rot13_keys)

    def gated(self, words: set[bytes]) -> _Gated:
        """What a unit with ``words`` may hold (:class:`_Gated`): the cheap test every unit goes
        through."""
        gated = _Gated()
        for first in words.intersection(self.gate):
            for rest, task, kind, item in self.gate[first]:
                if all(word in words for word in rest):
                    if kind == _NGRAM:
                        gated.ngrams.add(task)
                    else:
                        gated.items.setdefault(task, set()).add((kind, item))
        return gated


# ---------------------------------------------------------------------------------------------
# Evidence
# ---------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Evidence:
    """Evidence of one unit (file, member, object) against every task, keyed so that one fact
    counts once: a removed function seen as a name and as a signature is one symbol."""

    by_task: dict[int, dict[tuple[str, str], tuple[str, str, int]]] = field(default_factory=dict)
    items: dict[int, dict[str, set[Any]]] = field(default_factory=dict)
    """task -> family -> the fingerprint items matched (for calibration)."""
    stretches: dict[int, list[frozenset[int]]] = field(default_factory=dict)
    """task -> the n-grams of each stretch of the unit where they follow one another (no more than
    n tokens apart): the host tells a verbatim copy from scattered idioms by them. Kept only for
    tasks with ``copy_ngrams``."""

    def __bool__(self) -> bool:
        return bool(self.by_task or self.stretches)

    def add(self, task: int, key: tuple[str, str], match: str, value: str, weight: int, *items: Any) -> None:
        entries = self.by_task.setdefault(task, {})
        old = entries.get(key)
        if old is None or old[2] < weight:
            entries[key] = (match, value, weight)
        self.items.setdefault(task, {}).setdefault(match, set()).update(items)

    def merge(self, other: _Evidence) -> None:
        for task, entries in other.by_task.items():
            for key, (match, value, weight) in entries.items():
                mine = self.by_task.setdefault(task, {})
                if key not in mine or mine[key][2] < weight:
                    mine[key] = (match, value, weight)
        for task, families in other.items.items():
            for family, items in families.items():
                self.items.setdefault(task, {}).setdefault(family, set()).update(items)
        for task, stretches in other.stretches.items():
            self.stretches.setdefault(task, []).extend(stretches)


def _match_names(index: _Index, names: Iterable[str], evidence: _Evidence, context: str) -> None:
    """Names in a defining context: a code object, a symbol table entry, a Java method."""
    for name in names:
        for task in index.names.get(name, ()):
            weight = MEDIUM if is_distinctive(name) else WEAK
            evidence.add(task, ("symbol", name), "name", f"{context} {name}", weight, name)


def _match_signature(index: _Index, name: str, key: str, evidence: _Evidence) -> None:
    for task in index.signature_names.get(name, ()):
        text = index.tasks[task].signatures[name].get(key)
        if text is not None:
            weight = STRONG if is_distinctive(name) else WEAK
            evidence.add(task, ("symbol", name), "signature", text, weight, text)


def _match_text(index: _Index, text: str, evidence: _Evidence, *, binary: bool = False,
                gated: _Gated | None = None, words: set[bytes] | None = None,
                ngrams: bool = True) -> None:
    """All evidence in a text: n-grams, ``def``/``class`` names and signatures, dotted names and
    module paths, constants, docstrings, test ids. ``binary``: the text was pulled out of a binary
    format, where neighbours may be glued to a string, so dotted names need no left boundary.
    ``gated`` and ``words``: :meth:`_Index.gated` of the text and the :func:`_word_set` it was
    computed from, when the caller has them already. Every item is looked for only where the
    text holds all of its words (the gate says which: no pass over the text)."""
    if gated is None or words is None:
        words = _text_words(text) if not binary else _word_set(text.encode("utf-8", "replace"), glued=True)
        gated = index.gated(words)
    item_tasks = gated.items
    ngram_tasks = gated.ngrams if ngrams else set()
    if not item_tasks and not ngram_tasks:
        return
    tokens: list[str] | None = None
    collapsed: str | None = None
    all_defined: dict[str, list[int]] | None = None
    hashes: dict[int, list[int]] = {}
    for i in sorted(item_tasks.keys() | ngram_tasks):
        task = index.tasks[i]
        if i in ngram_tasks and task.ngrams:
            if tokens is None:
                tokens = _cached_tokens(text)
            if task.n not in hashes:
                hashes[task.n] = _cached_ngram_hashes(text, tokens, task.n)
            matched = task.stretch_ngrams.intersection(hashes[task.n])
            hits = matched & task.ngrams if task.copy_ngrams else matched
            if hits:
                covered: set[int] = set()
                for pos, h in enumerate(hashes[task.n]):
                    if h in hits:
                        covered.update(range(pos, pos + task.n))
                weight = STRONG if len(hits) >= NGRAM_HITS else WEAK
                at_headers = len(hits & task.interface_ngrams)
                value = (f"{len(hits)} of {len(task.ngrams)} n-grams"
                         + (f" ({at_headers} at an interface's header)" if at_headers else "")
                         + f", {len(covered)} tokens")
                evidence.add(i, ("ngram", ""), "ngram", value, weight, *hits)
            if matched and task.copy_ngrams:
                evidence.stretches.setdefault(i, []).extend(_stretches(hashes[task.n], matched, task.n))
        passed = item_tasks.get(i)
        if passed is None:
            continue
        if task.def_names and not words.isdisjoint(task.def_words):
            if all_defined is None:
                all_defined = {}
                for match in _DEF_ANY.finditer(text):
                    all_defined.setdefault(match.group(1), []).append(match.start())
            defined = task.def_names.intersection(all_defined)
            for name in defined & task.names:
                weight = MEDIUM if is_distinctive(name) else WEAK
                evidence.add(i, ("symbol", name), "name", f"def/class {name}", weight, name)
            for name in defined.intersection(task.signatures):
                for at in all_defined[name]:
                    if text.startswith("def", at):
                        parsed = _signature_at(text, at)
                        if parsed is not None:
                            _match_signature(index, parsed[0], parsed[1], evidence)
        dotted = frozenset(task.dotted_items[n] for kind, n in passed if kind == _DOTTED)
        if dotted or (binary and task.dotted_items):
            # In binary formats a neighbour may be glued to the name: looked for as a substring.
            found = (
                {d for d in task.dotted_items if d in text} if binary
                else {m.group() for m in _compiled_boundary_re(dotted, True).finditer(text)}
            )
            for item in found:
                if item.endswith(".py") and item in task.paths:
                    evidence.add(i, ("path", item), "path", item, MEDIUM, item)
                else:
                    symbol = item.rsplit(".", 1)[-1]
                    evidence.add(i, ("symbol", symbol), "name", item, STRONG, item)
        for kind, number in sorted(passed):
            if kind == _CONSTANT:
                constant = task.constants[number]
                if constant in text:
                    evidence.add(i, ("constant", constant), "constant", _short(constant),
                                 _constant_weight(constant), constant)
            elif kind == _DOCSTRING:
                docstring = task.docstrings[number]
                if collapsed is None:
                    collapsed = normalize_docstring(text)
                if docstring in collapsed:
                    evidence.add(i, ("docstring", docstring), "docstring", _short(docstring), STRONG, docstring)
        patterns = frozenset(task.test_patterns[n] for kind, n in passed if kind == _TEST)
        if patterns:
            for pattern in (m.group() for m in _compiled_boundary_re(patterns, False).finditer(text)):
                node_id = task.tests[pattern]
                evidence.add(i, ("test", node_id), "test_id", node_id, STRONG, node_id)


def _stretches(hashes: Sequence[int], found: frozenset[int] | set[int], n: int) -> list[frozenset[int]]:
    """The n-grams of ``found`` in each stretch of ``hashes`` where they follow one another: a
    window that starts more than ``n`` tokens after the last one begins a new stretch."""
    stretches: list[frozenset[int]] = []
    current: set[int] = set()
    last = -n - 1
    for pos, h in enumerate(hashes):
        if h in found:
            if pos - last > n and current:
                stretches.append(frozenset(current))
                current = set()
            current.add(h)
            last = pos
    if current:
        stretches.append(frozenset(current))
    return stretches


_SIGNATURE_SPAN = 4096
"""Characters tokenized after a ``def`` to read its parameters (all the rest if they run on)."""


def _signature_at(text: str, at: int) -> tuple[str, str] | None:
    """(name, key) of the ``def`` at offset ``at`` of ``text``, tokenizing only from there: a
    file that defines a removed function's name is not tokenized whole for its signature."""
    parsed = _def_signature(_tokens(text[at:at + _SIGNATURE_SPAN]), 0)
    if parsed is None and at + _SIGNATURE_SPAN < len(text):
        parsed = _def_signature(_tokens(text[at:]), 0)
    return parsed


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------------------------------------
# Channels: what is inside a file
# ---------------------------------------------------------------------------------------------

_PYC_MAGIC = importlib.util.MAGIC_NUMBER
_MARSHALLED_CODE = (b"c\x00", b"\xe3\x00")
"""How ``marshal.dumps`` of a code object starts (TYPE_CODE, with or without FLAG_REF, then a small
argument count): a frozen module, an entry of PyInstaller's archive."""
_GIT_LOOSE_RE = re.compile(r"(?:^|/)objects/[0-9a-f]{2}/[0-9a-f]{38}$")
_GIT_TYPES = {1: "commit", 2: "tree", 3: "blob", 4: "tag"}
_TEXT_SUFFIXES_JSON = (".json", ".ipynb")
_HTML_SUFFIXES = (".html", ".htm", ".xhtml")


def _code_objects(code: types.CodeType) -> list[types.CodeType]:
    """``code`` and every code object nested in it (functions, classes, comprehensions)."""
    found = [code]
    for current in found:  # grows while it is walked
        found.extend(c for c in current.co_consts if type(c) is types.CodeType)
    return found


def _code_strings(codes: Sequence[types.CodeType]) -> list[str]:
    """String constants (docstrings included) and the file name of every code object."""
    out: list[str] = []
    for current in codes:
        out.append(current.co_filename)
        for const in current.co_consts:
            kind = type(const)
            if kind is str:
                out.append(const)
            elif kind is tuple or kind is frozenset:
                out.extend(c for c in const if type(c) is str)
            elif kind is bytes:
                out.append(const.decode("latin-1"))
    return out


def _code_names(code: types.CodeType) -> frozenset[str]:
    names: set[str] = set()
    for current in _code_objects(code):
        names.update(current.co_names, current.co_varnames, current.co_cellvars, current.co_freevars)
        names.add(current.co_name)
    return frozenset(names)


def _match_code(index: _Index, code: types.CodeType, evidence: _Evidence) -> None:
    codes = _code_objects(code)
    for current in codes:
        name = current.co_name
        if name in index.names:
            _match_names(index, (name,), evidence, "code object")
        if name in index.signature_names:
            _match_signature(index, name, code_signature_key(current), evidence)
        qualname = current.co_qualname
        for task in index.bodies.get(qualname, ()):
            wanted = index.tasks[task].bodies[qualname]
            found = wanted & _code_names(current)
            if len(found) >= max(3, -(-len(wanted) * 3 // 5)):
                value = f"{qualname} uses {len(found)} of the {len(wanted)} names of the removed body"
                evidence.add(task, ("body", qualname), "body", value, STRONG, qualname)
    _match_text(index, "\n".join(_code_strings(codes)), evidence)


_MYPY_DEFINITIONS = ("FuncDef", "ClassDef", "TypeInfo", "Decorator", "OverloadedFuncDef")


def _json_strings(value: Any, index: _Index, evidence: _Evidence) -> list[str]:
    """Every string of a JSON document (notebook source lines joined back into cells); mypy
    symbol tables and FuncDef nodes give names and signatures on the way."""
    out: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, list):
            if item and all(isinstance(x, str) for x in item) and all(x.endswith("\n") for x in item[:-1]):
                out.append("".join(item))
            else:
                stack.extend(item)
        elif isinstance(item, dict):
            node_class = item.get(".class")
            name = item.get("name")
            if node_class in _MYPY_DEFINITIONS and isinstance(name, str):
                _match_names(index, (name,), evidence, f"mypy {node_class}")
                if node_class == "FuncDef" and name in index.signature_names:
                    key = _mypy_signature_key(name, item.get("arg_names", ()), item.get("arg_kinds", ()))
                    if key is not None:
                        _match_signature(index, name, key, evidence)
            if node_class == "SymbolTable":
                _match_names(index, (k for k in item if k != ".class"), evidence, "mypy symbol")
            out.extend(k for k in item if isinstance(k, str))
            stack.extend(item.values())
    return out


def _java_class(data: bytes) -> tuple[list[str], list[str]] | None:
    """(every UTF8 constant, the names the class defines: class, fields, methods); None if
    ``data`` is not a class file (0xCAFEBABE is also the magic of Mach-O fat binaries)."""
    try:
        _, major, count = struct.unpack_from(">HHH", data, 4)
        if not 45 <= major <= 80:
            return None
        utf8: dict[int, str] = {}
        classes: dict[int, int] = {}
        pos = 10
        i = 1
        while i < count:
            tag = data[pos]
            if tag == 1:
                (length,) = struct.unpack_from(">H", data, pos + 1)
                utf8[i] = data[pos + 3:pos + 3 + length].decode("utf-8", "replace")
                pos += 3 + length
            elif tag in (3, 4):
                pos += 5
            elif tag in (5, 6):
                pos += 9
                i += 1  # longs and doubles take two slots
            elif tag == 7:
                classes[i] = struct.unpack_from(">H", data, pos + 1)[0]
                pos += 3
            elif tag in (8, 16, 19, 20):
                pos += 3
            elif tag in (9, 10, 11, 12, 17, 18):
                pos += 5
            elif tag == 15:
                pos += 4
            else:
                return None
            i += 1
        _, this_class, _, interfaces = struct.unpack_from(">HHHH", data, pos)
        pos += 8 + 2 * interfaces
        defined = [re.split(r"[/$]", utf8.get(classes.get(this_class, 0), ""))[-1]]
        for _ in range(2):  # fields, then methods
            (members,) = struct.unpack_from(">H", data, pos)
            pos += 2
            for _ in range(members):
                _, name_index, _, attributes = struct.unpack_from(">HHHH", data, pos)
                pos += 8
                defined.append(utf8.get(name_index, ""))
                for _ in range(attributes):
                    (length,) = struct.unpack_from(">I", data, pos + 2)
                    pos += 6 + length
    except (struct.error, IndexError):
        return None
    return list(utf8.values()), [name for name in defined if name and not name.startswith("<")]


def _strip_html(text: str) -> str:
    return html.unescape(re.sub(r"<[^>]*>", "", text))


def _apply_delta(base: bytes, delta: bytes) -> bytes:
    """Apply a git delta (copy and insert instructions) to ``base``."""
    pos = 0

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            byte = delta[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    varint()  # source size
    size = varint()
    out = []
    while pos < len(delta):
        op = delta[pos]
        pos += 1
        if op & 0x80:
            offset = length = 0
            for bit in range(4):
                if op & (1 << bit):
                    offset |= delta[pos] << (8 * bit)
                    pos += 1
            for bit in range(3):
                if op & (0x10 << bit):
                    length |= delta[pos] << (8 * bit)
                    pos += 1
            out.append(base[offset:offset + (length or 0x10000)])
        elif op:
            out.append(delta[pos:pos + op])
            pos += op
        else:
            raise ValueError("delta opcode 0")
    result = b"".join(out)
    if len(result) != size:
        raise ValueError("delta result has the wrong size")
    return result


def _inflate_at(data: bytes, pos: int, size_hint: int) -> tuple[bytes, int]:
    """Inflate the zlib stream at ``pos``; returns (content, offset just past the stream)."""
    view = memoryview(data)
    inflater = zlib.decompressobj()
    out = []
    chunk = max(4096, size_hint + 64)
    at = pos
    while not inflater.eof:
        if at >= len(data):
            raise ValueError("truncated zlib stream")
        piece = view[at:at + chunk]
        out.append(inflater.decompress(piece))
        at += len(piece)
        chunk *= 2
    return b"".join(out), at - len(inflater.unused_data)


def _pack_objects(data: bytes, budget: int) -> Iterator[tuple[str, bytes]]:
    """(type, content) of every object in a git pack, deltas (OFS and REF) resolved. A delta
    whose base is not in the pack (a thin pack: what ``git bundle create A..B`` writes) gives
    what it inserts (type ``delta``): the new text is there, only what it copies is elsewhere."""
    if data[:4] != b"PACK":
        raise ValueError("not a pack")
    _, count = struct.unpack_from(">II", data, 4)
    pos = 12
    entries: dict[int, tuple[int, bytes, int | bytes | None]] = {}
    total = 0
    for _ in range(count):
        start = pos
        byte = data[pos]
        pos += 1
        kind, size, shift = (byte >> 4) & 7, byte & 0x0F, 4
        while byte & 0x80:
            byte = data[pos]
            pos += 1
            size |= (byte & 0x7F) << shift
            shift += 7
        base: int | bytes | None = None
        if kind == 6:  # OFS_DELTA: base at a negative offset
            byte = data[pos]
            pos += 1
            offset = byte & 0x7F
            while byte & 0x80:
                byte = data[pos]
                pos += 1
                offset = ((offset + 1) << 7) | (byte & 0x7F)
            base = start - offset
        elif kind == 7:  # REF_DELTA: base by object id
            base = data[pos:pos + 20]
            pos += 20
        total += size
        if total > budget:
            raise MemoryError("pack inflates past the budget")
        payload, pos = _inflate_at(data, pos, size)
        entries[start] = (kind, payload, base)

    # Every resolved object stays in memory (any may be the base of a later delta), so the budget
    # is on what deltas expand to, not on the pack's size.
    resolved: dict[int, tuple[int, bytes]] = {}
    resolved_bytes = 0
    by_id: dict[bytes, int] = {}

    def object_id(kind: int, content: bytes) -> bytes:
        return hashlib.sha1(b"%s %d\0" % (_GIT_TYPES[kind].encode(), len(content)) + content).digest()

    def resolve(offset: int) -> tuple[int, bytes] | None:
        nonlocal resolved_bytes
        chain = []
        while offset not in resolved:
            kind, payload, base = entries[offset]
            if kind in _GIT_TYPES:
                resolved[offset] = (kind, payload)
                break
            chain.append(offset)
            if isinstance(base, bytes):
                if base not in by_id:
                    return None
                offset = by_id[base]
            else:
                assert base is not None
                offset = base
        kind, content = resolved[offset]
        for delta_offset in reversed(chain):
            content = _apply_delta(content, entries[delta_offset][1])
            resolved[delta_offset] = (kind, content)
            resolved_bytes += len(content)
            if resolved_bytes > budget:
                raise MemoryError("pack inflates past the budget")
        return resolved[chain[0]] if chain else resolved[offset]

    pending = sorted(entries)
    while pending:
        waiting = []
        for offset in pending:
            result = resolve(offset)
            if result is None:
                waiting.append(offset)
                continue
            by_id[object_id(*result)] = offset
        if len(waiting) == len(pending):
            break  # REF_DELTA bases outside this pack (a thin pack): nothing more to resolve
        pending = waiting
    for offset in sorted(resolved):
        kind, content = resolved[offset]
        yield _GIT_TYPES[kind], content
    for offset in sorted(set(entries) - set(resolved)):
        yield "delta", _delta_inserts(entries[offset][1])


def _delta_inserts(delta: bytes) -> bytes:
    """What a git delta inserts, in order: the runs of one insert joined as they were written
    (git cuts an insert every 127 bytes), a line break where a copy from the base comes between."""
    pos = 0
    for _ in range(2):  # the source and target sizes
        while delta[pos] & 0x80:
            pos += 1
        pos += 1
    out: list[bytes] = []
    while pos < len(delta):
        op = delta[pos]
        pos += 1
        if op & 0x80:
            pos += bin(op & 0x7F).count("1")  # the copy's offset and size bytes
            if out and out[-1] != b"\n":
                out.append(b"\n")
        elif op:
            out.append(delta[pos:pos + op])
            pos += op
    return b"".join(out)


# ---------------------------------------------------------------------------------------------
# Encodings: what a copy may be wrapped in
# ---------------------------------------------------------------------------------------------

_ZLIB_HEADER = re.compile(rb"x[\x01\x5e\x9c\xda]")
_LZMA_ALONE = b"\x5d\x00\x00"
WINDOW_OVERLAP = 1024 * 1024
"""Bytes each window of a file over the size limit shares with the one before: a copy shorter than
this that a window's edge cuts is whole in one of the two."""


def _container_head(head: bytes) -> bool:
    """Whether a file that starts with ``head`` (its first 262 bytes) only reads whole: an archive,
    a compressed stream, a database, a git pack or bundle."""
    return (head.startswith((b"PK\x03\x04", b"PK\x05\x06", b"\x1f\x8b", b"\xfd7zXZ\x00", b"SQLite format 3\x00",
                             b"PACK\x00\x00\x00", b"# v2 git bundle\n", b"# v3 git bundle\n", b"!<arch>\n",
                             _LZMA_ALONE, _PYC_MAGIC))
            or (head.startswith(b"BZh") and head[3:4].isdigit()) or head[257:262] == b"ustar"
            or _ZLIB_HEADER.match(head[:2]) is not None)
"""lzma's own format (``FORMAT_ALONE``): properties 0x5d, then a dictionary size under 16 MiB."""
_KNOWN_HEADS = (
    b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"PK\x03\x04", b"PK\x05\x06", b"PACK", _LZMA_ALONE,
    b"SQLite format 3\x00", b"# v2 git bundle\n", b"# v3 git bundle\n", b"\xff\xfe", b"\xfe\xff",
    b"\x00\x00\xfe\xff", *_MARSHALLED_CODE, b"!<arch>\n",
)
_EMBEDDED_RE = re.compile(rb"x[\x5e\x9c\xda]|\x1f\x8b\x08|\xfd7zXZ\x00|BZh[1-9]1AY&SY")
"""Where a compressed stream may start inside a binary: zlib (the default, best and middle levels;
``x\\x01``, level 1, is in every binary's machine code a hundred times as often), gzip, xz, bzip2."""
_EMBEDDED_CHUNK = 256 * 1024
EMBEDDED_PEEKS = 4096
"""Stream starts in one binary that may fail to inflate to text before the rest is not tried: a
real program has a few hundred, a file dense with them costs a peek each."""
_EMBEDDED_PEEK = 16 * 1024
_CONTROL = bytes(c for c in range(32) if c not in (9, 10, 12, 13))
_HEX_ESCAPE_WORDS = frozenset(b"x%02x" % i for i in range(256)) | frozenset(b"x%02X" % i for i in range(256))
_HEX_LITERAL_WORDS = frozenset(b"0" + word for word in _HEX_ESCAPE_WORDS)

# Base64 (standard and URL-safe) and hex, in pieces of at least 16 characters; pieces that only
# whitespace, quotes, "+", "\\", "," or brackets part (line wrapping, string concatenation, JSON's
# "\/") are one blob. Hex also as escapes ("\x64\x65") and as C bytes ("0x64, 0x65").
_B64_PIECE = re.compile(rb"[A-Za-z0-9+/_-]{16,}={0,2}")
_HEX_PIECE = re.compile(rb"(?<![A-Za-z0-9+/_-])[0-9a-fA-F]{32,}(?![A-Za-z0-9+/_-])")
_JOINT = re.compile(rb'(?:[\s"\'+\\,()\[\]]|[bBrRuU]{1,2}(?=["\']))*')
_HEX_ESCAPES = re.compile(rb"(?:\\x[0-9a-fA-F]{2}){%d,}" % MIN_ENCODED_BYTES)
_HEX_LITERALS = re.compile(rb"(?:0[xX][0-9a-fA-F]{2}\s*,\s*){%d,}0[xX][0-9a-fA-F]{2}" % (MIN_ENCODED_BYTES - 1))
_NOT_HEX = re.compile(rb"[^0-9a-fA-F]")
_NOT_B64 = re.compile(rb"[^A-Za-z0-9+/]")
_View = tuple[str, str, "bytes | str"]
"""Another reading of a text unit: (label suffix, kind, its bytes, or why it was left unread)."""
_REREADINGS = ("quoted", "rot13")
"""Views that read a text's own bytes another way (unlike a decoded blob, which holds new ones)."""
_QUOTED_LINE = re.compile(rb"^[ \t]*(?:>>>|\.\.\.|#+|>+|[+|-])[ \t]?([^\r\n]*)", re.M)


def _quoted_lines(data: bytes) -> bytes | None:
    """The lines of ``data`` behind a quoting prefix, the prefix taken off; blocks of them that
    other lines part are kept apart by a line of their own (``\\x01``, a token no code holds), so
    no n-gram spans two comments far apart. None if there are fewer than
    :data:`QUOTED_MIN_LINES`."""
    out: list[bytes] = []
    count = 0
    end = -1
    for match in _QUOTED_LINE.finditer(data):
        if out and data[end:match.start()].strip(b" \t\r") != b"\n":
            out.append(b"\x01")
        out.append(match.group(1))
        count += 1
        end = match.end()
    return b"\n".join(out) if count >= QUOTED_MIN_LINES else None


_PIECES, _ESCAPES, _LITERALS = 1, 2, 4


def _may_hold_encoded(words: set[bytes]) -> int:
    """Which encoded blobs a unit's words leave room for, as flags: base64 or hex pieces (a long
    word that reads as such, :func:`_encoded_word`), hex escapes, hex literals (many distinct
    ones). Checked on the words the gate needs anyway, so that most units are passed over
    without a regex, and the rest are searched for those kinds only."""
    kinds = 0
    if len(words & _HEX_ESCAPE_WORDS) >= 8:
        kinds |= _ESCAPES
    if len(words & _HEX_LITERAL_WORDS) >= 8:
        kinds |= _LITERALS
    if any(_encoded_word(word) for word in words if len(word) >= 20):
        kinds |= _PIECES
    return kinds


_DIGITS, _UPPER, _LOWER = b"0123456789", b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz"
_HEX_DIGITS = b"0123456789abcdefABCDEF"


def _encoded_word(word: bytes) -> bool:
    """A word (letters, digits, "_") of base64 or hex rather than of a program: hex digits only,
    or digits and a quarter each of capitals and small letters with few underscores.
    ``NavigationToolbar2WebAgg`` and ``test_issue_1234_regression`` are names; base64 of text,
    whose "+" and "/" are rare, leaves words of 20 characters and more (blobs from about 60
    bytes decoded on)."""
    size = len(word)
    if word.count(b"_") * 16 > size:
        return False
    if not word.translate(None, _HEX_DIGITS):
        return size >= 48  # not a sha1 or an md5: those are 40 and 32
    digits = size - len(word.translate(None, _DIGITS))
    upper = size - len(word.translate(None, _UPPER))
    lower = size - len(word.translate(None, _LOWER))
    return digits >= 2 and upper * 4 >= size and lower * 4 >= size


def _b64decode(encoded: bytes) -> bytes | None:
    plain = _NOT_B64.sub(b"", encoded.translate(bytes.maketrans(b"-_", b"+/"))).rstrip(b"=")
    # The last group keeps its bytes: padded, not cut (a cut tail broke a third of encoded wheels).
    plain = plain[:len(plain) - 1] if len(plain) % 4 == 1 else plain + b"=" * (-len(plain) % 4)
    try:
        return binascii.a2b_base64(plain)
    except binascii.Error:
        return None


def _hexdecode(encoded: bytes) -> bytes | None:
    digits = _NOT_HEX.sub(b"", encoded.replace(b"0x", b"").replace(b"0X", b"").replace(b"\\x", b""))
    return bytes.fromhex(digits[:len(digits) - len(digits) % 2].decode("ascii"))


def _joined(data: bytes, pattern: re.Pattern[bytes]) -> Iterator[tuple[int, bytes]]:
    """(offset, the pieces concatenated) of each run of ``pattern``'s pieces that only joints
    (at most 32 bytes each) part; a piece that ends in padding ("=") ends its run."""
    start, end, pieces = -1, -1, list[bytes]()
    for match in pattern.finditer(data):
        if (pieces and match.start() - end <= 32 and data[end - 1:end] != b"="
                and _JOINT.fullmatch(data, end, match.start())):
            pieces.append(match.group())
            end = match.end()
            continue
        if pieces:
            yield start, b"".join(pieces)
        start, end, pieces = match.start(), match.end(), [match.group()]
    if pieces:
        yield start, b"".join(pieces)


def _encoded_blobs(data: bytes, kinds: int) -> Iterator[tuple[int, str, Callable[[bytes], bytes | None], bytes]]:
    """(offset, kind, decoder, encoded bytes) of every blob of ``data`` of ``kinds``
    (:func:`_may_hold_encoded`) that may hold at least :data:`MIN_ENCODED_BYTES` once decoded.
    A hex blob is read as hex only (its digits are base64 characters too)."""
    for flag, pattern in ((_ESCAPES, _HEX_ESCAPES), (_LITERALS, _HEX_LITERALS)):
        if kinds & flag:
            for match in pattern.finditer(data):
                yield match.start(), "hex", _hexdecode, match.group()
    if not kinds & _PIECES:
        return
    hex_spans: list[tuple[int, int]] = []
    for offset, blob in _joined(data, _HEX_PIECE):
        if len(_NOT_HEX.sub(b"", blob)) >= 2 * MIN_ENCODED_BYTES:
            hex_spans.append((offset, offset + len(blob)))
            yield offset, "hex", _hexdecode, blob
    for offset, blob in _joined(data, _B64_PIECE):
        if any(start <= offset < end for start, end in hex_spans):
            continue
        if len(blob) * 3 // 4 >= MIN_ENCODED_BYTES:
            yield offset, "base64", _b64decode, blob


def _worth_scanning(head: bytes) -> bool:
    """Whether decoded bytes (their start) are text or a format the scanner opens, not random."""
    if head.startswith(_KNOWN_HEADS) or _ZLIB_HEADER.match(head) or head[2:4] == b"\r\n" and len(head) > 16:
        return True
    if len(head) > 262 and head[257:262] == b"ustar" or _wide_text(head) is not None:
        return True
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as err:
        if err.start < len(head) - 3:  # not just a character cut at the end
            return False
    return len(head) - len(head.translate(None, _CONTROL)) <= len(head) // 20


def _wide_text(data: bytes) -> tuple[str, str] | None:
    """(encoding, text) of a UTF-16 or UTF-32 text, by its byte-order mark or, without one, by
    the zero bytes every ASCII character carries; None for anything else."""
    for bom, encoding in ((b"\xff\xfe\x00\x00", "utf-32"), (b"\x00\x00\xfe\xff", "utf-32"),
                          (b"\xff\xfe", "utf-16"), (b"\xfe\xff", "utf-16")):
        if data.startswith(bom):
            break
    else:
        sample = data[:4096]
        if len(sample) < 64 or b"\x00" not in sample:
            return None
        zeros = [sample[i::4].count(0) * 4 / len(sample) for i in range(4)]
        if min(zeros[1:]) > 0.9 and zeros[0] < 0.1:
            encoding = "utf-32-le"
        elif min(zeros[:3]) > 0.9 and zeros[3] < 0.1:
            encoding = "utf-32-be"
        elif zeros[1] > 0.9 and zeros[3] > 0.9 and max(zeros[0], zeros[2]) < 0.1:
            encoding = "utf-16-le"
        elif zeros[0] > 0.9 and zeros[2] > 0.9 and max(zeros[1], zeros[3]) < 0.1:
            encoding = "utf-16-be"
        else:
            return None
    width = 4 if "32" in encoding else 2
    text = data[:len(data) - len(data) % width].decode(encoding, "replace")
    controls = sum(1 for ch in text[:2048] if ch < " " and ch not in "\t\n\r\f" or ch == "\ufffd")
    if controls > len(text[:2048]) // 20:
        return None
    return ("utf-32" if width == 4 else "utf-16"), text


# ---------------------------------------------------------------------------------------------
# The scanner
# ---------------------------------------------------------------------------------------------


class _Scanner:
    def __init__(self, index: _Index, *, max_file_bytes: int, exclude: Sequence[str],
                 clean: frozenset[bytes] = frozenset(), record: bool = False) -> None:
        self.index = index
        self.clean = clean
        self.max_file_bytes = max_file_bytes
        self.decode_left = max_file_bytes * DECODE_BUDGET_FACTOR
        self.embedded_left = max_file_bytes * DECODE_BUDGET_FACTOR
        """What compressed streams inside binaries may still inflate to (:meth:`_embedded`)."""
        self.record = record
        self.records: list[tuple[str, tuple[str, ...], _Evidence]] = []
        """With ``record``: every unit's evidence, whatever its score (:func:`unit_evidence`)."""
        self.exclude = tuple(os.path.abspath(p) for p in exclude)
        self.findings: dict[str, list[dict[str, Any]]] = {t.task_id: [] for t in index.tasks}
        self.skipped: list[dict[str, str]] = []
        self.files = 0
        self.bytes = 0
        self.seen: set[tuple[int, int]] = set()
        self.texts: dict[tuple[bytes, bool, bool, str], tuple[str, _Evidence | None, list[_View]]] = {}
        """What each distinct text unit holds (by its digest, how it is read as JSON or HTML, and
        whether it is already another reading of a text)."""

    # -- walking ----------------------------------------------------------------------------

    def walk(self, root: str) -> None:
        root = os.path.abspath(root)
        if not os.path.lexists(root):
            self.skipped.append({"path": root, "reason": "missing"})
            return
        stack = [root]
        while stack:
            path = stack.pop()
            if self._excluded(path):
                continue
            try:
                info = os.lstat(path)
            except OSError as err:
                self._unreadable(path, "stat", err)
                continue
            if stat.S_ISDIR(info.st_mode):
                if (info.st_dev, info.st_ino) in self.seen:
                    continue
                self.seen.add((info.st_dev, info.st_ino))
                try:
                    with os.scandir(path) as entries:
                        for entry in entries:
                            if entry.is_dir(follow_symlinks=False):
                                stack.append(entry.path)
                            elif entry.is_file(follow_symlinks=False):
                                self._file(entry.path, entry)
                except OSError as err:
                    self._unreadable(path, "list", err)
            elif stat.S_ISREG(info.st_mode):
                self._file(path, None)

    def _unreadable(self, path: str, what: str, err: OSError) -> None:
        """A skip for an error of the file system; ``errno`` tells a permission the scanning user
        lacks (an agent running as that user lacks it too) from a failure."""
        self.skipped.append({"path": path, "reason": f"{what}: {err.strerror}",
                             "errno": errno.errorcode.get(err.errno or 0, "")})

    def _excluded(self, path: str) -> bool:
        for prefix in (*SKIP_DIRS, *self.exclude):
            if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
                return True
        return False

    def _file(self, path: str, entry: os.DirEntry[str] | None) -> None:
        if self.exclude and self._excluded(path):
            return
        try:
            info = entry.stat(follow_symlinks=False) if entry is not None else os.lstat(path)
        except OSError as err:
            self._unreadable(path, "stat", err)
            return
        if (info.st_dev, info.st_ino) in self.seen and info.st_nlink > 1:
            return
        if info.st_nlink > 1:
            self.seen.add((info.st_dev, info.st_ino))
        if info.st_size == 0:
            return
        if info.st_size > self.max_file_bytes:
            self._large(path, info.st_size)
            return
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as err:
            self._unreadable(path, "read", err)
            return
        self.files += 1
        self.bytes += len(data)
        try:
            self._content(data, path, path, (), 0, on_disk=True)
        except Exception as err:  # a scanner fault on one file: that file unread, never the walk ended
            self.skipped.append({"path": path, "reason": f"error: {type(err).__name__}: {err}"[:200]})
        if path.endswith("/objects/info/alternates"):
            self._alternates(data, os.path.dirname(os.path.dirname(path)))

    def _large(self, path: str, size: int) -> None:
        """A file over ``max_file_bytes``: a plain file (a dependency's 100 MB shared library, a
        data file) is read in windows of that size, each overlapping the one before by
        :data:`WINDOW_OVERLAP` bytes, each a unit of its own (``FILE@OFFSET``); a container (an
        archive, a compressed stream, a database, a git pack), which only reads whole, is left
        unread and said so, which makes the audit unclean. Every task of a held-out project was
        refused so before, for one shared library of a dependency of its tests."""
        try:
            with open(path, "rb") as handle:
                head = handle.read(262)
                if _container_head(head):
                    self.skipped.append({"path": path, "reason": f"larger than {self.max_file_bytes} bytes"})
                    return
                step = max(self.max_file_bytes - WINDOW_OVERLAP, 1)
                name = os.path.basename(path)
                for offset in range(0, size, step):
                    handle.seek(offset)
                    window = handle.read(self.max_file_bytes)
                    self.bytes += len(window)
                    try:
                        self._content(window, name, f"{path}@{offset}", (), 0)
                    except Exception as err:  # as for a whole file: that window unread, the walk goes on
                        self.skipped.append({"path": f"{path}@{offset}", "reason": f"error: {type(err).__name__}: {err}"[:200]})
                    if offset + len(window) >= size:
                        break
        except OSError as err:
            self._unreadable(path, "read", err)
            return
        self.files += 1

    def _alternates(self, data: bytes, objects: str) -> None:
        """A repository that borrows objects from others (``objects/info/alternates``): those
        object stores are read too, wherever they are."""
        for raw in data.decode("utf-8", "replace").splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            target = os.path.normpath(line if os.path.isabs(line) else os.path.join(objects, line))
            if os.path.isdir(target) and not self._excluded(target):
                self.walk(target)

    # -- one piece of content ---------------------------------------------------------------

    def _content(self, data: bytes, name: str, label: str, chain: tuple[str, ...], depth: int, *,
                 on_disk: bool = False) -> None:
        """Find evidence in ``data`` (a file, a member, an object) called ``name``, reported as
        ``label``; ``chain`` names the containers it came out of."""
        if depth > MAX_DEPTH:
            self.skipped.append({"path": label, "reason": "nested too deep"})
            return
        head = data[:16]
        try:
            if head.startswith(_PYC_MAGIC) and len(data) > 16:
                self._pyc(data, label, chain)
            elif head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
                self._zip(data, label, chain, depth)
            elif head.startswith(b"\x1f\x8b"):
                self._compressed(data, name, label, chain, depth, "gzip")
            elif head.startswith(b"BZh") and head[3:4].isdigit():
                self._compressed(data, name, label, chain, depth, "bz2")
            elif head.startswith(b"\xfd7zXZ\x00"):
                self._compressed(data, name, label, chain, depth, "xz")
            elif head.startswith(b"SQLite format 3\x00"):
                self._sqlite(data, label, chain, path=label if on_disk else None)
            elif head.startswith(b"PACK\x00\x00\x00") and head[7:8] in (b"\x02", b"\x03"):
                self._git_pack(data, label, chain, depth)  # a pack under any name
            elif head.startswith((b"# v2 git bundle\n", b"# v3 git bundle\n")):
                self._git_bundle(data, label, chain, depth)
            elif head.startswith(b"\xca\xfe\xba\xbe") and self._java(data, label, chain):
                pass
            elif len(data) > 262 and data[257:262] == b"ustar":
                self._tar(data, label, chain, depth)
            elif head.startswith(b"!<arch>\n"):
                self._ar(data, label, chain, depth)
            elif head[:1] == b"x" and _GIT_LOOSE_RE.search(name):
                self._git_loose(data, label, chain, depth)
            elif _ZLIB_HEADER.match(head) and self._stream(data, name, label, chain, depth, "zlib"):
                pass
            elif head.startswith(_LZMA_ALONE) and self._stream(data, name, label, chain, depth, "lzma"):
                pass
            elif self._prefixed_zip(data, name, label, chain, depth):
                pass
            elif (wide := _wide_text(data)) is not None:
                encoding, text = wide
                self._text(text.encode("utf-8", "surrogatepass"), name, label, (*chain, encoding), depth + 1)
            elif head.startswith(_MARSHALLED_CODE) and self._marshalled(data, label, chain):
                pass
            elif b"\x00" in data[:8192]:
                self._binary(data, label, chain, "pyc" if name.endswith((".pyc", ".pyo")) else "binary")
                self._embedded(data, name, label, chain, depth)
            else:
                self._text(data, name, label, chain, depth)
                if data.find(b"\x00", 8192) >= 0:  # binary after a text's first 8 KiB: a script's payload
                    self._embedded(data, name, label, chain, depth)
        except (ValueError, EOFError, KeyError, IndexError, TypeError, OSError, MemoryError,
                RecursionError, RuntimeError, zlib.error, lzma.LZMAError, binascii.Error, zipfile.BadZipFile,
                tarfile.TarError, sqlite3.Error, struct.error) as err:
            # A damaged or unexpected file (a truncated archive, a broken directory): say so, read
            # its raw bytes as any binary's, and go on with the rest of the image.
            self.skipped.append({"path": label, "reason": f"{type(err).__name__}: {err}"[:200]})
            if depth < MAX_DEPTH:
                try:
                    self._binary(data, label, chain, "binary")
                except (ValueError, MemoryError, RecursionError) as again:
                    self.skipped.append({"path": label, "reason": f"raw bytes: {type(again).__name__}: {again}"[:200]})

    def _text(self, data: bytes, name: str, label: str, chain: tuple[str, ...], depth: int) -> None:
        is_json, is_html = _reading(name, data)
        # Images hold the same text many times over (a package installed and inside the wheels
        # virtualenv embeds; pip 24.0 and 24.2): what a text holds is worked out once, and each
        # copy is reported where it lies.
        # (The host reads each start-state file once: nothing to gain there.) A text read again
        # another way (rot13, its quoted lines) is not read that way once more.
        key = (b"" if self.record else hashlib.blake2b(data, digest_size=16).digest(), is_json, is_html,
               chain[-1] if chain and chain[-1] in _REREADINGS else "")
        found = None if self.record else self.texts.get(key)
        if found is None:
            found = self._text_evidence(data, chain, is_json=is_json, is_html=is_html)
            if not self.record:
                self.texts[key] = found
        kind, evidence, views = found
        if evidence is not None:
            self._report(label, (*chain, kind), evidence)
        for suffix, view_kind, view in views:
            if isinstance(view, str):  # a blob left unread: why
                self.skipped.append({"path": f"{label}!{suffix}", "reason": view})
            elif view_kind in _REREADINGS and depth + 1 > MAX_DEPTH:
                continue  # another reading of bytes that were read: nothing was left unread
            else:
                self._content(view, name, f"{label}!{suffix}", (*chain, view_kind), depth + 1)

    def _text_evidence(self, data: bytes, chain: tuple[str, ...], *, is_json: bool,
                       is_html: bool) -> tuple[str, _Evidence | None, list[_View]]:
        """(the text's kind, its evidence or None when there is none, the other readings of it to
        scan as units of their own: decoded blobs, rot13, its quoted lines) of a text unit."""
        if data in self.clean:
            return "text", None, []  # read already, as it is read here (:func:`reads_alike`)
        words, encoded = self._words(data, glued=is_json)
        gated: _Gated | None = self.index.gated(words)
        views = self._views(data, words, chain, encoded=encoded, quoted=bool(gated and gated.ngrams))
        if not gated:
            return "text", None, views
        text = data.decode("utf-8", "replace")
        evidence = _Evidence()
        kind = "text"
        if is_json:
            try:
                document = json.loads(text)
            except ValueError:
                document = None
            if document is not None:
                notebook = isinstance(document, dict) and "cells" in document and "nbformat" in document
                kind = "notebook" if notebook else "json"
                _match_text(self.index, "\n".join(_json_strings(document, self.index, evidence)), evidence)
                return kind, evidence if evidence else None, views
        if is_html:
            kind = "html"
            text = _strip_html(text)
            gated = None  # entities are decoded now
        _match_text(self.index, text, evidence, gated=gated, words=words)
        return kind, evidence if evidence else None, views

    # -- other readings of a text: encodings, rot13, quoted lines ----------------------------

    def _words(self, data: bytes, *, glued: bool) -> tuple[set[bytes], int]:
        """The words of a text unit, and the encoded blobs they leave room for. The host
        reads the same start-state files for every task of a repository: there, once per text."""
        if self.record:
            found = _UNIT_WORDS.get(data, glued)  # type: ignore[arg-type]
            if found is not None:
                return found[0], found[1]
        words = _word_set(data, glued=glued)
        result = (words, _may_hold_encoded(words))
        if self.record:
            _UNIT_WORDS.put(data, glued, list(result))  # type: ignore[arg-type]
        return result

    def _views(self, data: bytes, words: set[bytes], chain: tuple[str, ...], *, encoded: int,
               quoted: bool) -> list[_View]:
        """(label suffix, kind, bytes) of every other reading of a text worth scanning: each blob
        that decodes (base64, hex) to text or to a format the scanner opens (``encoded``: which
        kinds the words leave room for); the whole text in rot13, where it holds an item's word so
        spelled; its quoted lines on their own (``quoted``: where some n-gram's words are). A
        blob the budget leaves undecoded comes with the reason (a str) in place of its bytes."""
        views: list[_View] = []
        if encoded:
            views.extend(self._cached(data, 0, lambda text: self._decoded(text, encoded)))
        if chain[-1:] != ("rot13",) and not self.index.rot13_keys.isdisjoint(words):
            views.append(("rot13", "rot13", data.translate(_ROT13)))
        if quoted and chain[-1:] != ("quoted",):
            views.extend(self._cached(data, 1, lambda text: [("quoted", "quoted", lines)]
                                      if (lines := _quoted_lines(text)) is not None else []))
        return views

    def _cached(self, data: bytes, what: int, compute: Callable[[bytes], list[Any]]) -> list[Any]:
        """``compute(data)``; the host (``record``) reads the same start-state files for every
        task of a repository, and keeps what depends on the text alone once per process."""
        if not self.record:
            return compute(data)
        found = _UNIT_VIEWS.get(data, what)  # type: ignore[arg-type]
        return found if found is not None else _UNIT_VIEWS.put(data, what, compute(data))  # type: ignore[arg-type]

    def _decoded(self, data: bytes, kinds: int) -> list[_View]:
        views: list[_View] = []
        for offset, kind, decoder, encoded in _encoded_blobs(data, kinds):
            decoded = self._decode(encoded, decoder)
            if decoded is not None:
                views.append((f"{kind}@{offset}", kind, decoded))
        return views

    def _decode(self, encoded: bytes, decoder: Callable[[bytes], bytes | None]) -> bytes | str | None:
        """``encoded`` decoded, if its start decodes to text or a known format; None for random
        data (images, keys, hashes); why not, if the scan's decoding budget does not allow it."""
        peek = decoder(encoded[:_PEEK_CHARS])
        if peek is None or not _worth_scanning(peek):
            return None
        if len(encoded) <= _PEEK_CHARS:
            return peek
        size = len(encoded)  # an upper bound of what it decodes to
        if size > self.max_file_bytes or size > self.decode_left:
            return f"decoding past the budget ({size} encoded bytes, {self.decode_left} left)"
        self.decode_left -= size
        return decoder(encoded)

    def _stream(self, data: bytes, name: str, label: str, chain: tuple[str, ...], depth: int, kind: str) -> bool:
        """A bare zlib or lzma stream (no file format around it, as ``zlib.compress`` and
        ``lzma.compress(format=FORMAT_ALONE)`` write): inflate it and scan what it holds. False if
        it does not inflate: then it is read as what it looks like otherwise."""
        limit = self.max_file_bytes
        inflater: Any = zlib.decompressobj() if kind == "zlib" else lzma.LZMADecompressor(format=lzma.FORMAT_ALONE)
        try:
            content = inflater.decompress(data, limit + 1)
        except (zlib.error, lzma.LZMAError):
            return False
        if len(content) > limit:
            self.skipped.append({"path": label, "reason": f"{kind}: inflates past {limit} bytes"})
            return True
        if not inflater.eof:
            reason = f"{kind}: truncated stream, scanned the first {len(content)} bytes"
            self.skipped.append({"path": label, "reason": reason})
        self._content(content, name, label, (*chain, kind), depth + 1)
        return True

    def _binary(self, data: bytes, label: str, chain: tuple[str, ...], kind: str) -> None:
        gated = self.index.gated(_word_set(data, glued=True))
        source_like = len(data) <= BINARY_NGRAM_BYTES
        if not gated.items and not (gated.ngrams and source_like):
            return
        evidence = _Evidence()
        strings = "\n".join(s.decode("ascii") for s in _PRINTABLE_B.findall(data))
        _match_text(self.index, strings, evidence, binary=True, ngrams=source_like)
        if program_format(data) is not None:
            _discount_program_constants(evidence, strings, self.index)
        self._report(label, (*chain, kind), evidence)

    def _embedded(self, data: bytes, name: str, label: str, chain: tuple[str, ...], depth: int) -> None:
        """Compressed streams inside a binary, wherever they start: a frozen application's archive
        (PyInstaller's zlib entries of marshalled code), a compiled module's compressed string
        table (Cython), a tarball behind an installer. A stream whose start inflates to text or a
        known format is inflated whole (within the decoding budget) and scanned."""
        if depth >= MAX_DEPTH:
            return
        resume = 0
        view = memoryview(data)
        left = min(self.embedded_left, self.max_file_bytes)  # a tarball's padding inflates a hundredfold
        failed = 0
        for match in _EMBEDDED_RE.finditer(data):
            at = match.start()
            if at < resume:
                continue  # inside a stream already read
            if failed >= EMBEDDED_PEEKS:
                self.skipped.append({"path": label, "reason": f"embedded streams: {failed} starts that did not "
                                                              "inflate to text; the rest of the file not tried"})
                return
            kind = {0x78: "zlib", 0x1F: "gzip", 0xFD: "xz"}.get(data[at], "bz2")
            peek = _inflater(kind)
            try:
                head = peek.decompress(view[at:at + _EMBEDDED_PEEK], _PEEK_CHARS)
            except (zlib.error, lzma.LZMAError, OSError, EOFError, ValueError):
                failed += 1
                continue
            if len(head) < min(MIN_ENCODED_BYTES, _PEEK_CHARS) and not peek.eof or not _reads_like_text(head):
                failed += 1
                continue
            inflater, pieces, size, pos = _inflater(kind), [], 0, at
            try:
                while not inflater.eof and pos < len(data) and size <= left:
                    chunk = view[pos:pos + _EMBEDDED_CHUNK]
                    piece = inflater.decompress(chunk, left + 1 - size)
                    pos += len(chunk) - len(getattr(inflater, "unconsumed_tail", b"")) - len(inflater.unused_data)
                    pieces.append(piece)
                    size += len(piece)
                    if not piece and getattr(inflater, "unconsumed_tail", b"") == b"" and not chunk:
                        break
            except (zlib.error, lzma.LZMAError, OSError, EOFError, ValueError):
                pass  # what inflated before the damage is still read
            where = f"{label}!@{at:#x}"
            if size > left:
                # Not unread content (the raw bytes were read): a best-effort reading that stops here.
                self.skipped.append({"path": where, "reason": f"embedded streams: a {kind} stream inflating past "
                                                              f"{left} bytes; the rest of the file not tried"})
                return
            left -= size
            self.embedded_left -= size
            resume = pos
            self._content(b"".join(pieces), name, where, (*chain, kind), depth + 1)

    def _marshalled(self, data: bytes, label: str, chain: tuple[str, ...]) -> bool:
        """A bare marshalled code object (a frozen module, PyInstaller's archive entry): its code
        is read as a pyc's. False if ``data`` is not one."""
        try:
            code = marshal.loads(data)
        except Exception:  # marshal is not hardened: damaged data raises anything (SystemError too)
            return False
        if not isinstance(code, types.CodeType):
            return False
        evidence = _Evidence()
        _match_code(self.index, code, evidence)
        self._report(label, (*chain, "code"), evidence)
        return True

    def _prefixed_zip(self, data: bytes, name: str, label: str, chain: tuple[str, ...], depth: int) -> bool:
        """A zip archive behind a prefix: a zipapp, pex or shiv behind its shebang, a
        self-extracting archive behind its program, and anything appended after it (which hides
        its end record from a reader that looks only at the file's end). Its members are scanned
        as any zip's, and the prefix and the trailer as what they are. False if ``data`` holds no
        zip that opens."""
        end = _zip_end(data)
        if end is None:
            return False
        whole = data if end == len(data) else data[:end]
        try:
            with zipfile.ZipFile(io.BytesIO(whole)) as archive:
                start = min((member.header_offset for member in archive.infolist()), default=0)
        except (zipfile.BadZipFile, ValueError, struct.error, OSError, EOFError):
            return False
        if start <= 0 and end == len(data):
            return False
        if start > 0:
            self._content(data[:start], name, label, chain, depth + 1)
        self._zip(whole, label, chain, depth)
        if end < len(data):
            self._content(data[end:], name, f"{label}!@{end:#x}", chain, depth + 1)
        return True

    def _pyc(self, data: bytes, label: str, chain: tuple[str, ...]) -> None:
        try:
            code = marshal.loads(memoryview(data)[16:])
        except Exception:  # marshal is not hardened: damaged data raises anything (SystemError too)
            self._binary(data, label, chain, "pyc")
            return
        if not isinstance(code, types.CodeType):
            self._binary(data, label, chain, "pyc")
            return
        evidence = _Evidence()
        _match_code(self.index, code, evidence)
        self._report(label, (*chain, "pyc"), evidence)

    def _java(self, data: bytes, label: str, chain: tuple[str, ...]) -> bool:
        parsed = _java_class(data)
        if parsed is None:
            return False
        strings, defined = parsed
        evidence = _Evidence()
        _match_names(self.index, defined, evidence, "java member")
        _match_text(self.index, "\n".join(strings), evidence)
        self._report(label, (*chain, "java-class"), evidence)
        return True

    def _zip(self, data: bytes, label: str, chain: tuple[str, ...], depth: int) -> None:
        budget = self.max_file_bytes * INFLATE_FACTOR
        unreadable = False
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for member in archive.infolist():
                if member.is_dir() or member.file_size == 0:
                    continue
                if member.file_size > self.max_file_bytes or member.file_size > budget:
                    self.skipped.append({"path": f"{label}!/{member.filename}", "reason": "member too large"})
                    continue
                budget -= member.file_size
                try:
                    content = archive.read(member)
                except (RuntimeError, NotImplementedError, ValueError, EOFError, OSError, zlib.error,
                        lzma.LZMAError, zipfile.BadZipFile, struct.error) as err:
                    # Encrypted, an unknown compression, a bad checksum: the other members are
                    # still read, and the archive's raw bytes below (a stored member is plain).
                    reason = f"{type(err).__name__}: {err}"[:200]
                    self.skipped.append({"path": f"{label}!/{member.filename}", "reason": reason})
                    unreadable = True
                    continue
                self._content(content, member.filename, f"{label}!/{member.filename}", (*chain, "zip"), depth + 1)
        if unreadable:
            self._binary(data, label, chain, "binary")

    def _tar(self, data: bytes, label: str, chain: tuple[str, ...], depth: int) -> None:
        budget = self.max_file_bytes * INFLATE_FACTOR
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            for member in archive:
                if not member.isfile() or member.size == 0:
                    continue
                if member.size > self.max_file_bytes or member.size > budget:
                    self.skipped.append({"path": f"{label}!/{member.name}", "reason": "member too large"})
                    continue
                budget -= member.size
                handle = archive.extractfile(member)
                if handle is not None:
                    self._content(handle.read(), member.name, f"{label}!/{member.name}", (*chain, "tar"), depth + 1)

    def _ar(self, data: bytes, label: str, chain: tuple[str, ...], depth: int) -> None:
        """A Unix ``ar`` archive: a static library (``.a``: its objects are read as the programs
        they are) or a Debian package (``.deb``: its control and data tarballs)."""
        names = b""
        at = 8
        while at + 60 <= len(data):
            header = data[at:at + 60]
            if header[58:60] != b"`\n":
                raise ValueError(f"ar: bad member header at {at}")
            field = header[48:58].strip()
            if not field.isdigit():
                raise ValueError(f"ar: bad member size {field[:10]!r} at {at}")
            size = int(field)
            content = data[at + 60:at + 60 + size]
            at += 60 + size + (size & 1)
            raw = header[:16].rstrip(b" ")
            if raw == b"//":  # GNU: the long names
                names = content
                continue
            if raw in (b"/", b"/SYM64/", b"__.SYMDEF", b"__.SYMDEF SORTED"):  # symbol tables
                continue
            if raw.startswith(b"/") and raw[1:].isdigit():
                start = int(raw[1:])
                end = names.find(b"/\n", start)
                raw = names[start:end if end >= 0 else len(names)]
            elif raw.startswith(b"#1/") and raw[3:].isdigit():  # BSD: the name opens the data
                length = int(raw[3:])
                raw, content = content[:length].rstrip(b"\x00"), content[length:]
            name = raw.rstrip(b"/").decode("utf-8", "replace")
            if content:
                self._content(content, name, f"{label}!/{name}", (*chain, "ar"), depth + 1)

    def _compressed(self, data: bytes, name: str, label: str, chain: tuple[str, ...], depth: int, kind: str) -> None:
        limit = self.max_file_bytes
        if kind == "gzip":
            inflater: Any = zlib.decompressobj(wbits=31)
            content = inflater.decompress(data, limit + 1)
        elif kind == "bz2":
            inflater = bz2.BZ2Decompressor()
            content = inflater.decompress(data, limit + 1)
        else:
            inflater = lzma.LZMADecompressor()
            content = inflater.decompress(data, limit + 1)
        if len(content) > limit:
            self.skipped.append({"path": label, "reason": f"{kind}: inflates past {limit} bytes"})
            return
        if not inflater.eof:
            # What inflates is still looked at; the rest of the stream is missing.
            reason = f"{kind}: truncated stream, scanned the first {len(content)} bytes"
            self.skipped.append({"path": label, "reason": reason})
        inner = re.sub(r"\.(gz|tgz|bz2|tbz2?|xz|txz)$", "", name)
        if len(content) > 262 and content[257:262] == b"ustar":
            # A tarball (an sdist): report it as the tar it is.
            self._tar(content, label, chain, depth)
            return
        self._content(content, inner, label, (*chain, kind), depth + 1)

    def _sqlite(self, data: bytes, label: str, chain: tuple[str, ...], *, path: str | None) -> None:
        if path is not None:
            uri = "file:" + urllib.parse.quote(path) + "?mode=ro&immutable=1"
            connection = sqlite3.connect(uri, uri=True)
        else:
            connection = sqlite3.connect(":memory:")
            connection.deserialize(data)
        evidence = _Evidence()
        texts: list[str] = []
        binary: list[str] = []
        try:
            tables = [row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            for table in tables:
                quoted = '"' + table.replace('"', '""') + '"'
                for row in connection.execute(f"SELECT * FROM {quoted}"):
                    for cell in row:
                        if isinstance(cell, str):
                            texts.append(cell)
                        elif isinstance(cell, bytes):
                            self._sqlite_blob(cell, texts, binary, evidence)
        finally:
            connection.close()
        for text in texts:
            stripped = text.strip()
            if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
                try:
                    texts.extend(_json_strings(json.loads(stripped), self.index, evidence))
                except ValueError:
                    pass
        _match_text(self.index, "\n".join(texts), evidence)
        if binary:
            _match_text(self.index, "\n".join(binary), evidence, binary=True)
        self._report(label, (*chain, "sqlite"), evidence)

    def _sqlite_blob(self, cell: bytes, texts: list[str], binary: list[str], evidence: _Evidence) -> None:
        if cell[:1] == b"x":
            try:
                cell = zlib.decompress(cell)
            except zlib.error:
                pass
        if b"\x00" not in cell[:4096]:
            texts.append(cell.decode("utf-8", "replace"))
        elif self.index.gated(_word_set(cell, glued=True)):
            binary.extend(s.decode("ascii") for s in _PRINTABLE_B.findall(cell))

    def _git_loose(self, data: bytes, label: str, chain: tuple[str, ...], depth: int) -> None:
        inflater = zlib.decompressobj()
        content = inflater.decompress(data, self.max_file_bytes + 64)
        header, _, body = content.partition(b"\0")
        kind = header.split(b" ", 1)[0]
        if kind in (b"blob", b"commit", b"tag"):
            self._content(body, "", label, (*chain, "git-loose"), depth + 1)

    def _git_bundle(self, data: bytes, label: str, chain: tuple[str, ...], depth: int) -> None:
        """A git bundle: a header of refs, a blank line, then a pack of the history."""
        start = data.find(b"\n\nPACK")
        if start < 0:
            raise ValueError("a git bundle without a pack")
        self._git_pack(data[start + 2:], f"{label}!pack", (*chain, "git-bundle"), depth + 1)

    def _git_pack(self, data: bytes, label: str, chain: tuple[str, ...], depth: int) -> None:
        for kind, content in _pack_objects(data, self.max_file_bytes * INFLATE_FACTOR):
            if kind == "tree":
                continue
            if kind == "delta":  # its base is elsewhere: what it inserts
                object_id = "delta-" + hashlib.sha1(content).hexdigest()[:16]
            else:
                object_id = hashlib.sha1(b"%s %d\0" % (kind.encode(), len(content)) + content).hexdigest()
            self._content(content, "", f"{label}!{object_id}", (*chain, "git-pack"), depth + 1)

    # -- reporting --------------------------------------------------------------------------

    def _report(self, label: str, chain: tuple[str, ...], evidence: _Evidence) -> None:
        if self.record:
            if evidence:
                self.records.append((label, chain, evidence))
            return
        for task, entries in evidence.by_task.items():
            score = sum(weight for _, _, weight in entries.values())
            if score < REPORT_SCORE:
                continue
            ranked = sorted(entries.values(), key=lambda e: (-e[2], _MATCH_ORDER.index(e[0])))
            self.findings[self.index.tasks[task].task_id].append({
                "path": label,
                "kind": _channel(chain),
                "match": ranked[0][0],
                "detail": "; ".join(f"{match}: {value}" for match, value, _ in ranked),
                "score": score,
                "chain": ">".join(chain),
                "evidence": [{"match": match, "value": value, "weight": weight} for match, value, weight in ranked],
            })


_ZIP_TAIL_BYTES = 22 + 0xFFFF
_ZIP_ENDS_TRIED = 8


def _zip_end(data: bytes) -> int | None:
    """Where the last zip in ``data`` ends: its end record within the last 64 KiB as zip readers
    look for it, else (in a file holding binary data) the last end record anywhere whose central
    directory lies right before it, as a zip with a trailer appended has it."""
    if data.rfind(b"PK\x05\x06", max(0, len(data) - _ZIP_TAIL_BYTES)) > 0:
        return len(data)
    if data.find(b"\x00") < 0:
        return None
    pos = len(data)
    for _ in range(_ZIP_ENDS_TRIED):
        pos = data.rfind(b"PK\x05\x06", 0, pos)
        if pos <= 0:
            return None
        if pos + 22 <= len(data):
            directory_size = int.from_bytes(data[pos + 12:pos + 16], "little")
            comment = int.from_bytes(data[pos + 20:pos + 22], "little")
            first = pos - directory_size
            if 0 < directory_size <= pos and pos + 22 + comment <= len(data) and data[first:first + 4] == b"PK\x01\x02":
                return pos + 22 + comment
    return None
"""The end-of-central-directory record and the longest comment a zip can end with."""
_ELF_PROGRAM_TYPES = (1, 2, 3)
"""ELF ``e_type`` of an object file, an executable and a shared library (4 is a core dump)."""
_MACHO_MAGIC = {b"\xfe\xed\xfa\xce": ">", b"\xfe\xed\xfa\xcf": ">", b"\xce\xfa\xed\xfe": "<",
                b"\xcf\xfa\xed\xfe": "<"}
_MACHO_PROGRAM_TYPES = (1, 2, 6, 8)
"""Mach-O ``filetype`` of an object file, an executable, a dynamic library and a bundle (4 is a
core dump)."""


def _reads_like_text(head: bytes) -> bool:
    """Whether an embedded stream's start is a known format, or text with letters in it: a dark
    image's pixel rows inflate to printable bytes (``(,4(,4``) that are no text."""
    if head.startswith(_KNOWN_HEADS) or _ZLIB_HEADER.match(head) or len(head) > 262 and head[257:262] == b"ustar":
        return True
    sample = head[:2048]
    return _worth_scanning(head) and sum(65 <= c <= 90 or 97 <= c <= 122 for c in sample) * 4 >= len(sample)


def _inflater(kind: str) -> Any:
    if kind == "zlib":
        return zlib.decompressobj()
    if kind == "gzip":
        return zlib.decompressobj(wbits=31)
    return lzma.LZMADecompressor() if kind == "xz" else bz2.BZ2Decompressor()


def program_format(data: bytes) -> str | None:
    """``elf``, ``mach-o`` or ``pe`` if ``data`` is a compiled program or library (an executable,
    a shared library, an object file) by its header; None otherwise. A core dump is an image of
    memory, not a program: None."""
    if data[:4] == b"\x7fELF" and len(data) >= 18 and data[5:6] in (b"\x01", b"\x02"):
        e_type = int.from_bytes(data[16:18], "little" if data[5] == 1 else "big")
        return "elf" if e_type in _ELF_PROGRAM_TYPES else None
    order = _MACHO_MAGIC.get(data[:4])
    if order is not None and len(data) >= 16:
        filetype = struct.unpack_from(f"{order}I", data, 12)[0]
        return "mach-o" if filetype in _MACHO_PROGRAM_TYPES else None
    if data[:4] == b"\xca\xfe\xba\xbe" and len(data) >= 8 and 0 < int.from_bytes(data[4:8], "big") < 32:
        return "mach-o"  # a universal binary (a Java class file, same magic, was read before)
    if data[:2] == b"MZ" and len(data) >= 0x40:
        offset = int.from_bytes(data[0x3C:0x40], "little")
        return "pe" if data[offset:offset + 4] == b"PE\x00\x00" else None
    return None


def _discount_program_constants(evidence: _Evidence, strings: str, index: _Index) -> None:
    """Drop the short constants (``PROGRAM_CONSTANT_CHARS``) a compiled program's ``strings``
    matched for a task, unless other evidence of that task is there too, they cluster
    (``PROGRAM_CLUSTER``), or the program names a module the task changed: then it was built
    from the project (Cython, mypyc, Nuitka), and a removed body shows in it only as its strings."""
    for task, entries in evidence.by_task.items():
        short = [key for key, (match, _, weight) in entries.items()
                 if match == "constant" and weight < STRONG and len(key[1]) < PROGRAM_CONSTANT_CHARS]
        if (not short or len(short) < len(entries) or _clustered(strings, [key[1] for key in short])
                or any(module in strings for module in index.tasks[task].modules)):
            continue
        for key in short:
            del entries[key]
        evidence.items.get(task, {}).get("constant", set()).difference_update(key[1] for key in short)
    evidence.by_task = {task: entries for task, entries in evidence.by_task.items() if entries}


def _clustered(strings: str, constants: Sequence[str], per_constant: int = 256) -> bool:
    """Whether ``PROGRAM_CLUSTER`` distinct ``constants`` occur within ``PROGRAM_CLUSTER_CHARS`` of
    one another in ``strings``. Overlapping occurrences (``vegetable`` in ``vegetables``) are one."""
    if len(constants) < PROGRAM_CLUSTER:
        return False
    spans: list[tuple[int, int, str]] = []
    for constant in constants:
        at = strings.find(constant)
        for _ in range(per_constant):
            if at < 0:
                break
            spans.append((at, at + len(constant), constant))
            at = strings.find(constant, at + 1)
    spans.sort()
    hits: list[tuple[int, str]] = []  # (start, the longest constant of overlapping spans)
    end = -1
    for start, stop, constant in spans:
        if hits and start < end:
            if len(constant) > len(hits[-1][1]):
                hits[-1] = (hits[-1][0], constant)
            end = max(end, stop)
            continue
        hits.append((start, constant))
        end = stop
    for i, (start, _) in enumerate(hits):
        window: set[str] = set()
        for at, constant in hits[i:]:
            if at - start > PROGRAM_CLUSTER_CHARS:
                break
            window.add(constant)
            if len(window) >= PROGRAM_CLUSTER:
                return True
    return False


def _reading(name: str, data: bytes) -> tuple[bool, bool]:
    """(as JSON, as HTML): how a text unit is read, by its name and by how it starts."""
    lower = name.lower()
    is_json = lower.endswith(_TEXT_SUFFIXES_JSON) or data[:1] in (b"{", b"[")
    is_html = lower.endswith(_HTML_SUFFIXES) or data[:1024].lstrip()[:14].lower() in (b"<!doctype html", b"<html")
    return is_json, is_html


def reads_alike(name: str, data: bytes) -> bool:
    """Whether a text is read the same under its name as without one (as a git blob is): only
    such a text can be passed over wherever it lies once it was read (``clean_texts``)."""
    return _reading(name, data) == _reading("", data)


def _channel(chain: tuple[str, ...]) -> str:
    """The channel to report: the outermost container, else the format of the file itself."""
    if len(chain) >= 2 and chain[0] in ("gzip", "bz2", "xz") and chain[1] == "tar":
        return "tar"
    return chain[0]


def scan(request: Mapping[str, Any]) -> dict[str, Any]:
    """Run one audit: every root of ``request`` against every fingerprint (see the module doc)."""
    started = time.perf_counter()
    index = _Index.build(request.get("fingerprints", {}))
    scanner = _Scanner(
        index,
        max_file_bytes=int(request.get("max_file_bytes", DEFAULT_MAX_FILE_BYTES)),
        exclude=list(request.get("exclude", ())),
        clean=frozenset(request.get("clean_texts", ())),
    )
    for root in request.get("roots", ()):
        scanner.walk(str(root))
    for findings in scanner.findings.values():
        findings.sort(key=lambda f: f["path"])
    return {
        "findings": scanner.findings,
        "files": scanner.files,
        "bytes": scanner.bytes,
        "skipped": scanner.skipped,
        "seconds": round(time.perf_counter() - started, 3),
    }


@dataclass(frozen=True, slots=True)
class UnitEvidence:
    """What one unit of a file holds of a fingerprint, scored or not (:func:`unit_evidence`)."""

    path: str
    """The file."""
    chain: tuple[str, ...]
    """How the unit was read: ``("text",)`` (or ``json``, ``html``, ``notebook``) for the file
    itself, ``("code",)`` for its bytecode, and what it was decoded from otherwise (``("base64",
    "zlib", "text")``, ``("quoted", "text")``)."""
    items: Mapping[str, set[Any]]
    """Family (``ngram``, ``name``, ``signature``, ``constant``, ``docstring``, ``test_id``,
    ``path``, ``body``) -> the fingerprint's items found (n-gram hashes, names, ...)."""
    stretches: Sequence[frozenset[int]]
    """The n-grams (of ``ngrams`` and ``copy_ngrams``) of each stretch where they follow one
    another."""


def unit_evidence(fingerprint: Mapping[str, Any], files: Mapping[str, str],
                  codes: Mapping[str, types.CodeType] = {}) -> list[UnitEvidence]:
    """Every unit of ``files`` (path -> text) and ``codes`` (path -> its bytecode) that holds
    anything of ``fingerprint``, read as the scan reads a file: decoded blobs, rot13 and quoted
    lines included. The host runs it over the start state to compare it with the original."""
    index = _Index.build({"task": fingerprint})
    scanner = _Scanner(index, max_file_bytes=DEFAULT_MAX_FILE_BYTES, exclude=(), record=True)
    for path, text in files.items():
        scanner._content(text.encode("utf-8", "surrogatepass"), path, path, (), 0)
    for path, code in codes.items():
        evidence = _Evidence()
        _match_code(index, code, evidence)
        scanner._report(path, ("code",), evidence)
    return [
        UnitEvidence(path=label.split("!", 1)[0], chain=chain, items=evidence.items.get(0, {}),
                     stretches=evidence.stretches.get(0, []))
        for label, chain, evidence in scanner.records
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) > 1:
        print("usage: audit_scan.py [REQUEST.json]   (the request on stdin without an argument)", file=sys.stderr)
        return 2
    if args and args[0] != "-":
        with open(args[0], encoding="utf-8") as handle:
            request = json.load(handle)
        request.setdefault("exclude", []).append(os.path.abspath(args[0]))
    else:
        request = json.load(sys.stdin)
    # The request holds the fingerprints in clear text, and this script is no evidence either.
    request.setdefault("exclude", []).append(os.path.abspath(__file__))
    json.dump(scan(request), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Fingerprint the code a task removed, so the leak audit can find copies of it left behind.

:func:`build_fingerprint` diffs every changed file (the removed feature and the hidden tests)
between the original (``before``) and the start state (``after``) and keeps what would prove a
copy of the original survived: n-gram hashes of the removed tokens, the signatures, names,
docstrings and string constants of the symbols that vanished, the names a hollowed body used
(found again in bytecode), and the hidden test ids. :mod:`taskforge.guest.scanner` looks for them;
the tokenizer, the hash and the matchers live there, so both sides agree.

The audit must report nothing on a clean task, so a fingerprint holds nothing an agent may
legitimately see, and little an unrelated project is likely to contain:

* nothing the start state (``visible``) may legitimately show: a ``body`` task keeps its
  signature and docstring on purpose, so they are no evidence; neither is a constant or a name
  that the start state still uses somewhere. As a last step the start state is compared with the
  original (:mod:`taskforge.mining.audit.original`): the audit's own matchers read it as they read
  any file (decoded blobs and quoted lines included, and its bytecode where it holds a
  fingerprint word), every item found where the project's code lives or in too small a piece to
  be a copy is dropped, and a file elsewhere that repeats the removed implementation verbatim is
  named as a copy (:attr:`Fingerprint.copies`), its items kept. So the two sides cannot disagree
  about what is visible, and a copy the start state keeps is found, not left out.
* no name, signature or constant that the Python standard library also uses (``close``,
  ``"Content-Type"``): a third-party package in the sandbox could use it just as well.
* no signature that a dependency of the environment also defines, nor the bare name of a function
  removed with such a signature (:func:`interface_names`; a dependency's copy of the project is
  no dependency): a hook implementation matches the hookspec that declares it
  (``def pytest_generate_tests(metafunc)`` is in pytest), a method that overrides a dependency's
  base class matches the base. That is an interface, not a copy. The n-grams of the body are
  kept: they are what a copy would share. (What a dependency's own files share with the removed
  code otherwise, a constant or a name, is weighed where they are found: ``scan_image``.)
* nothing too small to tell apart: constants under six characters, docstrings under 24, items
  without a word of five characters or more (the audit's prefilter needs one), n-grams that hold
  only keywords, operators and common names.
"""

from __future__ import annotations

import ast
import bisect
import difflib
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import PurePosixPath
from types import CodeType
from typing import Any

from taskforge.guest.scanner import (
    ANCHOR_WORDS,
    MIN_WORD,
    anchor_word,
    is_distinctive,
    iter_tokens,
    ngram_hashes,
    normalize_docstring,
    parse_signature,
    test_id_patterns,
    token_words,
)
from taskforge.mining.audit.original import Removed, compare
from taskforge.mining.audit.vocabulary import (
    IDENTIFIER,
    PYTHON_SUFFIXES,
    Interfaces,
    Vocabulary,
    collapsed,
    format_signature,
    interior_words,
    parse,
    runs,
    stdlib_vocabulary,
)
from taskforge.repo.text import source_lines

__all__ = ["DEFAULT_NGRAM", "DOCSTRING_CHARS", "Fingerprint", "MAX_ANCHOR_RATE", "MIN_BODY_NAMES", "MIN_CONSTANT", "MIN_DOCSTRING", "MIN_NGRAM", "STRATEGIES", "build_fingerprint"]


DEFAULT_NGRAM = 12
"""Twelve normalized tokens (about one and a half lines of code): long enough that an unrelated
package does not share one by chance once the start state's n-grams are out, short enough that a
five-line body yields a dozen."""


MIN_NGRAM = 4


MIN_CONSTANT = 6


MIN_DOCSTRING = 24


DOCSTRING_CHARS = 160
"""Docstrings are cut to their first 160 characters: rendered docs keep the opening sentences
verbatim more often than the reST-heavy rest."""


MIN_BODY_NAMES = 3


MAX_ANCHOR_RATE = 2e-4
"""An n-gram is kept only if the share of standard library modules expected to hold all of its
anchor words (independence assumed) is at most this: a word no module uses with one in every
seventh module, or three that are each in one module of twenty. Every kept n-gram makes the
audit tokenize the files that hold its anchor, so this bounds the audit's cost; an n-gram of
common words only would make it tokenize half of site-packages for evidence the other n-grams
give anyway."""


STRATEGIES = ("body", "symbol", "module", "feature")
"""The removal strategies (``taskforge.mining.removal.edits.STRATEGIES``; the audit does not import the removal)."""


@dataclass(kw_only=True, slots=True)
class Fingerprint:
    """What a copy of one task's removed code would contain, and its start state does not."""

    ngrams: list[int] = field(default_factory=list)
    """Hashes (:func:`taskforge.guest.scanner.ngram_hashes`) of token n-grams of the removed lines."""
    signatures: list[str] = field(default_factory=list)
    """``def name(a, *, b=...)`` of every removed function no longer in the start state."""
    names: list[str] = field(default_factory=list)
    """Removed names absent from the start state: bare (``parse``) and dotted (``pkg.mod.parse``,
    and ``pkg.mod`` for a removed module)."""
    constants: list[str] = field(default_factory=list)
    """Non-trivial string constants of the removed code."""
    docstrings: list[str] = field(default_factory=list)
    """Docstrings of removed symbols and modules, whitespace collapsed (symbol and module tasks)."""
    test_ids: list[str] = field(default_factory=list)
    """Hidden test node ids (FAIL_TO_PASS): found in ``.pytest_cache`` or coverage contexts."""
    n: int = DEFAULT_NGRAM
    """The n-gram size."""
    anchors: list[list[str]] = field(default_factory=list)
    """Word sets (up to three words, rarest first) the audit's prefilter looks for: every n-gram
    holds all words of one. Only files that hold all words of an anchor are tokenized."""
    bodies: dict[str, list[str]] = field(default_factory=dict)
    """Hollowed function (qualname) -> the names its removed body used (body tasks): its bytecode
    lists them, the start state's ``raise NotImplementedError`` does not."""
    modules: list[str] = field(default_factory=list)
    """The source modules the task changed, as a compiled build of the project names them
    (``pkg.mod`` and ``pkg/mod.py``; ``mod.py`` for a top-level module). No evidence themselves: a
    compiled program that names one was built from the project, so its short strings count in
    full (``taskforge.guest.scanner.PROGRAM_CONSTANT_CHARS``)."""
    copies: list[dict[str, str]] = field(default_factory=list)
    """Start-state files that keep a copy of the removed implementation where the project's code
    does not live (:mod:`taskforge.mining.audit.original`): ``path``, ``kind``, ``detail``. The
    start state is read for them already; the audit reports each as a finding."""
    interface_ngrams: list[int] = field(default_factory=list)
    """Of ``ngrams``, those that hold a token of the header (``def name(...):``) of a removed
    function whose own signature a dependency also defines (it implements or overrides it), and
    occur nowhere else in the removed code. Evidence like the rest, but not in a file the
    dependency installs, which holds such a header as published (``taskforge.mining.audit.scan``)."""

    def __post_init__(self) -> None:
        if self.n < MIN_NGRAM:
            raise ValueError(f"n must be at least {MIN_NGRAM}, got {self.n}")

    @property
    def empty(self) -> bool:
        """Nothing to look for: the removed code held nothing distinctive enough (a one-line body
        of common names). The audit can then vouch for nothing; the caller decides what to do."""
        return not (self.ngrams or self.signatures or self.names or self.constants or self.docstrings
                    or self.test_ids or self.bodies)

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "ngrams": list(self.ngrams),
            "anchors": [list(words) for words in self.anchors],
            "signatures": list(self.signatures),
            "names": list(self.names),
            "constants": list(self.constants),
            "docstrings": list(self.docstrings),
            "test_ids": list(self.test_ids),
            "bodies": {qualname: list(names) for qualname, names in self.bodies.items()},
            "modules": list(self.modules),
            "copies": [dict(copy) for copy in self.copies],
            "interface_ngrams": list(self.interface_ngrams),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Fingerprint:
        return cls(
            n=int(data["n"]),
            ngrams=[int(h) for h in data.get("ngrams", ())],
            anchors=[[str(w) for w in words] for words in data.get("anchors", ())],
            signatures=[str(s) for s in data.get("signatures", ())],
            names=[str(s) for s in data.get("names", ())],
            constants=[str(s) for s in data.get("constants", ())],
            docstrings=[str(s) for s in data.get("docstrings", ())],
            test_ids=[str(s) for s in data.get("test_ids", ())],
            bodies={str(q): [str(n) for n in ns] for q, ns in dict(data.get("bodies", {})).items()},
            modules=[str(m) for m in data.get("modules", ())],
            copies=[{str(k): str(v) for k, v in dict(copy).items()} for copy in data.get("copies", ())],
            interface_ngrams=[int(h) for h in data.get("interface_ngrams", ())],
        )


@dataclass(kw_only=True, slots=True)
class _FileLoss:
    token_runs: list[list[str]] = field(default_factory=list)
    """Runs of consecutive tokens that lie on removed lines."""
    names: list[str] = field(default_factory=list)
    dotted: list[str] = field(default_factory=list)
    signatures: list[str] = field(default_factory=list)
    constants: list[str] = field(default_factory=list)
    docstrings: list[str] = field(default_factory=list)
    bodies: dict[str, set[str]] = field(default_factory=dict)
    implementation: list[list[tuple[str, bool]]] = field(default_factory=list)
    """The token runs of removed source (not test) code, each token with whether it is
    implementation (not a signature, decorator or docstring: what the task shows)."""


@lru_cache(maxsize=64)
def _removed_lines(before: str, after: str) -> frozenset[int]:
    """1-based numbers of the lines of ``before`` that ``after`` deleted or replaced."""
    old, new = source_lines(before, keepends=True), source_lines(after, keepends=True)
    # Lines the two share at either end are kept; diff only what lies between (a task changes a
    # few spots of a long file, and the matcher is quadratic in the worst case).
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    matcher = difflib.SequenceMatcher(None, old[head:len(old) - tail], new[head:len(new) - tail], autojunk=False)
    removed: set[int] = set()
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag in ("delete", "replace"):
            removed.update(range(head + i1 + 1, head + i2 + 1))
    return frozenset(removed)


@lru_cache(maxsize=64)
def _line_tokens(text: str) -> tuple[tuple[int, str], ...]:
    """(1-based line, normalized token) of every token of ``text``, once per text and process:
    the tasks of one repository change the same original files again and again."""
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    return tuple((bisect.bisect_right(line_starts, offset), token) for offset, token in iter_tokens(text))


def _token_runs(text: str, removed: set[int]) -> list[list[str]]:
    # Tokenize the whole file, not the removed hunks alone: a hunk may start inside a string.
    runs: list[list[str]] = []
    current: list[str] = []
    for line, token in _line_tokens(text):
        if line in removed:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def _header_windows(text: str, removed: frozenset[int], signatures: frozenset[str], n: int) -> tuple[set[int], set[int]]:
    """The n-grams of ``text``'s removed lines that hold a token of the header of a function whose
    own signature is in ``signatures`` (its ``def`` line down to the line before its body; the
    AST says where), and the other n-grams of those lines."""
    tree = _analyzed(text)[0]
    headers: set[int] = set()
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and format_signature(node) in signatures:
            headers.update(range(node.lineno, max(node.body[0].lineno, node.lineno + 1)))
    at_header: set[int] = set()
    elsewhere: set[int] = set()
    if not headers:
        return at_header, elsewhere
    run: list[tuple[int, str]] = []

    def windows() -> None:
        lines = [line for line, _ in run]
        for start, h in enumerate(ngram_hashes([token for _, token in run], n)):
            (at_header if not headers.isdisjoint(lines[start:start + n]) else elsewhere).add(h)

    for line, token in _line_tokens(text):
        if line in removed:
            run.append((line, token))
        elif run:
            windows()
            run = []
    if run:
        windows()
    return at_header, elsewhere


def _module_name(path: str, known: set[str]) -> str | None:
    """``src/pkg/mod.py`` -> ``pkg.mod``: climb while the parent folder is a package."""
    pure = PurePosixPath(path)
    if pure.suffix not in PYTHON_SUFFIXES:
        return None
    parts = [] if pure.stem == "__init__" else [pure.stem]
    parent = pure.parent
    while parent != PurePosixPath(".") and any(str(parent / f"__init__{s}") in known for s in PYTHON_SUFFIXES):
        parts.insert(0, parent.name)
        parent = parent.parent
    return ".".join(parts) or None


def _definitions(tree: ast.Module) -> dict[str, ast.AST]:
    """qualname -> node of every function and class at module level and inside classes."""
    found: dict[str, ast.AST] = {}
    stack: list[tuple[str, list[ast.stmt]]] = [("", tree.body)]
    while stack:
        prefix, body = stack.pop()
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualname = prefix + node.name
                found[qualname] = node
                if isinstance(node, ast.ClassDef):
                    stack.append((qualname + ".", node.body))
            elif isinstance(node, (ast.If, ast.Try)):
                # Definitions under ``if TYPE_CHECKING:`` or ``try: ... except ImportError:``.
                stack.append((prefix, [*node.body, *getattr(node, "orelse", []), *getattr(node, "finalbody", [])]))
    return found


@lru_cache(maxsize=64)
def _analyzed(text: str) -> tuple[ast.Module | None, dict[str, ast.AST], frozenset[int]]:
    """The tree of ``text``, its definitions and its docstring nodes, once per text and process:
    the tasks of one repository change the same original files again and again. The trees are
    shared, so nothing may modify them."""
    tree = parse(text)
    if tree is None:
        return None, {}, frozenset()
    return tree, _definitions(tree), frozenset(_docstring_nodes(tree))


def _docstring_nodes(tree: ast.Module) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if _is_docstring(first):
                assert isinstance(first, ast.Expr)
                ids.add(id(first.value))
    return ids


def _is_hollow(node: ast.AST) -> bool:
    """A body that is (a docstring and) ``raise NotImplementedError`` only."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    body = _without_docstring(node.body)
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    exc = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def _is_docstring(statement: ast.stmt) -> bool:
    return (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str))


def _without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    return body[1:] if body and _is_docstring(body[0]) else body


def _body_names(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names the body uses that its bytecode keeps (co_names, co_varnames, nested code names)."""
    names: set[str] = set()
    for statement in _without_docstring(node.body):
        for sub in ast.walk(statement):
            if isinstance(sub, ast.Name):
                names.add(sub.id)
            elif isinstance(sub, ast.Attribute):
                names.add(sub.attr)
            elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(sub.name)
            elif isinstance(sub, ast.arg):
                names.add(sub.arg)
            elif isinstance(sub, ast.alias):
                names.add(sub.asname or sub.name.split(".")[0])
            elif isinstance(sub, ast.ExceptHandler) and sub.name:
                names.add(sub.name)
    params = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}
    params.update(a.arg for a in (node.args.vararg, node.args.kwarg) if a is not None)
    return names - params - {"NotImplementedError"}


def _plain_string(value: str) -> bool:
    # Escapes differ between a literal in source and its value in bytecode; keep those that agree.
    return "\\" not in value and all(ch >= " " or ch == "\t" for ch in value)


def _implementation_runs(text: str, removed: set[int], interface: frozenset[int]) -> list[list[tuple[str, bool]]]:
    """The removed token runs of ``text``, each token with whether its line is implementation."""
    runs: list[list[tuple[str, bool]]] = []
    current: list[tuple[str, bool]] = []
    for line, token in _line_tokens(text):
        if line in removed:
            current.append((token, line not in interface))
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def _interface_lines(tree: ast.Module, definitions: Mapping[str, ast.AST]) -> frozenset[int]:
    """Lines of ``tree`` that show an interface rather than implement it: the decorators, header
    and docstring of every module-level or class-level definition, and the module's docstring.
    A problem statement shows those too; a copy of them is no copy of the answer."""
    lines: set[int] = set()
    for node in (tree, *definitions.values()):
        body = getattr(node, "body", [])
        if not body:
            continue
        if not isinstance(node, ast.Module):
            assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines.update(range(first, body[0].lineno))
        if _is_docstring(body[0]):
            lines.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    return frozenset(lines)


def _file_loss(path: str, before: str, after: str | None, *, strategy: str, known: set[str],
               is_test: bool) -> _FileLoss:
    removed = _removed_lines(before, after or "")
    loss = _FileLoss(token_runs=_token_runs(before, removed))
    if not path.endswith(PYTHON_SUFFIXES):
        if not is_test:
            loss.implementation = _implementation_runs(before, removed, frozenset())
        return loss
    tree_before, defs_before, _ = _analyzed(before)
    if tree_before is None:
        return loss
    if not is_test:
        loss.implementation = _implementation_runs(before, removed, _interface_lines(tree_before, defs_before))
    _, defs_after = _analyzed(after)[:2] if after is not None else (None, {})
    module = _module_name(path, known)

    for qualname, node in defs_before.items():
        if qualname in defs_after:
            after_node = defs_after[qualname]
            if _is_hollow(after_node) and not _is_hollow(node):
                assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                loss.bodies[qualname] = _body_names(node)
            continue
        name = qualname.rsplit(".", 1)[-1]
        loss.names.append(name)
        if module:
            loss.dotted.append(f"{module}.{qualname}")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            loss.signatures.append(format_signature(node))
        if strategy != "body" and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            docstring = ast.get_docstring(node, clean=True)
            if docstring:
                loss.docstrings.append(docstring)
    if after is None and module and "." in module:
        loss.dotted.append(module)
        if strategy != "body":
            docstring = ast.get_docstring(tree_before, clean=True)
            if docstring:
                loss.docstrings.append(docstring)
    loss.constants.extend(value for line, value in _string_constants(before) if line in removed)
    return loss


@lru_cache(maxsize=64)
def _string_constants(text: str) -> tuple[tuple[int, str], ...]:
    """(line, value) of every string constant of ``text`` that is not a docstring, in walk order."""
    tree, _, docstring_ids = _analyzed(text)
    if tree is None:
        return ()
    return tuple(
        (getattr(node, "lineno", 0), node.value) for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstring_ids
    )


@lru_cache(maxsize=4096)
def _identifiers(text: str) -> frozenset[str]:
    """The identifiers of a start-state text, once per text and process (the tasks of one
    repository see nearly the same files)."""
    return frozenset(IDENTIFIER.findall(text))


class _StartState:
    """The visible files, with the lookups the filters need (each computed once)."""

    def __init__(self, visible: Mapping[str, str], candidate_words: set[str]) -> None:
        self.files = visible
        self.identifiers: set[str] = set()
        self.document_frequency: dict[str, int] = {}
        for text in visible.values():
            words = _identifiers(text)
            self.identifiers.update(words)
            for word in words & candidate_words:
                self.document_frequency[word] = self.document_frequency.get(word, 0) + 1

    def contains(self, text: str) -> bool:
        inner = interior_words(text)
        return any(text in content for content in self.files.values() if inner <= runs(content))

    def contains_collapsed(self, text: str) -> bool:
        inner = interior_words(text)  # collapsing whitespace leaves the words as they are
        return any(text in collapsed(content) for content in self.files.values() if inner <= runs(content))


def _cut_docstring(docstring: str) -> str:
    text = normalize_docstring(docstring)
    if len(text) <= DOCSTRING_CHARS:
        return text
    return text[:DOCSTRING_CHARS].rsplit(" ", 1)[0]


@lru_cache(maxsize=1 << 16)
def _token_words(token: str) -> tuple[str, ...]:
    return tuple(token_words(token))


def _ngram_anchor(words: set[str], vocabulary: Vocabulary, state: _StartState) -> tuple[str, ...] | None:
    """Every word of an n-gram, rarest first, if the rarest is the project's own name, or if files
    holding its :data:`ANCHOR_WORDS` rarest are rare enough (:data:`MAX_ANCHOR_RATE`, as if the
    words were independent) and no standard library module holds them all (they are not an
    idiom); None for an n-gram of common words or idioms only."""
    ranked = tuple(sorted(words, key=lambda w: (vocabulary.rate(w), state.document_frequency.get(w, 0), -len(w), w)))
    rate = 1.0
    for word in ranked[:ANCHOR_WORDS]:
        rate *= vocabulary.rate(word)
    if ranked and (_own_name(ranked[0], vocabulary)
                   or (rate <= MAX_ANCHOR_RATE and not vocabulary.co_occur(ranked[:ANCHOR_WORDS]))):
        # All of the n-gram's words: a unit lacking any of them cannot hold it, and the audit
        # tokenizes only units that hold every word of some anchor.
        return ranked
    return None


def _own_name(word: str, vocabulary: Vocabulary) -> bool:
    """A project's own identifier (``_merge_continuations``): long, several words, never used in
    the standard library. It anchors an n-gram on its own."""
    return word not in vocabulary.document_frequency and is_distinctive(word)


def _test_still_visible(node_id: str, visible: Mapping[str, str]) -> bool:
    path, _, rest = node_id.split("[", 1)[0].partition("::")
    function = rest.rsplit("::", 1)[-1]
    text = visible.get(path)
    return bool(function) and text is not None and re.search(rf"\bdef\s+{re.escape(function)}\b", text) is not None


def _visible_code(visible: Mapping[str, str], words: set[str]) -> Iterable[tuple[str, CodeType]]:
    """(path, bytecode) of the start state's Python files that hold a fingerprint word (the audit
    will see their ``.pyc``)."""
    for path, text in visible.items():
        if not path.endswith(".py") or words.isdisjoint(_identifiers(text)):
            continue
        code = _compiled(path, text)
        if code is not None:
            yield path, code


@lru_cache(maxsize=4096)
def _compiled(path: str, text: str) -> CodeType | None:
    """A start-state file's bytecode; the tasks of one repository share most files, so each is
    compiled once per process."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return compile(text, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None


def build_fingerprint(
    *,
    before: Mapping[str, str],
    after: Mapping[str, str | None],
    visible: Mapping[str, str],
    strategy: str,
    test_ids: Sequence[str] = (),
    n: int = DEFAULT_NGRAM,
    interfaces: Interfaces | None = None,
) -> Fingerprint:
    """The fingerprint of what the task removed.

    ``before``: repository path -> original text of every file the task changed (source and hidden
    tests). ``after``: the same paths -> start-state text, None for a deleted file (a missing path
    counts as deleted). ``visible``: every text file of the clean start state. ``strategy``: the
    removal strategy (``body``, ``symbol``, ``module``). ``test_ids``: the hidden FAIL_TO_PASS ids.
    ``interfaces``: what the environment's dependencies define (:func:`interface_names`).
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if n < MIN_NGRAM:
        raise ValueError(f"n must be at least {MIN_NGRAM}, got {n}")
    known = set(before) | set(visible)
    test_files = {node_id.split("::", 1)[0] for node_id in test_ids}
    changed = [path for path in sorted(before) if before[path] != after.get(path)]
    losses = [
        _file_loss(path, before[path], after.get(path), strategy=strategy, known=known,
                   is_test=path in test_files or _looks_like_tests(path))
        for path in changed
    ]

    # Candidate n-grams with the words that could anchor each.
    windows: dict[int, set[str]] = {}
    for loss in losses:
        for run in loss.token_runs:
            per_token = [_token_words(token) for token in run]
            for start, h in enumerate(ngram_hashes(run, n)):
                windows.setdefault(h, set()).update(*per_token[start:start + n])
    candidate_words = {w for words in windows.values() for w in words}
    state = _StartState(visible, candidate_words)
    vocabulary = stdlib_vocabulary()
    common_identifiers = vocabulary.document_frequency
    interfaces = interfaces or Interfaces()

    ngrams: dict[int, tuple[str, ...]] = {}
    for h, words in windows.items():
        anchor = _ngram_anchor(words, vocabulary, state)
        if anchor is not None:
            ngrams[h] = anchor

    names: set[str] = set()
    dotted: set[str] = set()
    signatures: set[str] = set()
    constants: set[str] = set()
    docstrings: set[str] = set()
    bodies: dict[str, set[str]] = {}
    # A removed function whose signature a dependency also defines implements or overrides it:
    # neither its signature nor its bare name is evidence (its body's n-grams still are).
    implemented = {parsed[0] for loss in losses for s in loss.signatures
                   if s in interfaces.signatures and (parsed := parse_signature(s)) is not None}
    for loss in losses:
        for name in loss.names:
            if (len(name) >= MIN_WORD and name not in state.identifiers and name not in common_identifiers
                    and name not in implemented):
                names.add(name)
        for name in loss.dotted:
            path_form = "/".join(name.split(".")) + ".py"
            if anchor_word(name) and not state.contains(name) and not state.contains(path_form):
                dotted.add(name)
        for signature in loss.signatures:
            parsed = parse_signature(signature)
            if (parsed is not None and parsed[0] not in common_identifiers and signature not in interfaces.signatures
                    and anchor_word(signature)):
                signatures.add(signature)
        for value in loss.constants:
            text = value.strip()
            if (len(text) >= MIN_CONSTANT and _plain_string(value) and anchor_word(value)
                    and not vocabulary.common_literal(value) and not state.contains(value)):
                constants.add(value)
        for docstring in loss.docstrings:
            text = _cut_docstring(docstring)
            if (len(text) >= MIN_DOCSTRING and len(text.split()) >= 4 and anchor_word(text)
                    and not state.contains_collapsed(text)):
                docstrings.add(text)
        for qualname, used in loss.bodies.items():
            if len(used) >= MIN_BODY_NAMES:
                bodies[qualname] = used
    tests = sorted(
        t for t in set(test_ids)
        if not _test_still_visible(t, visible) and anchor_word(test_id_patterns(t)[0].rsplit("::", 1)[-1])
    )

    # The n-grams at the header of a removed function that implements a dependency's interface
    # (its own signature, as the dependency writes it): a file the dependency installs holds them.
    at_header: set[int] = set()
    elsewhere: set[int] = set()
    for path in changed:
        if interfaces.signatures and path.endswith(PYTHON_SUFFIXES):
            found, other = _header_windows(before[path], _removed_lines(before[path], after.get(path) or ""),
                                           interfaces.signatures, n)
            at_header |= found
            elsewhere |= other
    fingerprint = Fingerprint(
        n=n,
        ngrams=sorted(ngrams),
        interface_ngrams=sorted((at_header - elsewhere) & ngrams.keys()),
        anchors=sorted(map(list, set(ngrams.values()))),
        signatures=sorted(signatures),
        names=sorted(names | dotted),
        constants=sorted(constants),
        docstrings=sorted(docstrings),
        test_ids=tests,
        bodies={q: sorted(used) for q, used in sorted(bodies.items())},
        modules=_module_names([path for path in changed if path not in test_files and not _looks_like_tests(path)],
                              known),
    )
    removed = Removed.of((run for loss in losses for run in loss.implementation), n=n,
                         originals={path: before[path] for path in changed})
    return _against_the_original(fingerprint, visible, ngrams, removed, changed)


def _module_names(paths: Sequence[str], known: set[str]) -> list[str]:
    """How a compiled build names the modules at ``paths``: ``pkg.mod`` and ``pkg/mod.py`` (from
    the package root, not ``src/``), or ``mod.py`` alone for a top-level module (a bare word
    names too much)."""
    found: set[str] = set()
    for path in paths:
        dotted = _module_name(path, known)
        if dotted is None:
            continue
        pure = PurePosixPath(path)
        depth = dotted.count(".") + (1 if pure.stem == "__init__" else 0)
        found.add("/".join(pure.parts[len(pure.parts) - depth - 1:]))
        if "." in dotted:
            found.add(dotted)
    return sorted(found)


def _looks_like_tests(path: str) -> bool:
    """A test file by its name, for hidden tests whose ids are not given."""
    pure = PurePosixPath(path)
    return (pure.name.startswith("test_") or pure.stem.endswith("_test") or pure.name == "conftest.py"
            or not {"test", "tests", "testing"}.isdisjoint(pure.parts[:-1]))


def _against_the_original(
    fingerprint: Fingerprint, visible: Mapping[str, str], anchors: Mapping[int, tuple[str, ...]], removed: Removed,
    changed: Sequence[str],
) -> Fingerprint:
    """Drop every item the audit's own matchers find where the start state may show it, and
    name the files that keep a copy of the removed implementation (see the module doc)."""
    words = {w for anchor in fingerprint.anchors for w in anchor}
    words.update(w for item in (*fingerprint.names, *fingerprint.signatures, *fingerprint.constants)
                 if (w := anchor_word(item)) is not None)
    words.update(q.rsplit(".", 1)[-1] for q in fingerprint.bodies)
    comparison = compare(fingerprint.to_json(), removed, visible=visible, changed=changed,
                         codes=dict(_visible_code(visible, words)))
    found = comparison.shown
    gone_paths = found.get("path", set())
    gone_names = found.get("name", set())
    ngrams = [h for h in fingerprint.ngrams if h not in found.get("ngram", set())]
    return Fingerprint(
        n=fingerprint.n,
        ngrams=ngrams,
        interface_ngrams=sorted(set(fingerprint.interface_ngrams).intersection(ngrams)),
        anchors=sorted(map(list, {anchors[h] for h in ngrams})),
        signatures=[s for s in fingerprint.signatures if s not in found.get("signature", set())],
        names=[
            name for name in fingerprint.names
            if name not in gone_names and "/".join(name.split(".")) + ".py" not in gone_paths
        ],
        constants=[c for c in fingerprint.constants if c not in found.get("constant", set())],
        docstrings=[d for d in fingerprint.docstrings if d not in found.get("docstring", set())],
        test_ids=[t for t in fingerprint.test_ids if t not in found.get("test_id", set())],
        bodies={q: ns for q, ns in fingerprint.bodies.items() if q not in found.get("body", set())},
        modules=list(fingerprint.modules),
        copies=comparison.copies,
    )

"""Candidate features: symbols the tests verify, from the symbol index and the coverage map.

A test *exercises* a function when it executed a line of the function's body (its statements
after the docstring; the ``def`` line and decorators run at import, so they say nothing). A class
is exercised through its methods, a module through its functions. A candidate is a target (a
symbol, or a module) with a strategy and the stable passing tests that exercise it: the
predicted FAIL_TO_PASS tests, which validation runs first.

Ranking is deterministic for a given seed: a score favouring substantial, documented features
tested by several tests, plus a small seeded jitter that breaks ties and varies the pick between
seeds. Strategies are interleaved so that every strategy gets its turn. ``feature`` candidates
(:mod:`taskforge.mining.features`) rank features that span more files and symbols first.
"""

from __future__ import annotations

import ast
import random
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from taskforge.difficulty import band_bounds, estimate, in_band
from taskforge.mining.features import find_features
from taskforge.mining.hiding import doctest_text_file
from taskforge.mining.removal.cst import STRATEGIES, Strategy
from taskforge.repo.symbols import Symbol, SymbolIndex
from taskforge.task import is_doctest_id

__all__ = ["Candidate", "CandidateConfig", "body_lines", "find_candidates", "tests_by_symbol"]


@dataclass(kw_only=True, slots=True)
class CandidateConfig:
    """What makes a feature worth a task."""

    min_tests: int = 1
    """At least this many stable passing tests must exercise it (k)."""
    max_test_fraction: float = 0.25
    """At most this share of all passing tests may exercise it; more means removing it breaks the codebase."""
    min_body_lines: int = 3
    """Bodies shorter than this (in lines, docstring excluded) are too trivial to re-implement."""
    max_body_lines: int = 400
    """Longer features make unwieldy tasks."""
    strategies: tuple[Strategy, ...] = ("body", "symbol", "module")
    """Which removal strategies to propose (``feature`` too, on request)."""
    difficulty: str | tuple[float, float] | None = None
    """Only candidates whose estimated difficulty is in this band: ``"easy"``, ``"medium"``,
    ``"hard"`` (:data:`taskforge.difficulty.BANDS`) or ``[low, high]`` in [0, 1]. The estimate
    before validation counts the predicted tests; the task's own record is checked again when it
    is written (``difficulty_out_of_band``)."""
    min_feature_symbols: int = 2
    """A ``feature`` takes out at least this many functions, methods and classes."""
    max_feature_lines: int = 1500
    """A ``feature``'s size limit (its definitions' lines); ``max_body_lines`` bounds the others."""

    def __post_init__(self) -> None:
        if self.min_tests < 1:
            raise ValueError(f"CandidateConfig.min_tests must be at least 1, got {self.min_tests}")
        if not 0 < self.max_test_fraction <= 1:
            raise ValueError(f"CandidateConfig.max_test_fraction must be in (0, 1], got {self.max_test_fraction}")
        if self.min_body_lines < 1 or self.max_body_lines < self.min_body_lines:
            raise ValueError("CandidateConfig.min_body_lines must be at least 1 and at most max_body_lines")
        unknown = set(self.strategies) - set(STRATEGIES)
        if unknown or not self.strategies:
            raise ValueError(f"CandidateConfig.strategies must be a non-empty subset of {', '.join(STRATEGIES)}; "
                             f"got {self.strategies}")
        if self.difficulty is not None:
            bounds = band_bounds(self.difficulty if isinstance(self.difficulty, str) else tuple(self.difficulty))
            self.difficulty = self.difficulty if isinstance(self.difficulty, str) else bounds
        if self.min_feature_symbols < 1 or self.max_feature_lines < 1:
            raise ValueError("CandidateConfig.min_feature_symbols and max_feature_lines must be at least 1")
        self.strategies = tuple(self.strategies)


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate:
    target: str
    """A symbol qualname, or a dotted module name for the module strategy."""
    strategy: Strategy
    tests: tuple[str, ...]
    """Stable passing tests that exercise the target: the predicted FAIL_TO_PASS."""
    size: int
    """Lines of code the removal takes away (bodies, for the body strategy)."""
    score: float
    members: tuple[str, ...] = ()
    """For ``feature``: everything the removal deletes, the target among them."""
    files: int = 1
    """Files the removal is expected to change."""
    depth: int = 1
    """Longest chain of uses among the removed symbols."""
    symbols: int = 1
    """Functions, methods and classes the removal takes out."""
    public: bool = False
    """Whether a public name goes (never for ``body``)."""

    def difficulty(self) -> float:
        """The estimate (:func:`taskforge.difficulty.estimate`), the predicted tests standing in
        for FAIL_TO_PASS."""
        return estimate(lines=self.size, symbols=self.symbols, files=self.files, depth=self.depth,
                        fail_to_pass=len(self.tests), public=self.public)


def body_lines(repo: Path, index: SymbolIndex) -> dict[str, tuple[int, int]]:
    """qualname → (first, last) line of each function's body, docstring excluded."""
    spans: dict[str, tuple[int, int]] = {}
    by_path: dict[str, list[Symbol]] = defaultdict(list)
    for symbol in index.symbols.values():
        if symbol.kind != "class":
            by_path[symbol.path].append(symbol)
    for path, symbols in by_path.items():
        tree = ast.parse((repo / path).read_text(encoding="utf-8"))
        defs = {
            node.lineno: node
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        for symbol in symbols:
            node = next(
                (n for line, n in sorted(defs.items()) if symbol.start_line <= line <= symbol.end_line and n.name == symbol.name),
                None,
            )
            if node is None:
                continue
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                body = body[1:]
            if body:
                spans[symbol.qualname] = (body[0].lineno, node.end_lineno or body[-1].lineno)
    return spans


def tests_by_symbol(
    spans: Mapping[str, tuple[int, int]],
    index: SymbolIndex,
    coverage: Mapping[str, Mapping[str, Sequence[int]]],
    passing: Iterable[str],
) -> dict[str, frozenset[str]]:
    """qualname → the passing tests that executed a line of its body (classes: of any method's)."""
    passing = set(passing)
    lines_by_path: dict[str, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for nodeid, files in coverage.items():
        if nodeid not in passing:
            continue
        for path, lines in files.items():
            for line in lines:
                lines_by_path[path][line].add(nodeid)
    exercised: dict[str, set[str]] = defaultdict(set)
    for qualname, (first, last) in spans.items():
        symbol = index.symbols[qualname]
        hits = lines_by_path.get(symbol.path, {})
        for line in range(first, last + 1):
            exercised[qualname] |= hits.get(line, set())
    for qualname, symbol in index.symbols.items():  # classes through their methods
        if symbol.kind == "class":
            for other, tests in list(exercised.items()):
                if other.startswith(qualname + "."):
                    exercised[qualname] |= tests
    return {q: frozenset(t) for q, t in exercised.items() if t}


def find_candidates(
    repo: Path,
    index: SymbolIndex,
    coverage: Mapping[str, Mapping[str, Sequence[int]]],
    passing: Sequence[str],
    *,
    config: CandidateConfig,
    seed: int,
) -> list[Candidate]:
    """All candidates, best first, strategies interleaved."""
    spans = body_lines(repo, index)
    exercised = tests_by_symbol(spans, index, coverage, passing)
    limit = max(config.min_tests, int(config.max_test_fraction * len(passing)))
    by_strategy: dict[str, list[Candidate]] = {s: [] for s in config.strategies}

    def add(target: str, strategy: Strategy, tests: frozenset[str], size: int, documented: bool, *,
            symbols: int = 1, public: bool = False) -> None:
        if not config.min_tests <= len(tests) <= limit:
            return
        # Doctests are never FAIL_TO_PASS (taskforge.mining.checks.start_state), and an emptied
        # body fails only what runs it: a body that only doctests run makes a task of no test (a
        # held-out project, whose C extension ran in its Python functions' place in every other
        # test, lost 20 of 30 attempts so, `no_failing_tests`). A symbol or module that goes
        # whole can still break a test module's import. Doctests still run with a candidate's
        # tests, which hides those that fail.
        if strategy == "body" and sum(1 for t in tests if not is_doctest_id(t) and doctest_text_file(t) is None) < config.min_tests:
            return
        if not config.min_body_lines <= size <= config.max_body_lines:
            return
        jitter = random.Random(f"{seed}:{strategy}:{target}").random()
        score = min(size, 60) / 60 + 0.5 * documented + 0.3 * min(len(tests), 10) / 10 + 0.25 * jitter
        by_strategy[strategy].append(
            Candidate(target=target, strategy=strategy, tests=tuple(sorted(tests)), size=size, score=round(score, 6),
                      symbols=symbols, public=public)
        )

    for qualname, symbol in index.symbols.items():
        tests = exercised.get(qualname, frozenset())
        documented = bool(symbol.docstring)
        if "body" in by_strategy and symbol.kind != "class" and qualname in spans:
            first, last = spans[qualname]
            add(qualname, "body", tests, last - first + 1, documented)
        if "symbol" in by_strategy and not symbol.is_private and not symbol.name.startswith("__"):
            helpers = index.exclusive_private_helpers(qualname)
            all_tests = tests.union(*(exercised.get(h, frozenset()) for h in helpers))
            size = sum(index.symbols[q].end_line - index.symbols[q].start_line + 1 for q in (qualname, *helpers))
            add(qualname, "symbol", all_tests, size, documented, symbols=1 + len(helpers), public=not _private(qualname))
    if "module" in by_strategy:
        for module, path in index.modules.items():
            if path.endswith("__init__.py"):
                continue
            members = [q for q, s in index.symbols.items() if s.module == module]
            tests = frozenset().union(*(exercised.get(q, frozenset()) for q in members))
            size = len((repo / path).read_text(encoding="utf-8").splitlines())
            add(module, "module", tests, size, any(index.symbols[q].docstring for q in members),
                symbols=max(1, len(members)), public=not _private(module))

    if "feature" in by_strategy:
        for feature in find_features(index, exercised, passing, max_tests=limit, min_symbols=config.min_feature_symbols):
            if not config.min_body_lines <= feature.size <= config.max_feature_lines:
                continue
            documented = any(index.symbols[m].docstring for m in feature.members if m in index.symbols)
            jitter = random.Random(f"{seed}:feature:{feature.anchor}:{','.join(feature.members)}").random()
            score = (0.5 * min(len(feature.files) - 1, 3) / 3 + 0.4 * min(feature.symbols - 1, 9) / 9
                     + 0.3 * min(feature.size, 200) / 200 + 0.2 * min(feature.depth - 1, 3) / 3 + 0.3 * documented
                     + 0.2 * min(len(feature.tests), 10) / 10 + 0.25 * jitter)
            by_strategy["feature"].append(Candidate(
                target=feature.anchor, strategy="feature", tests=tuple(sorted(feature.tests)), size=feature.size,
                score=round(score, 6), members=feature.members, files=len(feature.files), depth=feature.depth,
                symbols=feature.symbols, public=any(not _private(m) for m in feature.members)))

    if config.difficulty is not None:
        bounds = band_bounds(config.difficulty)
        by_strategy = {s: [c for c in found if in_band(c.difficulty(), bounds)] for s, found in by_strategy.items()}
    ranked = {s: sorted(c, key=lambda c: (-c.score, c.target, c.members)) for s, c in by_strategy.items()}
    interleaved: list[Candidate] = []
    for row in range(max((len(c) for c in ranked.values()), default=0)):
        for strategy in config.strategies:
            if row < len(ranked[strategy]):
                interleaved.append(ranked[strategy][row])
    return interleaved


def _private(qualname: str) -> bool:
    module, _, local = qualname.partition(":")
    return any(p.startswith("_") and not (p.startswith("__") and p.endswith("__"))
               for p in (*module.split("."), *(local.split(".") if local else [])))

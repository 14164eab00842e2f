"""How hard a task is: a record computed from the task row alone, and the bands recipes ask for.

The record (columns of the task schema since version 3):

``removed_symbols``     functions, methods and classes the removal took out (a hollowed body: 1)
``removed_files``       files the gold patch changes
``lines_removed``       lines the gold patch puts back (a column since version 1)
``fail_to_pass_count``  FAIL_TO_PASS tests
``call_depth``          the longest chain of uses among the removed definitions, read off the gold
                        patch: a definition uses another when its added lines name it; members that
                        use each other in a cycle count once (1: none uses another)
``public_api_removed``  a public name is gone (not for ``body``: the signature stays)
``difficulty``          the estimate in [0, 1] that :func:`estimate` combines them into

Everything is computed from the row (:func:`difficulty_of`), so a dataset written before the
record existed gets the same values (``taskforge migrate``). The estimate's weights favour what
makes re-implementation long (lines, symbols) over what makes it wide (files, depth, tests), and
its bands (:data:`BANDS`) split into thirds the 222 tasks of the held-out corpus
(``datasets/heldout``) mined with the three older strategies (``body``, ``symbol``, ``module``):
terciles 0.24 and 0.31. Measured solve rates, where rewards exist, are written beside the record
(``solve_rate``, ``solve_attempts``; ``taskforge rate``).

This module imports nothing of taskforge: mining, the datasets, the CLI and the trainer share it.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

__all__ = ["BANDS", "Difficulty", "band_bounds", "chain_depth", "difficulty_of", "estimate", "in_band"]

BANDS: dict[str, tuple[float, float]] = {"easy": (0.0, 0.24), "medium": (0.24, 0.31), "hard": (0.31, 1.0)}
"""Named bands of the estimate, ``low <= d <= high``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Difficulty:
    """The difficulty record of one task (see the module docstring)."""

    removed_symbols: int
    removed_files: int
    lines_removed: int
    fail_to_pass_count: int
    call_depth: int
    public_api_removed: bool
    difficulty: float

    def columns(self) -> dict[str, object]:
        """The record's columns, as a task row holds them (``lines_removed`` is already there)."""
        row = asdict(self)
        row.pop("lines_removed")
        return row


def estimate(*, lines: int, symbols: int, files: int, depth: int, fail_to_pass: int, public: bool) -> float:
    """The estimate in [0, 1]: a weighted sum of saturating scores of each part."""
    parts = (
        (0.35, math.log1p(max(lines, 0)) / math.log1p(500)),
        (0.20, math.log(max(symbols, 1)) / math.log(20)),
        (0.15, (max(files, 1) - 1) / 4),
        (0.10, (max(depth, 1) - 1) / 4),
        (0.10, math.log1p(max(fail_to_pass, 0)) / math.log1p(100)),
        (0.10, 1.0 if public else 0.0),
    )
    return round(sum(weight * min(1.0, score) for weight, score in parts), 4)


def chain_depth(members: Iterable[str], uses: Mapping[str, Iterable[str]]) -> int:
    """The longest chain of uses inside ``members``, counted in links of the chain; members that
    use each other in a cycle are one link (the graph's strongly connected components)."""
    nodes = sorted(set(members))
    edges = {m: sorted({n for n in uses.get(m, ()) if n in nodes and n != m}) for m in nodes}
    component = _components(nodes, edges)
    dag: dict[int, set[int]] = defaultdict(set)
    for m in nodes:
        for n in edges[m]:
            if component[m] != component[n]:
                dag[component[m]].add(component[n])
    memo: dict[int, int] = {}

    def depth(c: int) -> int:
        stack = [(c, False)]
        while stack:
            node, expanded = stack.pop()
            if node in memo:
                continue
            pending = [d for d in dag[node] if d not in memo]
            if expanded or not pending:
                memo[node] = 1 + max((memo[d] for d in dag[node]), default=0)
            else:
                stack.append((node, True))
                stack.extend((d, False) for d in pending)
        return memo[c]

    return max((depth(component[m]) for m in nodes), default=0)


def _components(nodes: Sequence[str], edges: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Strongly connected components (Tarjan's algorithm, iterative): node -> component id."""
    index_of: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    component: dict[str, int] = {}
    counter = 0
    for root in nodes:
        if root in index_of:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index_of[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            for j in range(i, len(edges[node])):
                nxt = edges[node][j]
                if nxt not in index_of:
                    work.append((node, j + 1))
                    work.append((nxt, 0))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index_of[nxt])
            else:
                if low[node] == index_of[node]:
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component[top] = index_of[node]
                        if top == node:
                            break
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
    return component


_DEF = re.compile(r"^(?P<indent>[ \t]*)(?:async[ \t]+)?(?:def|class)[ \t]+(?P<name>\w+)")
_WORD = re.compile(r"[A-Za-z_]\w*")


def _added_blocks(patch: str) -> list[list[str]]:
    """The added lines of each hunk of a unified diff."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in patch.splitlines():
        if line.startswith("@@") or line.startswith("diff --git"):
            current = []
            blocks.append(current)
        elif current is not None and line.startswith("+") and not line.startswith("+++"):
            current.append(line[1:])
    return [b for b in blocks if b]


def _patch_depth(patch: str, names: set[str]) -> int:
    """:func:`chain_depth` of the removed definitions, read off the gold patch's added lines."""
    chunks: dict[str, list[str]] = defaultdict(list)
    for block in _added_blocks(patch):
        owner: tuple[str, int] | None = None
        for line in block:
            match = _DEF.match(line)
            indent = len(line) - len(line.lstrip()) if line.strip() else None
            if owner is not None and indent is not None and indent <= owner[1] and not match:
                owner = None if not line.lstrip().startswith(("@", "#", ")")) else owner
            if match and (owner is None or len(match.group("indent")) <= owner[1]):
                name = match.group("name")
                owner = (name, len(match.group("indent"))) if name in names else None
                continue
            if owner is not None:
                chunks[owner[0]].append(line)
    uses = {name: {w for w in _WORD.findall("\n".join(lines)) if w in names and w != name}
            for name, lines in chunks.items()}
    present = set(chunks) | {n for targets in uses.values() for n in targets}
    return max(chain_depth(present, uses), 1)


def _public(qualname: str) -> bool:
    module, _, local = qualname.partition(":")
    parts = [*module.split("."), *(local.split(".") if local else [])]
    return not any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts)


def difficulty_of(row: Mapping[str, object]) -> Difficulty:
    """The record of a task row (any schema version: only version-1 columns are read)."""
    strategy = str(row["strategy"])
    removed = [str(q) for q in row["removed"]]  # type: ignore[attr-defined]
    patch = str(row["patch"])
    symbols = sum(1 for q in removed if ":" in q) or 1
    files = sum(1 for line in patch.splitlines() if line.startswith("diff --git ")) or 1
    lines = int(row["lines_removed"])  # type: ignore[call-overload]
    fail_to_pass = len(row["FAIL_TO_PASS"])  # type: ignore[arg-type]
    if strategy == "body":
        depth, public = 1, False
    else:
        depth = _patch_depth(patch, {q.rpartition(":")[2].rpartition(".")[2] for q in removed if ":" in q})
        public = any(_public(q) for q in removed)
    value = estimate(lines=lines, symbols=symbols, files=files, depth=depth, fail_to_pass=fail_to_pass, public=public)
    return Difficulty(removed_symbols=symbols, removed_files=files, lines_removed=lines, fail_to_pass_count=fail_to_pass,
                      call_depth=depth, public_api_removed=public, difficulty=value)


def band_bounds(band: str | Sequence[float]) -> tuple[float, float]:
    """``"hard"`` or ``[low, high]`` -> (low, high); a ValueError names the choices."""
    if isinstance(band, str):
        if band not in BANDS:
            raise ValueError(f"difficulty band must be one of {', '.join(BANDS)} or [low, high], got {band!r}")
        return BANDS[band]
    bounds = tuple(float(b) for b in band)
    if len(bounds) != 2 or not 0.0 <= bounds[0] <= bounds[1] <= 1.0:
        raise ValueError(f"difficulty bounds must be [low, high] with 0 <= low <= high <= 1, got {list(band)}")
    return bounds[0], bounds[1]


def in_band(value: float, bounds: tuple[float, float]) -> bool:
    """``low <= value <= high``."""
    return bounds[0] <= value <= bounds[1]

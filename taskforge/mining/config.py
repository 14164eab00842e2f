"""How to mine one repository: ``MineConfig`` (the recipe's ``[mine]`` table)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from taskforge.llm.client import LLMConfig
from taskforge.mining.candidates import CandidateConfig

__all__ = ["CONTINUE_ON_COLLECTION_ERRORS", "MineConfig", "TRACEBACKS", "recipe_defaults", "traceback_args"]


CONTINUE_ON_COLLECTION_ERRORS = ("--continue-on-collection-errors",)


TRACEBACKS = ("auto", "long", "short", "line", "native", "no")

RUN_ONLY = ("tracebacks",)
"""Settings of :class:`MineConfig` that change how validation runs, not which tasks it writes: a
sweep may resume a folder an earlier run wrote with other values of these."""


def recipe_defaults() -> dict[str, Any]:
    """The dataset recipe of a mining run at every default (``DatasetWriter(defaults=...)``): an
    option added after a folder was written counts as its default there. A new option's default
    must therefore keep the behaviour from before it existed."""
    return {"command": "mine", "config": asdict(MineConfig())}


def traceback_args(config: MineConfig) -> tuple[str, ...]:
    return () if config.tracebacks is None else (f"--tb={config.tracebacks}",)


@dataclass(kw_only=True, slots=True)
class MineConfig:
    """How to mine one repository."""

    max_tasks: int = 10
    """Stop after this many valid tasks."""
    max_attempts: int = 60
    """Validate at most this many candidates."""
    seed: int = 0
    """Seed for the candidate ranking."""
    repeats: int = 2
    """How often each failing-test check runs; any disagreement rejects the candidate."""
    baseline_runs: int = 3
    """Runs of the unmodified suite, each in a new interpreter under its own hash seed; only tests
    that pass in all of them (and in one run in the fork server) are used."""
    visible_tests: bool = False
    """Keep the FAIL_TO_PASS tests in the start state instead of hiding them."""
    timeout_s: float = 1800.0
    """Wall-clock limit of one test run."""
    agent: str = "libcst"
    """Removal agent (taskforge.mining.removal.cst.REMOVAL_AGENTS)."""
    writer: str = "template"
    """Problem statement writer (taskforge.mining.statements.template.STATEMENT_WRITERS)."""
    llm: LLMConfig = field(default_factory=LLMConfig)
    """The endpoint and budgets of the ``llm`` agent and writer (recipe: ``[llm]``)."""
    keep_flagged: bool = False
    """Keep tasks whose audit found remnants of the removed code (marked in ``audit``) instead of rejecting them."""
    tracebacks: str | None = "native"
    """pytest's ``--tb`` in the validation runs (None: as the project configures pytest).
    Validation reads each test's outcome and the first line of its message, which the JUnit report
    gives the same in every style. pytest's own styles (``auto``, ``long``, ``short``) parse the
    whole test file again for every entry of every failing test's traceback, which costs more CPU
    than the failing tests themselves: 2,000 failing subtests in a 9,000-line test module take
    225 s with ``auto``, 2.3 s with ``native`` and 2.0 s with ``line`` (a removal in
    more-itertools, whose ``test_more.py`` runs thousands of subtests, kept one run going for
    minutes); cachetools' suite with ``TTLCache.expire`` removed (55 tests failing) takes 6.2 s of
    CPU with ``auto`` and 2.2 s with ``line``. ``native`` (the default) keeps the whole traceback,
    with its source lines, for a person who reads why a candidate failed."""
    candidates: CandidateConfig = field(default_factory=CandidateConfig)

    def __post_init__(self) -> None:
        for name in ("max_tasks", "max_attempts", "repeats", "baseline_runs"):
            if getattr(self, name) < 1:
                raise ValueError(f"MineConfig.{name} must be at least 1, got {getattr(self, name)}")
        if self.timeout_s <= 0:
            raise ValueError(f"MineConfig.timeout_s must be positive, got {self.timeout_s}")
        if self.tracebacks is not None and self.tracebacks not in TRACEBACKS:
            raise ValueError(f"MineConfig.tracebacks must be one of {', '.join(TRACEBACKS)}, got {self.tracebacks!r}")
        if "llm" in (self.agent, self.writer) and not self.llm.model:
            raise ValueError("llm.model must name the model when the agent or the writer is llm")

"""The task row: the contract between mining, the datasets and scoring.

Mining writes :class:`Task` rows, ``taskforge.datasets`` stores and reads them, and the scorer and
the trainer consume them. This module imports nothing else of taskforge, so reading or scoring
tasks never loads the miner (libcst, the symbol index, the audit).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath
from typing import Any, Literal, Protocol

__all__ = ["ScorerFactory", "Task", "TaskScorer", "Verdict", "is_ambiguous_doctest_id", "is_doctest_id"]


def is_doctest_id(nodeid: str) -> bool:
    """Whether a node id names a doctest of a Python module (``pkg/mod.py::pkg.mod.func``): its
    second and last part is a dotted name, which no test function's or class's can be (an
    identifier, then ``[parameters]``).

    Doctests are tests, but their module is source: the candidate writes it, so they are never
    FAIL_TO_PASS, and a file holding them is not a test file. A module docstring's doctest of a
    top-level module (``mod.py::mod``) cannot be told from a test function by its id; mining keeps
    such ids out of both lists. Doctests of text files (``README.rst::README.rst``) are neither:
    those files are tests alone.
    """
    path, sep, name = nodeid.partition("::")
    if not sep or "::" in name or not path.endswith(".py"):
        return False
    return "." in name.split("[", 1)[0]


def is_ambiguous_doctest_id(nodeid: str, *, test_module: bool) -> bool:
    """Whether ``nodeid`` may be a module docstring's doctest that :func:`is_doctest_id` cannot
    tell from a test: ``mod.py::mod`` in a file pytest does not collect as a test module."""
    path, sep, name = nodeid.partition("::")
    return (bool(sep) and "::" not in name and path.endswith(".py") and not test_module
            and name.split("[", 1)[0] == PurePosixPath(path).stem)


@dataclass(frozen=True, kw_only=True, slots=True)
class Task:
    """One validated task. Field names follow SWE-bench where the concept exists."""

    instance_id: str
    repo: str
    source: str
    base_commit: str
    """The start state's commit: a fresh repository with this one commit (taskforge.repo.startstate)."""
    source_commit: str
    """The commit of the source snapshot the task was cut from."""
    version: str
    strategy: str
    target: str
    removed: tuple[str, ...]
    patch: str
    test_patch: str
    removal_patch: str
    problem_statement: str
    FAIL_TO_PASS: tuple[str, ...]
    PASS_TO_PASS: tuple[str, ...]
    hidden_tests: tuple[str, ...]
    image_name: str
    environment: str
    """The environment record, as JSON (import roots, installed wheels, dropped requirements)."""
    lines_removed: int
    """Lines of code the gold patch puts back."""
    validation: str
    """Validation details, as JSON: runs, durations, agent, writer."""
    audit: str
    """The leak audit, as JSON (taskforge.mining.audit.scan.AuditResult): findings, what was searched, time."""
    seed: int
    taskforge_version: str

    def to_row(self) -> dict[str, Any]:
        row = asdict(self)
        for key in ("removed", "FAIL_TO_PASS", "PASS_TO_PASS", "hidden_tests"):
            row[key] = list(row[key])
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Task:
        data = dict(row)
        for key in ("removed", "FAIL_TO_PASS", "PASS_TO_PASS", "hidden_tests"):
            data[key] = tuple(data[key])
        return cls(**data)


class Verdict(Protocol):
    """What a scorer says of one patch (``taskforge.scoring.rewards.RewardResult`` is one)."""

    @property
    def status(self) -> str: ...
    @property
    def reward(self) -> float: ...
    @property
    def detail(self) -> str: ...
    @property
    def fail_to_pass(self) -> dict[str, str]: ...
    @property
    def pass_to_pass(self) -> dict[str, str]: ...


class TaskScorer(Protocol):
    """Scores a patch against a task (``taskforge.scoring.scorer.Scorer`` is one)."""

    def score(self, task: Task, patch: str, *, tests: Literal["all", "fail_to_pass"] = "all") -> Verdict: ...


class ScorerFactory(Protocol):
    """Makes the scorer a mining worker's gate uses, as a context manager that owns its sandboxes:
    ``make_scorer(backend, limits, timeout_s)`` (``taskforge.scoring.scorer.gate_scorer`` is one)."""

    def __call__(self, backend: Any, limits: Any, timeout_s: float, /) -> AbstractContextManager[TaskScorer]: ...

"""The task row: the contract between mining, the datasets and scoring.

Mining writes :class:`Task` rows, ``taskforge.datasets`` stores and reads them, and the scorer and
the trainer consume them. This module imports nothing else of taskforge, so reading or scoring
tasks never loads the miner (libcst, the symbol index, the audit).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Task"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Task:
    """One validated task. Field names follow SWE-bench where the concept exists."""

    instance_id: str
    repo: str
    source: str
    base_commit: str
    """The start state's commit: a fresh repository with this one commit (taskforge.startstate)."""
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
    """The leak audit, as JSON (taskforge.audit.AuditResult): findings, what was searched, time."""
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

"""The task row: the contract between mining, the datasets and scoring.

Mining writes :class:`Task` rows, ``taskforge.datasets`` stores and reads them, and the scorer and
the trainer consume them. This module imports nothing else of taskforge, so reading or scoring
tasks never loads the miner (libcst, the symbol index, the audit).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Any, Literal, Protocol

__all__ = ["RejectReason", "ScorerFactory", "Task", "TaskScorer", "Verdict", "is_ambiguous_doctest_id", "is_doctest_id", "reject_reason"]


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


_GRADED = ("instance_id", "base_commit", "patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS", "hidden_tests",
           "environment")
"""The Task fields :attr:`Task.grading_sha256` covers, with the parts of ``validation`` the scorer
reads (:data:`_GRADED_VALIDATION`). Not ``image_name``: where the task runs, which an export with
per-task images renames; the environment record says what the image holds."""
_GRADED_VALIDATION = ("canaries", "test_layout")


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
    removed_symbols: int
    """The difficulty record (taskforge.difficulty): functions, methods and classes removed."""
    removed_files: int
    fail_to_pass_count: int
    call_depth: int
    public_api_removed: bool
    difficulty: float
    """The estimate in [0, 1]."""
    solve_rate: float | None = None
    """Measured share of scored rollouts that solved it; None until rewards exist (``taskforge rate``)."""
    solve_attempts: int = 0

    @property
    def grading_sha256(self) -> str:
        """sha256 (hex) of everything a verdict on this task depends on: its id, the start state
        (``base_commit``), the gold patch, the hidden tests, both lists, the environment record,
        the calibrated canaries and the test layout the tamper rules follow. Mining a source
        again (``--again --replace``) can write a task under the same instance_id with some of
        these changed; a verdict stored against another digest (a reward row's ``task_sha256``,
        an entry of a validation report) is stale, and resumed runs check the task again rather
        than reuse it."""
        try:
            validation = json.loads(self.validation or "{}")
        except ValueError:
            validation = {}
        graded = {key: getattr(self, key) for key in _GRADED}
        for key in _GRADED_VALIDATION:
            graded[key] = (validation.get(key) or None) if isinstance(validation, dict) else None
        return hashlib.sha256(json.dumps(graded, sort_keys=True, default=list).encode()).hexdigest()

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

    def score(self, task: Task, patch: str, *, tests: Literal["all", "fail_to_pass"] = "all",
              timeout_s: float | None = None) -> Verdict: ...

    def calibrate(self, task: Task, *, timeout_s: float | None = None) -> Task:
        """``task`` with the canary tests the gold patch fails, for scoring to add; each run at
        most ``timeout_s`` (default: the scorer's own bound)."""
        ...

    def confirm(self, task: Task, *, timeout_s: float | None = None) -> tuple[Task, Verdict]:
        """The gold patch's verdict as scoring gives it, and ``task`` with the canaries that verdict
        placed and gold failed (one per test)."""
        ...


class ScorerFactory(Protocol):
    """Makes the scorer a mining worker's gate uses, as a context manager that owns its sandboxes:
    ``make_scorer(backend, limits, timeout_s)`` (``taskforge.scoring.scorer.gate_scorer`` is one)."""

    def __call__(self, backend: Any, limits: Any, timeout_s: float, /) -> AbstractContextManager[TaskScorer]: ...



class RejectReason(StrEnum):
    """Why a candidate did not become a task: the fixed vocabulary of ``mine-summary.json``'s
    ``rejections`` and ``taskforge inspect --rejections``. Members are strings
    (``RejectReason.GOLD_FAILS == "gold_fails"``), so summaries and reports read as before."""

    # the removal
    REMOVAL_NOT_APPLICABLE = "removal_not_applicable"
    REMOVAL_TOUCHES_TESTS = "removal_touches_tests"
    SYNTAX_ERROR = "syntax_error"
    PACKAGE_IMPORT_FAILED = "package_import_failed"
    UNHIDEABLE_TEST = "unhideable_test"

    # the failing-test runs and the start state
    NO_FAILING_TESTS = "no_failing_tests"
    FLAKY_FAIL_TO_PASS = "flaky_fail_to_pass"
    HIDDEN_TEST_STILL_VISIBLE = "hidden_test_still_visible"
    FAIL_TO_PASS_PASSES_AT_START = "fail_to_pass_passes_at_start"
    BREAKS_OTHER_TESTS = "breaks_other_tests"
    GOLD_FAILS = "gold_fails"
    GOLD_DOES_NOT_RESTORE = "gold_does_not_restore"

    # a failing-test run that did not report its tests (taskforge.repo.suite.RunStatus)
    AFFECTED_COLLECTION_ERRORS = "affected_collection_errors"
    AFFECTED_TIMEOUT = "affected_timeout"
    AFFECTED_OOM = "affected_oom"
    AFFECTED_NO_TESTS = "affected_no_tests"
    AFFECTED_CRASHED = "affected_crashed"

    # a start-state run that did not report its tests
    START_STATE_COLLECTION_ERRORS = "start_state_collection_errors"
    START_STATE_TIMEOUT = "start_state_timeout"
    START_STATE_OOM = "start_state_oom"
    START_STATE_NO_TESTS = "start_state_no_tests"
    START_STATE_CRASHED = "start_state_crashed"

    # the problem statement and the audit
    STATEMENT_LEAKS_CODE = "statement_leaks_code"
    DIFFICULTY_OUT_OF_BAND = "difficulty_out_of_band"
    AUDIT_FINDINGS = "audit_findings"
    AUDIT_EMPTY_FINGERPRINT = "audit_empty_fingerprint"

    # the scorer's verdict (a status other than ok: taskforge.scoring.rewards.RewardStatus)
    GOLD_SCORES_0 = "gold_scores_0"
    EMPTY_PATCH_SCORES_1 = "empty_patch_scores_1"
    SCORER_TIMEOUT = "scorer_timeout"
    SCORER_PATCH_FAILED = "scorer_patch_failed"
    SCORER_TAMPERED = "scorer_tampered"
    SCORER_INFRA_ERROR = "scorer_infra_error"

    # an error of an LLM removal agent or statement writer, or of its sandbox
    LLM_ERROR = "llm_error"
    LLM_TIMEOUT = "llm_timeout"
    LLM_SERVER_ERROR = "llm_server_error"
    LLM_REQUEST_REJECTED = "llm_request_rejected"
    LLM_MALFORMED_OUTPUT = "llm_malformed_output"
    LLM_BUDGET_EXHAUSTED = "llm_budget_exhausted"
    SANDBOX_ERROR = "sandbox_error"
    TEST_RUN_FAILED = "test_run_failed"

    # any other error reason a removal agent raises (the detail keeps it)
    AGENT_FAILED = "agent_failed"


def reject_reason(reason: str) -> RejectReason:
    """The member named by ``reason`` (a ``TaskforgeError.reason`` or ``<stage>_<status>``);
    ``agent_failed`` when the vocabulary has no such reason."""
    try:
        return RejectReason(reason)
    except ValueError:
        return RejectReason.AGENT_FAILED

"""What mining one repository gives: ``RepoResult``, with each rejected candidate's ``Rejected`` reason and detail."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from taskforge.errors import TaskforgeError
from taskforge.task import RejectReason, Task, reject_reason

__all__ = ["Rejected", "RepoResult", "Stages"]


@dataclass(kw_only=True, slots=True)
class RepoResult:
    """What mining one repository gave."""

    source: str
    tasks: list[Task] = field(default_factory=list)
    candidates: int = 0
    attempted: int = 0
    """Candidates validated: what ``max_attempts`` bounds."""
    refused: int = 0
    """Candidates the removal agent refused before any run (``removal_not_applicable``: a function
    that runs while the package imports, a symbol still used elsewhere). They cost no test run and
    no attempt; they are listed among the rejections."""
    rejections: Counter[str] = field(default_factory=Counter)
    """Rejected candidates by reason."""
    rejected: list[dict[str, str]] = field(default_factory=list)
    """Every rejected candidate: its target, strategy, reason and detail."""
    stage_s: dict[str, float] = field(default_factory=dict)
    runs: int = 0
    containers: int = 0
    tests: int = 0
    """Tests the baseline's first run reported."""
    passing: int = 0
    """Tests that passed in every baseline run."""
    seed_dependent: int = 0
    """Tests whose id or outcome differed between baseline runs under different hash seeds."""
    date_dependent: int = 0
    """Tests whose id holds the date or time of the run (another day, other ids)."""
    load_sensitive: int = 0
    """Tests whose outcome changed when the baseline ran beside busy processes (timing tests)."""
    selection_sensitive: int = 0
    """Tests that passed in the whole suite but not when selected by id, as scoring selects them."""
    marked_flaky: int = 0
    """Tests the project marks flaky itself (left out of both lists, like the two above)."""
    plugins_off: list[str] = field(default_factory=list)
    """Installed pytest plugins switched off because they do not fit the environment's pytest."""
    ignored: list[str] = field(default_factory=list)
    """Test modules that could not be collected in the unmodified project (left out of every run)."""
    run_timeout_s: float = 0.0
    """The bound on each validation run, from the baseline's duration (``baseline.run_timeout``)."""
    fork_server: str = ""
    """Whether validation runs forked from a server (``used``), and why not otherwise."""

    def reject(self, target: str, strategy: str, rejected: Rejected) -> None:
        self.rejections[str(rejected.reason)] += 1
        self.rejected.append({"target": target, "strategy": strategy, "reason": str(rejected.reason),
                              "detail": rejected.detail})


@dataclass(frozen=True, slots=True)
class Rejected:
    """Why a candidate did not become a task: a reason from the fixed vocabulary
    (``taskforge.task.RejectReason``), and a detail that says what exactly (the first failing test
    and its message, the audit's file and match)."""

    reason: RejectReason
    detail: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "reason", RejectReason(self.reason))  # a string outside the vocabulary raises

    @classmethod
    def of_error(cls, err: TaskforgeError) -> Rejected:
        """A removal agent's or statement writer's error: its reason, if the vocabulary has it
        (``agent_failed`` otherwise, the detail then keeping the error's own reason)."""
        reason = reject_reason(err.reason)
        return cls(reason, str(err) if reason == err.reason else f"{err} [{err.reason}]")


class Stages:
    def __init__(self, result: RepoResult) -> None:
        self.result = result

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.result.stage_s[name] = self.result.stage_s.get(name, 0.0) + time.monotonic() - started

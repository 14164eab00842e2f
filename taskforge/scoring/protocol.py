"""What a trainer needs of a scorer: one call, met by the local scorer and by the HTTP client.

    scorer: RewardScorer = Scorer(backend=open_backend("docker"))   # in process, own sandboxes
    scorer: RewardScorer = RewardClient("http://host:8088")          # a `taskforge serve` elsewhere
    result = scorer.score(task, patch, candidate_id="policy-step-12")
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from taskforge.scoring.rewards import RewardMode, RewardResult
from taskforge.task import Task

__all__ = ["RewardScorer"]


@runtime_checkable
class RewardScorer(Protocol):
    """Scores a candidate patch against a task's hidden tests (``Scorer`` and ``RewardClient``)."""

    def score(self, task: Task, patch: str, *, candidate_id: str = "",
              mode: RewardMode | None = None) -> RewardResult: ...

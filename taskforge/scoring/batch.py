"""Scoring a set of candidates into a reward folder, resumably: what ``taskforge score`` does.

The candidates are predictions (SWE-bench's ``instance_id``, ``model_patch``,
``model_name_or_path``), each task's gold patch (candidate ``gold``) and the empty patch
(candidate ``empty``). Each is stored under its reward key (``REWARDS.key_of``: instance_id and
candidate id); a key the folder already holds is not scored again, so an interrupted run resumes,
unless its row was scored against another version of the task (``task_sha256`` is not the task's
:attr:`~taskforge.task.Task.grading_sha256`: the source was mined again, say). Such a candidate
is scored again, and its new row replaces the old one (``RewardSink``: the old row is taken out
with ``DatasetWriter.drop``, recorded as a retraction).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from taskforge.datasets import REWARDS
from taskforge.sandbox import SandboxBackend
from taskforge.scoring.rewards import SCORER_VERSION, RewardMode, RewardResult
from taskforge.scoring.scorer import Scorer
from taskforge.scoring.server import RewardSink, candidate_key
from taskforge.task import Task

__all__ = ["Candidate", "ScorePlan", "plan_candidates", "score_candidates"]


@dataclass(frozen=True, slots=True)
class Candidate:
    instance_id: str
    patch: str
    candidate_id: str

    @property
    def key(self) -> str:
        return REWARDS.key_of({"instance_id": self.instance_id, "candidate_id": self.candidate_id})


@dataclass(kw_only=True, slots=True)
class ScorePlan:
    """What a run will score, and what it leaves out and why."""

    work: list[Candidate] = field(default_factory=list)
    unknown: list[tuple[str, str]] = field(default_factory=list)
    """(instance_id, candidate) of predictions for tasks the folder does not hold."""
    already: int = 0
    """Candidates the reward folder holds already, scored against the task as it is."""
    stale: list[str] = field(default_factory=list)
    """Keys of stored rows scored against another version of their task: scored again."""
    repeated: int = 0
    """Predictions that repeat an (instance_id, candidate) pair: only the first is scored."""


def plan_candidates(tasks: Mapping[str, Task], predictions: Iterable[Mapping[str, str]] = (), *, gold: bool = False,
                    empty: bool = False, stored: Mapping[str, str] | None = None) -> ScorePlan:
    """The candidates to score, in the order given (predictions, then gold, then empty), less
    repeats and those ``stored`` holds (reward key → the ``task_sha256`` it was scored against)
    for the task as it is; sorted by image, so that one image at a time keeps the container pool
    warm."""
    stored = stored or {}
    versions = {instance_id: task.grading_sha256 for instance_id, task in tasks.items()}
    plan = ScorePlan()
    candidates: list[Candidate] = []
    for row in predictions:
        if row["instance_id"] not in tasks:
            plan.unknown.append((row["instance_id"], row["model_name_or_path"]))
            continue
        candidates.append(Candidate(row["instance_id"], row["model_patch"],
                                    candidate_key(row["model_name_or_path"], row["model_patch"])))
    for flag, name in ((gold, "gold"), (empty, "empty")):
        if flag:
            candidates += [Candidate(t.instance_id, t.patch if name == "gold" else "", name) for t in tasks.values()]
    seen: set[str] = set()
    for candidate in candidates:
        if candidate.key in stored and stored[candidate.key] == versions[candidate.instance_id]:
            plan.already += 1
        elif candidate.key in seen:
            plan.repeated += 1
        else:
            seen.add(candidate.key)
            plan.work.append(candidate)
            if candidate.key in stored:
                plan.stale.append(candidate.key)
    plan.work.sort(key=lambda c: tasks[c.instance_id].image_name)
    return plan


def score_candidates(
    out_dir: Path,
    tasks: Mapping[str, Task],
    plan_for: Callable[[Mapping[str, str]], ScorePlan],
    *,
    backend: SandboxBackend,
    mode: RewardMode = "binary",
    concurrency: int = 4,
    timeout_s: float = 600.0,
    on_plan: Callable[[ScorePlan], None] = lambda _: None,
    on_result: Callable[[RewardResult], None] = lambda _: None,
) -> tuple[list[RewardResult], int]:
    """Score ``plan_for(stored)`` into the reward folder ``out_dir``, ``stored`` being the key →
    ``task_sha256`` of every row it holds; each result is stored as it comes, in place of a stale
    row of its key. Returns the results and the number of rows the folder holds after."""
    recipe = {"command": "score", "mode": mode, "scorer_version": SCORER_VERSION}
    with RewardSink(out_dir, recipe=recipe, prefix="rewards-score", flush_rows=256, flush_s=60.0) as sink:
        plan = plan_for(dict(sink.versions))
        on_plan(plan)

        def stored(result: RewardResult) -> None:
            sink.add(result)
            on_result(result)

        with Scorer(backend=backend, timeout_s=timeout_s, concurrency=concurrency, mode=mode) as scorer:
            results = scorer.score_many(((tasks[c.instance_id], c.patch, c.candidate_id) for c in plan.work),
                                        on_result=stored)
    return results, len(sink.keys)  # closing the sink wrote the last rows

"""The reward sink that ``taskforge score`` and ``taskforge serve`` store rows through: a row of a
key already stored is a repeat, unless the stored one scored another version of the task."""

from __future__ import annotations

from pathlib import Path

from taskforge.datasets import read_manifest, read_rows
from taskforge.scoring.rewards import RewardResult
from taskforge.scoring.server import RewardSink


def _result(candidate: str, reward: float, version: str, status: str = "ok") -> RewardResult:
    return RewardResult(instance_id="demo__body-f-0123456789", candidate_id=candidate, reward=reward, mode="binary",
                        status=status, patch=f"patch of {candidate}", image_name="taskforge-env-demo:1",  # type: ignore[arg-type]
                        task_sha256=version)


def test_a_row_of_another_task_version_is_replaced_and_a_repeat_is_skipped(tmp_path: Path) -> None:
    def sink() -> RewardSink:
        return RewardSink(tmp_path, recipe={"command": "serve"}, prefix="rewards-serve", flush_rows=1)

    with sink() as first:
        first.add(_result("rollout-1", 0.0, "a" * 64))
        first.add(_result("rollout-2", 1.0, "a" * 64))
    with sink() as again:  # reopened: it knows each stored row's version
        assert again.versions == {"demo__body-f-0123456789\0rollout-1": "a" * 64,
                                  "demo__body-f-0123456789\0rollout-2": "a" * 64}
        again.add(_result("rollout-1", 1.0, "b" * 64))  # the task was mined again: replaced
        again.add(_result("rollout-2", 0.0, "a" * 64))  # the same version: a repeat, skipped
        assert (again.written, again.skipped, again.replaced) == (1, 1, 1)
    rows = {r["candidate_id"]: (r["reward"], r["task_sha256"]) for r in read_rows(tmp_path)}
    assert rows == {"rollout-1": (1.0, "b" * 64), "rollout-2": (1.0, "a" * 64)}
    [retraction] = read_manifest(tmp_path).retracted
    assert retraction.reason == "1 row(s) scored again against another version of their task"


def test_a_row_the_infrastructure_kept_from_being_scored_is_scored_again(tmp_path: Path) -> None:
    """A resumed run scores an ``infra_error`` row again (a held-out project's image could not be
    rebuilt in one session and was in the next; its rows stayed ``infra_error`` in every resume)."""
    def sink() -> RewardSink:
        return RewardSink(tmp_path, recipe={"command": "score"}, prefix="rewards-score", flush_rows=1)

    with sink() as first:
        first.add(_result("gold", 0.0, "a" * 64, status="infra_error"))
        first.add(_result("empty", 0.0, "a" * 64))
    with sink() as again:
        assert again.versions["demo__body-f-0123456789\0gold"] != "a" * 64  # not the task's: scored again
        assert again.versions["demo__body-f-0123456789\0empty"] == "a" * 64
        again.add(_result("gold", 1.0, "a" * 64))
        assert (again.written, again.replaced) == (1, 1)
    rows = {r["candidate_id"]: (r["status"], r["reward"]) for r in read_rows(tmp_path)}
    assert rows == {"gold": ("ok", 1.0), "empty": ("ok", 0.0)}
    [retraction] = read_manifest(tmp_path).retracted
    assert retraction.reason == "1 infra_error row(s) scored again"

"""``taskforge score`` on the sample tasks, as a user runs it: SWE-bench predictions (gold, empty,
and one for a task that does not exist) plus the gold candidate of every task, scored by the real
scorer into reward shards; a second run resumes and has nothing left to score."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from taskforge import datasets
from taskforge.datasets import (
    read_manifest,
    read_tasks,
)

pytestmark = pytest.mark.docker



@pytest.fixture(scope="module")
def sample(local_sample) -> Path:  # type: ignore[no-untyped-def]
    return local_sample[0]


def _score(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "taskforge.cli", "score", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "TASKFORGE_CACHE": str(cache)}, check=False)


def test_score_writes_reward_rows_reports_unknown_tasks_and_resumes(sample: Path, session_cache: Path,
                                                                    tmp_path: Path) -> None:
    first, second, _ = tasks = read_tasks(sample)
    predictions = tmp_path / "predictions.jsonl"
    predictions.write_text("".join(json.dumps(p) + "\n" for p in [
        {"instance_id": first.instance_id, "model_patch": first.patch, "model_name_or_path": "model-a"},
        {"instance_id": second.instance_id, "model_patch": "", "model_name_or_path": "model-a"},
        {"instance_id": "no-such-task", "model_patch": first.patch, "model_name_or_path": "model-a"},
    ]))
    out = tmp_path / "rewards"
    args = ("--tasks", str(sample), "--predictions", str(predictions), "--out", str(out), "--concurrency", "3")

    run = _score(session_cache, *args, "--gold")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "unknown instance_id 'no-such-task' (candidate 'model-a')" in run.stderr
    assert "5/5" in run.stderr.splitlines()[-1]  # the progress line, finished
    summary = run.stdout.splitlines()
    assert summary[0] == "scored 5 candidate(s) for 3 task(s): mean reward 0.800"
    assert summary[1] == "status: ok 5"
    assert "  gold: 3 scored, mean reward 1.000" in summary and "  model-a: 2 scored, mean reward 0.500" in summary
    assert "unknown instance_id: 1; already scored: 0; scored again (task changed): 0; repeated: 0" in summary
    assert summary[-1] == f"{out}: 5 reward rows"

    rows = {(r["instance_id"], r["candidate_id"]): r for r in datasets.open(out).to_table().to_pylist()}
    assert {key: (row["reward"], row["status"]) for key, row in rows.items()} == {
        (first.instance_id, "model-a"): (1.0, "ok"), (second.instance_id, "model-a"): (0.0, "ok"),
        **{(t.instance_id, "gold"): (1.0, "ok") for t in tasks}}
    gold = rows[(first.instance_id, "model-a")]
    assert gold["FAIL_TO_PASS_passed"] == list(first.FAIL_TO_PASS) and gold["PASS_TO_PASS_failed"] == []
    assert gold["patch"] == first.patch and gold["mode"] == "binary" and not gold["tampered"]
    empty = rows[(second.instance_id, "model-a")]
    assert empty["FAIL_TO_PASS_failed"] == list(second.FAIL_TO_PASS) and empty["FAIL_TO_PASS_passed"] == []
    assert read_manifest(out).recipe == {"command": "score", "mode": "binary", "scorer_version": "2"}

    again = _score(session_cache, *args, "--gold")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "5 candidate(s) already scored" in again.stderr
    assert again.stdout.splitlines()[0] == "scored 0 candidate(s) for 0 task(s): mean reward 0.000"
    assert again.stdout.splitlines()[-1] == f"{out}: 5 reward rows"
    assert datasets.open(out).to_table().to_pylist() == list(rows.values())

    other_mode = _score(session_cache, *args, "--mode", "partial")
    assert other_mode.returncode == 1
    assert other_mode.stderr.strip().splitlines()[-1].endswith("[recipe_mismatch]")


def test_score_rebuilds_an_image_the_rows_name_but_this_machine_lacks(sample: Path, session_cache: Path,
                                                                      backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A dataset travels without its images: a row whose image_name this Docker engine does not
    have is scored after its environment is rebuilt from the row's source and tagged with that
    name; a row whose source cannot be fetched is an infra_error that says why."""
    import uuid
    from dataclasses import replace

    from taskforge.datasets import TASKS, DatasetWriter, run_versions

    first, second, _ = read_tasks(sample)
    missing = f"taskforge-env-missing:{uuid.uuid4().hex[:12]}"
    unbuildable = f"taskforge-env-unbuildable:{uuid.uuid4().hex[:12]}"
    folder = tmp_path / "tasks"
    with DatasetWriter(folder, kind=TASKS, recipe=read_manifest(sample).recipe, versions=run_versions()) as writer:
        writer.write([replace(first, image_name=missing).to_row(),
                      replace(second, image_name=unbuildable, source=str(tmp_path / "no-such-repository")).to_row()],
                     prefix="tasks-moved")
    assert not backend.image_exists(missing)
    try:
        run = _score(session_cache, "--tasks", str(folder), "--out", str(tmp_path / "rewards"), "--gold")
        assert run.returncode == 0, run.stderr[-3000:]
        rows = {r["instance_id"]: r for r in datasets.open(tmp_path / "rewards").to_table().to_pylist()}
        assert (rows[first.instance_id]["status"], rows[first.instance_id]["reward"]) == ("ok", 1.0)
        assert backend.image_exists(missing)
        broken = rows[second.instance_id]
        assert (broken["status"], broken["reward"]) == ("infra_error", 0.0)
        assert f"the image {unbuildable} is missing and could not be rebuilt" in broken["detail"]
        assert "[image_missing]" in broken["detail"]
    finally:
        backend.remove_image(missing)

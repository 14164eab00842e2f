"""Harder tasks while training runs, without Docker: the curriculum's saturated repositories become
request records in the task folder (once per repository and task count, never while one is open),
and tasks a miner adds to the folder are found and taken in; requests are claimed by exactly one
follower and a dead follower's claims go back to pending."""

from __future__ import annotations

from pathlib import Path

import pytest

from taskforge import Task
from taskforge.datasets import TASKS, DatasetWriter, run_versions
from taskforge.datasets.requests import (
    MineRequest,
    claim,
    done_requests,
    finish,
    follow_lock,
    open_requests,
    pending_requests,
    request_states,
    requeue_claimed,
    submit_request,
)
from taskforge.datasets.testing import task_rows
from taskforge.errors import TaskforgeError
from trainer.rl.config import CurriculumConfig
from trainer.rl.curriculum import Curriculum
from trainer.rl.growth import TaskGrowth, saturated_repositories

RECIPE = {"command": "mine", "config": {"seed": 0}}


def folder_with(tmp_path: Path, rows: list[dict[str, object]]) -> Path:
    folder = tmp_path / "tasks"
    with DatasetWriter(folder, kind=TASKS, recipe=RECIPE, versions=run_versions()) as writer:
        writer.write(rows, prefix="tasks-demo-s0")
    return folder


def test_saturated_repositories_need_every_task_seen_and_a_high_mean(tmp_path: Path) -> None:
    rows = task_rows(6, repos=2)  # demo0: rows 0, 2, 4; demo1: rows 1, 3, 5
    tasks = {r["instance_id"]: Task.from_row(r) for r in rows}
    curriculum = Curriculum(sorted(tasks), window=2)
    demo0 = [i for i, t in tasks.items() if t.repo == "demo0"]
    demo1 = [i for i, t in tasks.items() if t.repo == "demo1"]
    for instance_id in demo0[:2]:
        curriculum.update(instance_id, [1.0, 1.0])
    assert saturated_repositories(curriculum, tasks, threshold=0.9, min_seen=1) == {}  # one task unseen
    curriculum.update(demo0[2], [1.0, 0.5])
    assert saturated_repositories(curriculum, tasks, threshold=0.9, min_seen=1) == {"demo0": pytest.approx(0.9166, 1e-3)}
    assert saturated_repositories(curriculum, tasks, threshold=0.95, min_seen=1) == {}
    assert saturated_repositories(curriculum, tasks, threshold=0.9, min_seen=4) == {}
    for instance_id in demo1:
        curriculum.update(instance_id, [0.0, 1.0])
    assert set(saturated_repositories(curriculum, tasks, threshold=0.9, min_seen=1)) == {"demo0"}


def test_growth_asks_once_and_takes_in_what_the_folder_gains(tmp_path: Path) -> None:
    rows = task_rows(4, repos=2)
    folder = folder_with(tmp_path, rows)
    tasks = {r["instance_id"]: Task.from_row(r) for r in rows}
    curriculum = Curriculum(sorted(tasks), window=2, high=0.9)
    config = CurriculumConfig(high=0.9, window=2, request_harder=True, request_tasks=3, request_difficulty="hard")
    growth = TaskGrowth(config=config, targets=[str(folder)])
    assert growth.ask(curriculum, tasks, step=1) == []  # nothing seen yet
    for instance_id, task in tasks.items():
        curriculum.update(instance_id, [1.0, 1.0] if task.repo == "demo0" else [0.0, 0.0])
    (request,) = growth.ask(curriculum, tasks, step=2)
    assert (request.repo, request.source, request.max_tasks, request.difficulty) == ("demo0", "pypi:demo0==1.0", 3, "hard")
    assert request.strategies == ("feature", "module") and request.requested_by == "trainer step 2"
    assert "solve rate 1.00 over its 2 task(s)" in request.reason
    assert [r.request_id for r in pending_requests(folder)] == [request.request_id]
    assert growth.ask(curriculum, tasks, step=3) == []  # one is open
    # A miner serves it; the repository's task count has not changed: no second request.
    assert claim(folder, request)
    finish(folder, request, {"tasks": 2})
    assert growth.ask(curriculum, tasks, step=4) == []
    assert growth.refresh(step=4, known=tasks) == []  # the folder did not change
    # The miner's tasks land in the folder (as `taskforge mine --follow` writes them).
    more = task_rows(2, repos=2, start=100)
    with DatasetWriter(folder, kind=TASKS, recipe=RECIPE, versions=run_versions()) as writer:
        writer.write(more, prefix="tasks-demo-s0")
    found = growth.refresh(step=5, known=tasks)
    assert [t.instance_id for t in found] == [r["instance_id"] for r in more]
    assert curriculum.add([t.instance_id for t in found]) == [r["instance_id"] for r in more]
    assert curriculum.add([found[0].instance_id]) == []
    assert all(curriculum.status(t.instance_id) == "unseen" for t in found)
    tasks.update({t.instance_id: t for t in found})
    assert growth.refresh(step=6, known=tasks) == []
    # Saturated again with more tasks than when it was asked: a new request.
    for t in found:
        curriculum.update(t.instance_id, [1.0, 1.0])
    again = growth.ask(curriculum, tasks, step=7)
    assert [t.repo for t in found] == ["demo0", "demo1"]  # demo1's old tasks still fail: not saturated
    assert [r.repo for r in again] == ["demo0"]
    state = growth.state_dict()
    resumed = TaskGrowth(config=config, targets=[str(folder)])
    resumed.load_state_dict(state)
    assert resumed.asked == growth.asked


def test_requests_are_claimed_once_and_requeued_after_a_dead_follower(tmp_path: Path) -> None:
    folder = folder_with(tmp_path, task_rows(1))
    first = submit_request(folder, MineRequest(repo="demo0", source="pypi:demo0==1.0", difficulty=(0.3, 0.9)))
    second = submit_request(folder, MineRequest(repo="demo1", source="pypi:demo1==1.1", max_tasks=2))
    assert [r.request_id for r in pending_requests(folder)] == sorted([first.request_id, second.request_id])
    assert pending_requests(folder)[0].difficulty in ((0.3, 0.9), None)
    assert claim(folder, first) and not claim(folder, first)
    assert [r.repo for r in open_requests(folder, repo="demo0")] == ["demo0"]
    with follow_lock(folder):
        with pytest.raises(TaskforgeError, match="already follows") as info, follow_lock(folder):
            pass
        assert info.value.reason == "dataset_locked"
        assert requeue_claimed(folder) == [first.request_id]  # its follower died holding it
    assert sorted(request_states(folder)["pending"]) == sorted([first.request_id, second.request_id])
    assert claim(folder, second)
    finish(folder, second, {"tasks": 0, "failure": "no candidates"})
    (done,) = done_requests(folder)
    assert done["request_id"] == second.request_id and done["outcome"]["failure"] == "no candidates"
    assert request_states(folder)["claimed"] == []
    with pytest.raises(ValueError, match="max_tasks"):
        MineRequest(repo="x", source="y", max_tasks=0)

"""Harder tasks created while training runs, end to end on the CPU, in fresh processes.

The fixture ``fmt`` (tests/fixtures/projects) is mined with the ``body`` strategy only. Then:

- a request for harder tasks in the folder is served by ``taskforge mine --follow DIR --once``: new
  ``feature`` tasks of the same repository land under the manifest, the request's record says so;
- (slow) an RL run whose scripted policy replays every task's gold patch (``[rl.generator] kind =
  "gold"``) saturates the first tasks; its curriculum writes a request, a follower running beside
  it mines harder tasks, and the run takes them in and samples them in a later step, without a
  restart.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from taskforge.datasets import read_manifest, read_tasks
from taskforge.datasets.requests import MineRequest, done_requests, request_states, submit_request

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
FMT = ROOT / "tests" / "fixtures" / "projects" / "fmt"


def _cli(*args: str, cache: Path, timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "taskforge.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "TASKFORGE_CACHE": str(cache)}, check=False)


@pytest.fixture
def easy(tmp_path: Path, session_cache: Path, base_image) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    """(the project, a task folder of its body tasks)."""
    project = tmp_path / "fmt"
    shutil.copytree(FMT, project)
    out = tmp_path / "tasks"
    mined = _cli("mine", str(project), "--out", str(out), "--strategies", "body", "--max-tasks", "2", cache=session_cache)
    assert mined.returncode == 0, mined.stdout[-2000:] + mined.stderr[-3000:]
    tasks = read_tasks(out)
    assert len(tasks) == 2 and {t.strategy for t in tasks} == {"body"}
    return project, out


def test_a_follower_mines_what_a_request_asks_into_the_folder(easy, session_cache: Path) -> None:  # type: ignore[no-untyped-def]
    project, out = easy
    before = {t.instance_id for t in read_tasks(out)}
    request = submit_request(out, MineRequest(repo="fmt", source=str(project), strategies=("feature",), difficulty=None,
                                              max_tasks=2, reason="test"))
    served = _cli("mine", "--follow", str(out), "--once", "--address", "inline", "--poll", "0.5", cache=session_cache)
    assert served.returncode == 0, served.stdout[-2000:] + served.stderr[-3000:]
    assert "served 1 request(s)" in served.stdout
    (done,) = done_requests(out)
    assert done["request_id"] == request.request_id
    assert done["outcome"]["tasks"] >= 1, done["outcome"]
    assert request_states(out) == {"pending": [], "claimed": [], "done": [request.request_id]}
    added = [t for t in read_tasks(out) if t.instance_id not in before]
    assert {t.instance_id for t in added} == set(done["outcome"]["instance_ids"])
    for task in added:
        assert task.strategy == "feature" and task.repo == "fmt"
        assert task.removed_symbols >= 2 and task.removed_files >= 2, (task.removed, task.patch[:2000])
    assert max(t.difficulty for t in added) > max(t.difficulty for t in read_tasks(out) if t.instance_id in before)
    manifest = read_manifest(out)
    assert f"request:{request.request_id}" in manifest.done
    assert manifest.recipe["config"]["candidates"]["strategies"] == ["body"]  # the folder's own recipe stays


@pytest.mark.slow
def test_an_rl_run_asks_for_harder_tasks_and_trains_on_them(easy, session_cache: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, out = easy
    env = {**os.environ, "TASKFORGE_CACHE": str(session_cache)}
    follower = subprocess.Popen([sys.executable, "-m", "taskforge.cli", "mine", "--follow", str(out), "--address",
                                 "inline", "--poll", "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                text=True)
    run = tmp_path / "run"
    trainer = subprocess.Popen(
        [sys.executable, "-m", "trainer.cli", "--recipe", str(ROOT / "recipes/train/tiny-rl-cpu.toml"),
         "--set", f'output_dir="{run}"', "--set", "train.steps=40", "--set", "model.max_seq_len=1024",
         "--set", "rl.max_turns=4", "--set", "rl.tasks_per_step=1", "--set", "rl.rollouts_per_task=1",
         "--set", 'rl.generator.kind="gold"', "--set", "rl.curriculum.request_harder=true",
         "--set", "rl.curriculum.window=1", "--set", 'rl.curriculum.request_difficulty=""',
         "--set", 'rl.curriculum.request_strategies=["feature"]', "--set", "rl.curriculum.request_tasks=2",
         "--set", "checkpoint.every=100", "--set", f'rl.tasks=["{out}"]'],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, cwd=tmp_path)
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 1500
    lines: list[dict] = []  # type: ignore[type-arg]
    try:
        while time.monotonic() < deadline and trainer.poll() is None:
            time.sleep(5)
            lines = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
            added = {t for line in lines for t in line["new_tasks"]}
            if added and any(set(line["tasks"]) & added for line in lines):
                break
    finally:
        trainer.terminate()
        follower.terminate()
        trainer_output = trainer.communicate(timeout=60)[0]
        follower_output = follower.communicate(timeout=60)[0]
    assert lines, trainer_output[-3000:]
    # The gold replay solves every task: the repository saturates and the run asks for more.
    assert all(r == 1.0 for line in lines for r in line["rewards"]), trainer_output[-3000:]
    asked = [(line["step"], line["requests"]) for line in lines if line["requests"]]
    assert asked, trainer_output[-3000:]
    added_at = [(line["step"], line["new_tasks"]) for line in lines if line["new_tasks"]]
    assert added_at, follower_output[-3000:]
    first_request, first_added = asked[0][0], added_at[0][0]
    assert first_request < first_added
    new = set(added_at[0][1])
    sampled = [line["step"] for line in lines if set(line["tasks"]) & new]
    assert sampled and sampled[0] > first_added, (sampled, first_added)  # taken in after the step's rollouts
    tasks = {t.instance_id: t for t in read_tasks(out)}
    assert all(tasks[i].strategy == "feature" for i in new)
    (done,) = done_requests(out)
    assert done["request_id"] == asked[0][1][0] and done["outcome"]["tasks"] >= 1

"""``taskforge mine`` writes a dataset folder through the manifest writer, and running it again
resumes: finished sources are skipped, no task is written twice, another recipe is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from taskforge.datasets import read_manifest, read_tasks, verify

pytestmark = pytest.mark.docker

SOURCE = "pypi:iniconfig==2.3.1"


def _mine(out: Path, cache: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "taskforge.cli", "mine", SOURCE, "--out", str(out), "--max-tasks", "1", *extra],
        capture_output=True, text=True, timeout=900, env={**os.environ, "TASKFORGE_CACHE": str(cache)}, check=False,
    )


def test_mine_records_its_run_and_a_second_run_resumes(tmp_path: Path, session_cache: Path, base_image) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "tasks"
    first = _mine(out, session_cache)
    assert first.returncode == 0, first.stderr[-3000:]
    manifest = verify(out)
    tasks = read_tasks(out)
    assert len(tasks) == manifest.rows == 1
    assert manifest.recipe["command"] == "mine" and manifest.recipe["config"]["max_tasks"] == 1
    versions = manifest.runs[0].versions
    assert versions["base_image"] == base_image.tag and versions["base_image_id"] == base_image.image_id
    assert manifest.done[SOURCE]["tasks"] == 1
    assert [s.name for s in manifest.shards] == [f"tasks-iniconfig-{tasks[0].source_commit[:12]}-s0-00000.parquet"]

    started = time.monotonic()
    second = _mine(out, session_cache)
    assert second.returncode == 0, second.stderr[-3000:]
    assert time.monotonic() - started < 60  # nothing was mined again
    assert f"{SOURCE}: already mined" in second.stderr
    again = read_manifest(out)
    assert len(again.runs) == 2 and again.shards == manifest.shards
    assert read_tasks(out) == tasks
    summary = json.loads((out / "mine-summary.json").read_text())
    assert summary["totals"]["tasks"] == 1 and [r["source"] for r in summary["repositories"]] == [SOURCE]

    other = _mine(out, session_cache, "--seed", "1")
    assert other.returncode == 1
    assert other.stderr.strip().splitlines()[-1].endswith("[recipe_mismatch]")

    # --again mines a finished source once more (after an upgrade): the same task is not written twice.
    stray = _mine(out, session_cache, "--again", "pypi:nothing==1.0")
    assert stray.returncode == 2 and "not a source of this run" in stray.stderr
    redo = _mine(out, session_cache, "--again", SOURCE)
    assert redo.returncode == 0, redo.stderr[-3000:]
    assert f"{SOURCE}: mined before (1 tasks); mining it again" in redo.stderr
    assert f"{SOURCE}: already mined" not in redo.stderr
    assert read_tasks(out) == tasks and len(read_manifest(out).runs) == 3

    # --replace retracts what the earlier runs wrote for the source first: its shard leaves the
    # manifest (kept under `retracted`, with the reason), and the new run writes the task afresh.
    alone = _mine(out, session_cache, "--replace")
    assert alone.returncode == 2 and "--again" in alone.stderr
    replaced = _mine(out, session_cache, "--again", SOURCE, "--replace")
    assert replaced.returncode == 0, replaced.stderr[-3000:]
    assert f"{SOURCE}: retracted 1 task(s) in 1 shard(s) written before" in replaced.stderr
    final = verify(out)
    [retraction] = final.retracted
    assert retraction.shard == manifest.shards[0] and retraction.reason == f"mined again with --replace: {SOURCE}"
    assert not (out / retraction.shard.name).exists()
    assert [s.name for s in final.shards] == [retraction.shard.name.replace("-00000", "-00001")]
    assert [t.instance_id for t in read_tasks(out)] == [t.instance_id for t in tasks]
    assert final.done[SOURCE]["tasks"] == 1 and final.done[SOURCE]["shards"] == [final.shards[0].name]
    assert retraction.done == (SOURCE,)

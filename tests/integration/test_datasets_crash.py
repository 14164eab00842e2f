"""A writer process killed with SIGKILL leaves a valid dataset, and running it again completes it.

The writer runs in a real subprocess (``WRITER`` below) and is killed with SIGKILL: no handler,
no ``finally``, no flush runs. Rows come from a generator, as they come from mining, so the
writer is in the middle of a shard whenever the generator is slow.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from taskforge.datasets import read_manifest, read_rows, verify
from taskforge.datasets.reader import check_shard_file, visible_shards
from taskforge.datasets.schema import TASKS
from taskforge.datasets.testing import task_rows

WRITER = """
import sys, time
from pathlib import Path
from taskforge.datasets import TASKS, DatasetWriter, WriterConfig, run_versions
from taskforge.datasets.testing import task_rows

directory, total, pause_at = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rows_per_shard, row_group_rows = int(sys.argv[4]), int(sys.argv[5])


def rows():
    for index in range(total):
        if index == pause_at:
            print("paused", flush=True)
            time.sleep(3600)  # the next row is slow to come: the writer waits inside a shard
        yield task_rows(1, start=index)[0]


config = WriterConfig(rows_per_shard=rows_per_shard, row_group_rows=row_group_rows)
with DatasetWriter(directory, kind=TASKS, recipe={"test": "crash"}, versions=run_versions(), config=config) as w:
    print("started", flush=True)
    result = w.write(rows(), prefix="tasks-crash")
print("done", result.written, result.skipped, flush=True)
"""


def _start(directory: Path, *, total: int, pause_at: int = -1, rows_per_shard: int = 40,
           row_group_rows: int = 8) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(directory), str(total), str(pause_at), str(rows_per_shard),
         str(row_group_rows)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _kill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    proc.stderr.close()


def _assert_consistent(directory: Path) -> set[str]:
    """Whatever the moment of the kill: the manifest is valid, every listed shard verifies, and a
    visible shard that is not listed yet (killed between its rename and the manifest) is whole.
    Returns the instance ids of the listed shards."""
    manifest = read_manifest(directory)
    listed = {s.name for s in manifest.shards}
    for path in visible_shards(directory):
        if path.name not in listed:
            check_shard_file(path, TASKS)
            assert pq.read_table(path).num_rows > 0
    ids = set()
    for shard in manifest.shards:
        check_shard_file(directory / shard.name, TASKS, rows=shard.rows)
        ids.update(pq.read_table(directory / shard.name, columns=["instance_id"]).column(0).to_pylist())
    assert len(ids) == manifest.rows  # no duplicates
    return ids


def test_sigkill_in_the_middle_of_a_shard_leaves_no_partial_shard_and_a_rerun_completes(tmp_path: Path) -> None:
    expected = task_rows(100)
    proc = _start(tmp_path, total=100, pause_at=60)  # shard 0 holds rows 0-39; shard 1 has 2 row groups out
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    assert proc.stdout.readline().strip() == "paused"
    partial = list(tmp_path.glob(".tasks-crash-00001.parquet.*.tmp"))
    assert len(partial) == 1 and partial[0].stat().st_size > 4  # the writer is inside shard 1
    _kill(proc)

    assert [p.name for p in visible_shards(tmp_path)] == ["tasks-crash-00000.parquet"]
    assert sorted(p.name for p in tmp_path.glob("*.parquet")) == ["tasks-crash-00000.parquet"]  # what a glob sees
    manifest = verify(tmp_path)
    assert [(s.name, s.rows) for s in manifest.shards] == [("tasks-crash-00000.parquet", 40)]
    assert read_rows(tmp_path) == expected[:40]

    rerun = _start(tmp_path, total=100)
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err
    assert out.split() == ["started", "done", "60", "40"]
    assert read_rows(tmp_path) == expected
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # the killed writer's temporary is gone
    assert [s.run for s in read_manifest(tmp_path).shards] == [0, 1, 1]


def test_repeated_kills_at_random_moments_then_a_full_run_gives_exactly_the_rows(tmp_path: Path) -> None:
    total = 3000
    rng = random.Random(7)
    kills, inside_a_shard, listed = 0, 0, []
    for _ in range(5):
        proc = _start(tmp_path, total=total, rows_per_shard=150, row_group_rows=25)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "started"
        time.sleep(rng.uniform(0.05, 0.4))
        if proc.poll() is not None:  # it finished before the kill: nothing left to interrupt
            proc.communicate()
            break
        _kill(proc)
        kills += 1
        inside_a_shard += bool(list(tmp_path.glob(".tasks-crash-*.parquet.*.tmp")))
        listed.append(len(_assert_consistent(tmp_path)))
    assert kills >= 3 and inside_a_shard >= 2, (kills, inside_a_shard, listed)
    done = _start(tmp_path, total=total, rows_per_shard=150, row_group_rows=25)
    out, err = done.communicate(timeout=300)
    assert done.returncode == 0, err
    assert out.split()[:2] == ["started", "done"] and int(out.split()[3]) >= listed[-1]  # skipped what was there
    assert sorted(row["instance_id"] for row in read_rows(tmp_path)) == sorted(r["instance_id"] for r in task_rows(total))
    assert read_manifest(tmp_path).rows == total
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]

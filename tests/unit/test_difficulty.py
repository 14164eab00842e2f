"""The difficulty record: computed from the row, the same for mined and migrated rows; bands for
recipes; ``taskforge migrate`` (atomic, resumable) and ``taskforge rate`` (solve rates from reward rows)
in fresh processes, as a user runs them; the distributions ``taskforge inspect`` prints."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from taskforge.datasets import (
    REWARDS,
    TASKS,
    DatasetKind,
    DatasetWriter,
    read_manifest,
    run_versions,
)
from taskforge.datasets.migrate import migrate
from taskforge.datasets.reader import read_rows
from taskforge.datasets.testing import reward_rows, task_rows
from taskforge.difficulty import BANDS, band_bounds, difficulty_of, estimate, in_band
from taskforge.errors import TaskforgeError
from taskforge.mining.candidates import CandidateConfig

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "datasets" / "sample"

FEATURE_PATCH = '''diff --git a/pkg/core.py b/pkg/core.py
--- a/pkg/core.py
+++ b/pkg/core.py
@@ -14,4 +14,5 @@ def dump(record, fmt="json"):
 HANDLERS = {
     "json": to_json,
+    "yaml": to_yaml,
 }
diff --git a/pkg/yaml_out.py b/pkg/yaml_out.py
new file mode 100644
--- /dev/null
+++ b/pkg/yaml_out.py
@@ -0,0 +1,18 @@
+INDENT = "  "
+
+
+def _scalar(value):
+    if isinstance(value, str) and ":" in value:
+        return repr(value)
+    return str(value)
+
+
+def to_yaml(record):
+    """The record as YAML."""
+    return "\\n".join(_lines(record, 0))
+
+
+def _lines(record, depth):
+    for key in sorted(record):
+        yield f"{INDENT * depth}{key}: {_scalar(record[key])}"
+        yield from _lines(record[key], depth + 1) if isinstance(record[key], dict) else ()
'''


def feature_row() -> dict[str, object]:
    return {"strategy": "feature", "removed": ["pkg.yaml_out:to_yaml", "pkg.yaml_out:_scalar", "pkg.yaml_out:_lines",
                                               "pkg.yaml_out:INDENT", "pkg.yaml_out"],
            "patch": FEATURE_PATCH, "lines_removed": 19, "FAIL_TO_PASS": ["t1", "t2", "t3"]}


def test_the_record_is_read_off_the_row() -> None:
    record = difficulty_of(feature_row())
    # Four qualnames (INDENT counts: the row cannot tell a constant from a function); the module is not one.
    assert record.removed_symbols == 4 and record.removed_files == 2 and record.lines_removed == 19
    assert record.fail_to_pass_count == 3 and record.public_api_removed
    assert record.call_depth == 3  # to_yaml -> _lines (recursive: one link) -> _scalar
    assert 0 < record.difficulty < 1
    assert record.difficulty == estimate(lines=19, symbols=4, files=2, depth=3, fail_to_pass=3, public=True)
    body = difficulty_of({**feature_row(), "strategy": "body", "removed": ["pkg.yaml_out:to_yaml"]})
    assert (body.call_depth, body.public_api_removed, body.removed_symbols) == (1, False, 1)
    assert body.difficulty < record.difficulty
    private = difficulty_of({**feature_row(), "strategy": "symbol", "removed": ["pkg._impl:helper"]})
    assert not private.public_api_removed


def test_the_estimate_grows_with_each_part_and_stays_in_the_unit_interval() -> None:
    base = {"lines": 20, "symbols": 2, "files": 1, "depth": 1, "fail_to_pass": 3, "public": False}
    value = estimate(**base)  # type: ignore[arg-type]
    for part, bigger in [("lines", 200), ("symbols", 8), ("files", 3), ("depth", 3), ("fail_to_pass", 30), ("public", True)]:
        assert estimate(**{**base, part: bigger}) > value, part  # type: ignore[arg-type]
    assert estimate(lines=10**6, symbols=10**3, files=50, depth=30, fail_to_pass=10**4, public=True) == 1.0
    assert estimate(lines=0, symbols=1, files=1, depth=1, fail_to_pass=0, public=False) == 0.0


def test_bands_and_bounds() -> None:
    assert band_bounds("hard") == BANDS["hard"] and band_bounds([0.2, 0.5]) == (0.2, 0.5)
    assert in_band(0.5, (0.2, 0.5)) and not in_band(0.51, (0.2, 0.5))
    for bad in ("brutal", [0.5, 0.2], [0.1, 1.5], [0.3]):
        with pytest.raises(ValueError, match="difficulty"):
            band_bounds(bad)  # type: ignore[arg-type]
    assert CandidateConfig(difficulty="hard").difficulty == "hard"
    assert CandidateConfig(difficulty=[0.3, 0.9]).difficulty == (0.3, 0.9)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="difficulty band must be one of easy, medium, hard"):
        CandidateConfig(difficulty="brutal")


def taskforge(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "taskforge.cli", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


TASKS_V3_COLUMNS = frozenset({"removed_symbols", "removed_files", "fail_to_pass_count", "call_depth",
                              "public_api_removed", "difficulty", "solve_rate", "solve_attempts"})


def v2_folder(tmp_path: Path, rows: list[dict[str, object]], *, kind: DatasetKind = TASKS,
              added: frozenset[str] = TASKS_V3_COLUMNS) -> Path:
    """A folder of ``kind`` as taskforge wrote it before version 3, without the ``added`` columns:
    v2 shards and manifest."""
    v2_columns = [f for f in kind.schema() if f.name not in added]
    v2 = pa.schema(v2_columns, metadata={**kind.schema().metadata, b"taskforge.schema_version": b"2"})
    folder = tmp_path / "v2"
    with DatasetWriter(folder, kind=kind, recipe={"mine": {"seed": 0}}, versions=run_versions()) as writer:
        writer.write(rows, prefix=f"{kind.name}-demo-s0")
    # Rewrite what the current writer made as version 2 did: the old columns, the old version.
    for shard in read_manifest(folder).shards:
        table = pq.read_table(folder / shard.name).select([f.name for f in v2_columns]).cast(v2)
        pq.write_table(table, folder / shard.name, compression="zstd")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["schema_version"] = 2
    from taskforge.datasets.manifest import sha256_file

    for shard in manifest["shards"]:
        shard["sha256"] = sha256_file(folder / shard["name"])
        shard["bytes"] = (folder / shard["name"]).stat().st_size
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_migrate_brings_a_v2_folder_to_v3_with_the_same_record(tmp_path: Path) -> None:
    rows = task_rows(40, seed=3)
    folder = v2_folder(tmp_path, rows)
    with pytest.raises(TaskforgeError, match="run `taskforge migrate") as info:
        read_rows(folder)
    assert info.value.reason == "schema_version"
    done = taskforge("migrate", str(folder))
    assert done.returncode == 0, done.stderr
    assert "v2 -> v3, 40 rows in 1 shard(s)" in done.stdout
    migrated = {r["instance_id"]: r for r in read_rows(folder)}
    for row in rows:  # every old column as it was; the record as mining computes it
        assert migrated[row["instance_id"]] == row
    again = taskforge("migrate", str(folder))
    assert again.returncode == 0 and "schema v3 is current; nothing to do" in again.stdout
    assert read_manifest(folder).schema_version == 3


def test_a_migration_killed_after_its_commit_is_finished_by_the_next(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    rows = task_rows(10, seed=4)
    folder = v2_folder(tmp_path, rows)
    calls = []
    real_replace = os.replace

    def dying_replace(src, dst):  # type: ignore[no-untyped-def]
        if str(src).endswith(".next"):
            calls.append(src)
            raise KeyboardInterrupt("killed between the commit and the renames")
        return real_replace(src, dst)

    monkeypatch.setattr("taskforge.datasets.migrate.os.replace", dying_replace)
    with pytest.raises(KeyboardInterrupt):
        migrate(folder)
    monkeypatch.undo()
    assert calls and read_manifest(folder).schema_version == 3  # committed; the rename is pending
    with pytest.raises(TaskforgeError):
        read_rows(folder)
    done = taskforge("migrate", str(folder))
    assert done.returncode == 0, done.stderr
    assert {r["instance_id"]: r for r in read_rows(folder)} == {r["instance_id"]: r for r in rows}


def test_migrate_brings_a_v2_reward_folder_to_v3_with_the_task_version_unknown(tmp_path: Path) -> None:
    rows = reward_rows(task_rows(6, seed=2), candidates=("gold", "empty", "rollout-1"))
    folder = v2_folder(tmp_path, rows, kind=REWARDS, added=frozenset({"task_sha256"}))
    with pytest.raises(TaskforgeError, match="run `taskforge migrate"):
        read_rows(folder)
    done = taskforge("migrate", str(folder))
    assert done.returncode == 0, done.stderr
    assert "v2 -> v3, 18 rows in 1 shard(s)" in done.stdout
    assert read_rows(folder) == [{**row, "task_sha256": ""} for row in rows]


def test_rate_finishes_a_rewrite_a_killed_rate_left(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A rate killed between its manifest and its rename leaves a pending rewrite, which readers
    refuse; the next ``taskforge rate`` opens the folder for writing first, and so finishes it."""
    folder = tmp_path / "tasks"
    rows = task_rows(6, seed=7)
    with DatasetWriter(folder, kind=TASKS, recipe={"mine": {"seed": 0}}, versions=run_versions()) as writer:
        writer.write(rows, prefix="tasks-demo-s0")
    with DatasetWriter(folder / "rewards", kind=REWARDS, recipe={}, versions=run_versions()) as writer:
        writer.write(reward_rows(rows, candidates=("rollout-1",)), prefix="rewards-s0")
    real_replace = os.replace

    def dying_replace(src, dst):  # type: ignore[no-untyped-def]
        if str(src).endswith(".next"):
            raise KeyboardInterrupt("killed between the manifest and the rename")
        return real_replace(src, dst)

    with DatasetWriter(folder, kind=TASKS, recipe={"mine": {"seed": 0}}, versions=run_versions()) as writer:
        [shard] = writer.manifest.shards
        monkeypatch.setattr("taskforge.datasets.writer.os.replace", dying_replace)
        with pytest.raises(KeyboardInterrupt):
            writer.rewrite(shard.name, [{**r, "solve_rate": 0.5, "solve_attempts": 2} for r in rows])
        monkeypatch.undo()
    with pytest.raises(TaskforgeError):
        read_rows(folder)
    done = taskforge("rate", str(folder))
    assert done.returncode == 0, done.stderr
    assert "6 of 6 tasks rated from 6 rollouts" in done.stdout


def test_rate_writes_solve_rates_beside_the_record(tmp_path: Path) -> None:
    folder = tmp_path / "tasks"
    rows = task_rows(12, seed=5)
    with DatasetWriter(folder, kind=TASKS, recipe={"mine": {"seed": 0}}, versions=run_versions()) as writer:
        writer.write(rows, prefix="tasks-demo-s0")
    rewards = reward_rows(rows, candidates=("gold", "empty", "rollout-1", "rollout-2", "rollout-3"))
    rewards[-1] = {**rewards[-1], "status": "infra_error", "reward": 0.0}  # not the solver's doing: not counted
    rewards[-2] = {**rewards[-2], "task_sha256": "0" * 64}  # another version of the task: not counted
    with DatasetWriter(folder / "rewards", kind=REWARDS, recipe={}, versions=run_versions()) as writer:
        writer.write(rewards, prefix="rewards-s0")
    done = taskforge("rate", str(folder))
    assert done.returncode == 0, done.stderr
    assert "12 of 12 tasks rated from 34 rollouts" in done.stdout
    rated = {r["instance_id"]: r for r in read_rows(folder)}
    for row in rows:
        mine = [r for r in rewards if r["instance_id"] == row["instance_id"]
                and r["candidate_id"].startswith("rollout") and r["status"] != "infra_error"
                and r["task_sha256"] != "0" * 64]
        got = rated[row["instance_id"]]
        assert got["solve_attempts"] == len(mine)
        assert got["solve_rate"] == pytest.approx(sum(r["reward"] == 1.0 for r in mine) / len(mine))
        assert {k: v for k, v in got.items() if not k.startswith("solve_")} == \
            {k: v for k, v in row.items() if not k.startswith("solve_")}
    shown = taskforge("inspect", str(folder))
    assert shown.returncode == 0, shown.stderr
    assert "difficulty bands" in shown.stdout and "measured solve rates" in shown.stdout
    assert "difficulty estimate by strategy" in shown.stdout
    missing = taskforge("rate", str(tmp_path / "tasks" / "rewards"), "--rewards", str(folder))
    assert missing.returncode != 0 and "holds" in (missing.stdout + missing.stderr)


def test_the_sample_dataset_is_current_and_its_record_is_the_rows(tmp_path: Path) -> None:
    assert read_manifest(SAMPLE).schema_version == TASKS.version
    for row in read_rows(SAMPLE):
        assert {k: row[k] for k in difficulty_of(row).columns()} == difficulty_of(row).columns()
    copy = tmp_path / "sample"
    shutil.copytree(SAMPLE, copy)
    assert migrate(copy).shards == 0  # current: nothing to do

"""The dataset writer and the checked readers, on real Parquet files in temporary folders."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from taskforge.datasets import (
    MANIFEST,
    REWARDS,
    TASKS,
    DatasetWriter,
    WriterConfig,
    read_manifest,
    read_rows,
    read_tasks,
    run_versions,
    verify,
)
from taskforge.datasets import (
    open as open_dataset,
)
from taskforge.datasets.card import CARD, card_text
from taskforge.datasets.testing import reward_rows, task_rows
from taskforge.errors import TaskforgeError

RECIPE: dict[str, object] = {"command": "mine", "config": {"seed": 0, "strategies": ("body", "symbol")}}
SMALL = WriterConfig(rows_per_shard=40, row_group_rows=8)


def _writer(directory: Path, *, recipe: dict[str, object] = RECIPE, config: WriterConfig = SMALL) -> DatasetWriter:
    return DatasetWriter(directory, kind=TASKS, recipe=recipe, versions=run_versions(base_image="test"), config=config)


def _ids(directory: Path) -> list[str]:
    return [row["instance_id"] for row in read_rows(directory)]


def test_rows_come_back_exactly_in_zstd_shards_with_small_row_groups(tmp_path: Path) -> None:
    rows = task_rows(100)
    with _writer(tmp_path) as writer:
        result = writer.write(rows, prefix="tasks-demo")
    assert (result.written, result.skipped) == (100, 0)
    assert result.shards == [f"tasks-demo-{i:05d}.parquet" for i in range(3)]
    assert read_rows(tmp_path) == rows
    manifest = read_manifest(tmp_path)
    assert [s.rows for s in manifest.shards] == [40, 40, 20]
    assert manifest.rows == 100 and manifest.kind == "tasks" and manifest.schema_version == TASKS.version
    assert manifest.recipe == {"command": "mine", "config": {"seed": 0, "strategies": ["body", "symbol"]}}
    assert manifest.runs[0].versions["base_image"] == "test" and "pyarrow" in manifest.runs[0].versions
    meta = pq.read_metadata(tmp_path / result.shards[0])
    assert meta.num_row_groups == 5
    assert {meta.row_group(0).column(i).compression for i in range(meta.num_columns)} == {"ZSTD"}
    assert open_dataset(tmp_path).count_rows() == 100
    assert sorted(os.listdir(tmp_path)) == [CARD, MANIFEST, *result.shards]  # no temporaries, no lock file


def test_a_second_run_skips_rows_already_there_and_appends_the_rest(tmp_path: Path) -> None:
    with _writer(tmp_path) as writer:
        writer.write(task_rows(50), prefix="tasks-demo")
    with _writer(tmp_path) as writer:
        result = writer.write(task_rows(80), prefix="tasks-demo", done={"pypi:demo==1": {"tasks": 80}})
        assert result.shards == ["tasks-demo-00002.parquet"]
    assert (result.written, result.skipped) == (30, 50)
    assert _ids(tmp_path) == [row["instance_id"] for row in task_rows(80)]
    manifest = read_manifest(tmp_path)
    assert len(manifest.runs) == 2 and [s.run for s in manifest.shards] == [0, 0, 1]
    assert manifest.done == {"pypi:demo==1": {"tasks": 80, "shards": ["tasks-demo-00002.parquet"]}}


def test_a_batch_that_repeats_a_key_writes_it_once(tmp_path: Path) -> None:
    rows = task_rows(5)
    with _writer(tmp_path) as writer:
        result = writer.write([*rows, rows[2], rows[0]], prefix="tasks-demo")
    assert (result.written, result.skipped) == (5, 2)
    assert _ids(tmp_path) == [r["instance_id"] for r in rows]


def test_done_alone_is_recorded_when_no_row_is_new(tmp_path: Path) -> None:
    with _writer(tmp_path) as writer:
        result = writer.write([], prefix="tasks-none", done={"pypi:empty==1": {"tasks": 0}})
    assert result.shards == [] and read_manifest(tmp_path).done == {"pypi:empty==1": {"tasks": 0, "shards": []}}
    assert open_dataset(tmp_path).count_rows() == 0


def test_another_recipe_is_refused(tmp_path: Path) -> None:
    with _writer(tmp_path) as writer:
        writer.write(task_rows(3), prefix="tasks-demo")
    with pytest.raises(TaskforgeError, match="another recipe .*config") as err:
        _writer(tmp_path, recipe={"command": "mine", "config": {"seed": 1}})
    assert err.value.reason == "recipe_mismatch"


def test_settings_that_only_change_how_a_run_goes_may_differ_on_resume(tmp_path: Path) -> None:
    """``run_only`` keys (mining's ``tracebacks``) may differ, or be missing on either side; the
    manifest keeps the recipe of the run that made the folder, and any other change is refused."""
    first = {"command": "mine", "config": {"seed": 0, "tracebacks": None}}
    with DatasetWriter(tmp_path, kind=TASKS, recipe=first, versions={}, run_only=["config.tracebacks"]) as writer:
        writer.write(task_rows(3), prefix="tasks-demo")
    for config in ({"seed": 0, "tracebacks": "native"}, {"seed": 0}):
        with DatasetWriter(tmp_path, kind=TASKS, recipe={"command": "mine", "config": config}, versions={},
                           run_only=["config.tracebacks"]):
            pass
    assert read_manifest(tmp_path).recipe == first
    with pytest.raises(TaskforgeError, match="another recipe .*config") as err:
        DatasetWriter(tmp_path, kind=TASKS, recipe={"command": "mine", "config": {"seed": 1, "tracebacks": None}},
                      versions={}, run_only=["config.tracebacks"])
    assert err.value.reason == "recipe_mismatch"
    with pytest.raises(TaskforgeError, match="another recipe"):  # without run_only, the same change is refused
        DatasetWriter(tmp_path, kind=TASKS, recipe={"command": "mine", "config": {"seed": 0, "tracebacks": "line"}},
                      versions={})


def test_an_option_added_later_resumes_an_older_folder_at_its_default_only(tmp_path: Path) -> None:
    """A folder written before an option existed lacks it in its recipe: left at its default, which
    keeps the old behaviour, the run resumes; set otherwise, it is refused, naming the key."""
    old = {"command": "mine", "config": {"seed": 0, "candidates": {"min_tests": 1}}}
    with DatasetWriter(tmp_path, kind=TASKS, recipe=old, versions={}) as writer:
        writer.write(task_rows(3), prefix="tasks-demo")
    defaults = {"command": "mine", "config": {"seed": 0, "candidates": {"min_tests": 1, "band": None, "cap": 1500}}}
    at_default = {"command": "mine", "config": {"seed": 0, "candidates": {"min_tests": 1, "band": None, "cap": 1500}}}
    with pytest.raises(TaskforgeError):  # without defaults, any new key is a change
        DatasetWriter(tmp_path, kind=TASKS, recipe=at_default, versions={})
    with DatasetWriter(tmp_path, kind=TASKS, recipe=at_default, versions={}, defaults=defaults) as writer:
        assert writer.manifest.recipe == old
    # `taskforge mine --follow` resumes with the folder's own recipe, which lacks the new keys too.
    with DatasetWriter(tmp_path, kind=TASKS, recipe=old, versions={}, defaults=defaults) as writer:
        assert writer.manifest.recipe == old
    changed = {"command": "mine", "config": {"seed": 0, "candidates": {"min_tests": 1, "band": "hard", "cap": 1500}}}
    with pytest.raises(TaskforgeError, match=r"config\.candidates\.band \(None then, 'hard' now\)") as err:
        DatasetWriter(tmp_path, kind=TASKS, recipe=changed, versions={}, defaults=defaults)
    assert err.value.reason == "recipe_mismatch"


def test_one_writer_at_a_time(tmp_path: Path) -> None:
    with _writer(tmp_path), pytest.raises(TaskforgeError) as err:
        _writer(tmp_path)
    assert err.value.reason == "dataset_locked"
    _writer(tmp_path).close()  # released with the first


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda row: row.pop("audit"), "bad_row"),
        (lambda row: row.update(extra=1), "bad_row"),
        (lambda row: row.update(audit=None), "bad_row"),
        (lambda row: row.update(lines_removed="many"), "bad_row"),
    ],
)
def test_rows_that_do_not_fit_the_schema_are_refused(tmp_path: Path, change, reason: str) -> None:  # type: ignore[no-untyped-def]
    rows = task_rows(3)
    change(rows[1])
    with _writer(tmp_path) as writer, pytest.raises(TaskforgeError) as err:
        writer.write(rows, prefix="tasks-demo")
    assert err.value.reason == reason
    assert open_dataset(tmp_path).count_rows() == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [CARD, MANIFEST]  # the half-written shard is gone


def _flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["flip", "truncate", "append"])
def test_a_corrupt_shard_is_detected(tmp_path: Path, damage: str) -> None:
    with _writer(tmp_path) as writer:
        writer.write(task_rows(100), prefix="tasks-demo")
    shard = tmp_path / "tasks-demo-00001.parquet"
    size = shard.stat().st_size
    if damage == "flip":
        _flip_byte(shard, size // 2)
    elif damage == "truncate":
        shard.write_bytes(shard.read_bytes()[: size - 100])
    else:
        shard.write_bytes(shard.read_bytes() + b"\0")
    with pytest.raises(TaskforgeError, match="tasks-demo-00001.parquet does not match the manifest") as err:
        open_dataset(tmp_path)
    assert err.value.reason == "corrupt_shard"
    with pytest.raises(TaskforgeError):
        read_tasks(tmp_path)
    with pytest.raises(TaskforgeError):  # nor will a writer add to it
        _writer(tmp_path)


def test_missing_unlisted_and_malformed(tmp_path: Path) -> None:
    with pytest.raises(TaskforgeError) as err:
        open_dataset(tmp_path)
    assert err.value.reason == "no_manifest"
    with _writer(tmp_path) as writer:
        writer.write(task_rows(50), prefix="tasks-demo")
    shutil.copy(tmp_path / "tasks-demo-00000.parquet", tmp_path / "stray.parquet")
    with pytest.raises(TaskforgeError, match="stray.parquet is not listed") as err:
        open_dataset(tmp_path)
    assert err.value.reason == "unlisted_shard"
    (tmp_path / "stray.parquet").unlink()
    (tmp_path / "tasks-demo-00001.parquet").unlink()
    with pytest.raises(TaskforgeError) as err:
        open_dataset(tmp_path)
    assert err.value.reason == "missing_shard"
    (tmp_path / MANIFEST).write_text('{"format": "taskforge-dataset/1", "kind": "tasks"')
    with pytest.raises(TaskforgeError) as err:
        open_dataset(tmp_path)
    assert err.value.reason == "bad_manifest"


def test_a_listed_shard_with_other_columns_is_a_schema_mismatch(tmp_path: Path) -> None:
    import pyarrow as pa

    from taskforge.datasets.manifest import sha256_file, write_manifest

    with _writer(tmp_path) as writer:
        writer.write(task_rows(10), prefix="tasks-demo")
    shard = tmp_path / "tasks-demo-00000.parquet"
    pq.write_table(pa.table({"instance_id": ["a"] * 10}), shard)
    manifest = read_manifest(tmp_path)
    manifest.shards[0].sha256, manifest.shards[0].bytes = sha256_file(shard), shard.stat().st_size
    write_manifest(tmp_path, manifest)
    with pytest.raises(TaskforgeError) as err:
        open_dataset(tmp_path)
    assert err.value.reason == "schema_mismatch"


def test_a_shard_in_place_but_not_yet_listed_is_adopted_on_resume(tmp_path: Path) -> None:
    """The state a kill between a shard's rename and the manifest's leaves behind."""
    with _writer(tmp_path) as writer:
        writer.write(task_rows(40), prefix="tasks-demo")
    elsewhere = tmp_path.parent / f"{tmp_path.name}-other"
    with _writer(elsewhere) as writer:
        writer.write(task_rows(40, start=40), prefix="tasks-demo")
    shutil.copy(elsewhere / "tasks-demo-00000.parquet", tmp_path / "tasks-demo-00001.parquet")
    with pytest.raises(TaskforgeError) as err:
        open_dataset(tmp_path)
    assert err.value.reason == "unlisted_shard"
    with _writer(tmp_path) as writer:
        assert writer.adopted == ["tasks-demo-00001.parquet"]
        result = writer.write(task_rows(100), prefix="tasks-demo")
    assert (result.written, result.skipped) == (20, 80)
    assert _ids(tmp_path) == [r["instance_id"] for r in task_rows(100)]
    assert read_manifest(tmp_path).shard("tasks-demo-00001.parquet").run == 0  # type: ignore[union-attr]


def test_an_unlisted_shard_that_repeats_rows_is_not_adopted(tmp_path: Path) -> None:
    with _writer(tmp_path) as writer:
        writer.write(task_rows(10), prefix="tasks-demo")
    shutil.copy(tmp_path / "tasks-demo-00000.parquet", tmp_path / "copy.parquet")
    with pytest.raises(TaskforgeError, match="repeats rows") as err:
        _writer(tmp_path)
    assert err.value.reason == "unlisted_shard"


def test_temporaries_are_invisible_and_cleaned_on_resume(tmp_path: Path) -> None:
    with _writer(tmp_path) as writer:
        writer.write(task_rows(10), prefix="tasks-demo")
    stale = tmp_path / ".tasks-demo-00001.parquet.k2j4h5g6.tmp"
    stale.write_bytes(b"PAR1 half a shard")
    (tmp_path / ".manifest.json.abc123.tmp").write_text("{")
    assert open_dataset(tmp_path).count_rows() == 10
    with _writer(tmp_path):
        pass
    assert sorted(os.listdir(tmp_path)) == [CARD, MANIFEST, "tasks-demo-00000.parquet"]


def _audited(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    return [{**row, "audit": json.dumps({"clean": True, "findings": [], "seconds": 9.5})} for row in rows]


def test_rewrite_replaces_a_shard_and_its_digest(tmp_path: Path) -> None:
    rows = task_rows(50)
    with _writer(tmp_path) as writer:
        writer.write(rows, prefix="tasks-demo")
        before = read_manifest(tmp_path).shards[1]
        writer.rewrite("tasks-demo-00001.parquet", _audited(rows[40:]))
        with pytest.raises(TaskforgeError):  # other rows than the shard holds
            writer.rewrite("tasks-demo-00001.parquet", rows[:10])
    after = read_manifest(tmp_path).shards[1]
    assert after.sha256 != before.sha256 and after.rows == before.rows
    assert read_rows(tmp_path) == rows[:40] + _audited(rows[40:])


def test_an_interrupted_rewrite_is_finished_or_dropped(tmp_path: Path) -> None:
    rows = task_rows(50)
    name = "tasks-demo-00001.parquet"
    with _writer(tmp_path) as writer:
        writer.write(rows, prefix="tasks-demo")
    old = (tmp_path / name).read_bytes()
    old_manifest = (tmp_path / MANIFEST).read_bytes()
    with _writer(tmp_path) as writer:
        writer.rewrite(name, _audited(rows[40:]))
    new = (tmp_path / name).read_bytes()
    new_manifest = (tmp_path / MANIFEST).read_bytes()

    # Killed after the manifest named the new digest, before the rename: readers say so; a
    # writer finishes the rename.
    (tmp_path / name).write_bytes(old)
    (tmp_path / f".{name}.next").write_bytes(new)
    with pytest.raises(TaskforgeError, match="a rewrite of it, or a drop of rows, was interrupted") as err:
        verify(tmp_path)
    assert err.value.reason == "corrupt_shard"
    _writer(tmp_path).close()
    assert read_rows(tmp_path) == rows[:40] + _audited(rows[40:])

    # Killed before the manifest: the old shard still holds; the pending one is dropped.
    (tmp_path / MANIFEST).write_bytes(old_manifest)
    (tmp_path / name).write_bytes(old)
    (tmp_path / f".{name}.next").write_bytes(new)
    assert read_rows(tmp_path) == rows
    _writer(tmp_path).close()
    assert read_rows(tmp_path) == rows and not (tmp_path / f".{name}.next").exists()
    assert new_manifest != old_manifest


def test_retracted_shards_leave_the_dataset_with_their_reason_and_their_rows_may_come_again(tmp_path: Path) -> None:
    rows = task_rows(50)
    with _writer(tmp_path) as writer:
        writer.write(rows[:40], prefix="tasks-a", done={"pypi:a==1": {"tasks": 40}})
        writer.write(rows[40:], prefix="tasks-b", done={"pypi:b==1": {"tasks": 10}})
        with pytest.raises(TaskforgeError) as err:
            writer.retract(["tasks-c-00000.parquet"], reason="no such shard")
        assert err.value.reason == "missing_shard"
        assert writer.retract(["tasks-b-00000.parquet"], reason="mined again", done=["pypi:b==1"]) == 10
    assert not (tmp_path / "tasks-b-00000.parquet").exists()
    manifest = verify(tmp_path)
    assert [s.name for s in manifest.shards] == ["tasks-a-00000.parquet"] and manifest.rows == 40
    assert manifest.done == {"pypi:a==1": {"tasks": 40, "shards": ["tasks-a-00000.parquet"]}}
    [retraction] = manifest.retracted
    assert (retraction.shard.name, retraction.shard.rows, retraction.reason) == ("tasks-b-00000.parquet", 10, "mined again")
    assert retraction.run == 0 and retraction.done == ("pypi:b==1",)
    assert _ids(tmp_path) == [r["instance_id"] for r in rows[:40]]
    # The rows of a retracted shard are no longer in the folder, so a later run may write them again.
    with _writer(tmp_path) as writer:
        result = writer.write(rows, prefix="tasks-b", done={"pypi:b==1": {"tasks": 10}})
    assert (result.written, result.skipped) == (10, 40) and result.shards == ["tasks-b-00001.parquet"]
    again = read_manifest(tmp_path)
    assert [r.shard.name for r in again.retracted] == ["tasks-b-00000.parquet"]
    assert _ids(tmp_path) == [r["instance_id"] for r in rows]


def test_an_interrupted_retraction_is_refused_by_readers_and_finished_by_the_next_writer(tmp_path: Path) -> None:
    """The state a kill between the manifest and the unlink leaves behind."""
    with _writer(tmp_path) as writer:
        writer.write(task_rows(20), prefix="tasks-demo", done={"pypi:demo==1": {"tasks": 20}})
    kept = (tmp_path / "tasks-demo-00000.parquet").read_bytes()
    with _writer(tmp_path) as writer:
        writer.retract(["tasks-demo-00000.parquet"], reason="mined again", done=["pypi:demo==1"])
    (tmp_path / "tasks-demo-00000.parquet").write_bytes(kept)
    with pytest.raises(TaskforgeError, match="retraction was interrupted") as err:
        verify(tmp_path)
    assert err.value.reason == "unlisted_shard"
    with _writer(tmp_path) as writer:
        assert writer.adopted == [] and writer.keys == set()
    assert not (tmp_path / "tasks-demo-00000.parquet").exists()
    assert open_dataset(tmp_path).count_rows() == 0


def test_reward_rows_round_trip_keyed_by_task_and_candidate(tmp_path: Path) -> None:
    tasks = task_rows(10)
    rewards = reward_rows(tasks, candidates=("gold", "empty", "model-a"))
    with DatasetWriter(tmp_path, kind=REWARDS, recipe={"scorer": "1"}, versions=run_versions()) as writer:
        assert writer.write(rewards, prefix="rewards").written == 30
    with DatasetWriter(tmp_path, kind=REWARDS, recipe={"scorer": "1"}, versions=run_versions()) as writer:
        more = reward_rows(tasks, candidates=("gold", "model-b"))
        result = writer.write(more, prefix="rewards")
    assert (result.written, result.skipped) == (10, 10)
    back = read_rows(tmp_path)
    assert back == rewards + [r for r in more if r["candidate_id"] == "model-b"]
    assert back[0]["scored_at"].tzinfo is not None
    with pytest.raises(TaskforgeError) as err:
        read_tasks(tmp_path)
    assert err.value.reason == "wrong_kind"
    with pytest.raises(TaskforgeError) as err:  # a task writer refuses a reward folder
        _writer(tmp_path)
    assert err.value.reason == "schema_version"


def test_the_folder_gets_a_card_naming_its_shards_and_keeps_someone_elses(tmp_path: Path) -> None:
    with _writer(tmp_path) as writer:
        writer.write(task_rows(3), prefix="tasks-demo")
    card = (tmp_path / CARD).read_text()
    assert card == card_text(TASKS)
    header = card.split("\n---\n", 1)[0]
    assert "configs:" in header and 'path: "*.parquet"' in header and "split: train" in header
    (tmp_path / CARD).write_text("---\ntaskforge_dataset_card: true\n---\nan older card of ours\n")
    with _writer(tmp_path):
        pass
    assert (tmp_path / CARD).read_text() == card  # ours, out of date: rewritten
    (tmp_path / CARD).write_text("# my own notes\n")
    with _writer(tmp_path):
        pass
    assert (tmp_path / CARD).read_text() == "# my own notes\n"  # someone else's: left alone


def test_dropped_rows_leave_their_shards_whose_other_rows_stay_and_a_kill_loses_nothing(tmp_path: Path,
                                                                                         monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """``DatasetWriter.drop``: the rows a resumed ``taskforge score`` finds stale go, the rest of
    their shards stay in a new one; a kill before the manifest leaves the folder as it was, after
    it the next writer finishes the renames and deletions."""
    tasks = task_rows(30)
    rewards = reward_rows(tasks, candidates=("gold", "empty"))  # 60 rows, two shards of 40 and 20

    def open_rewards() -> DatasetWriter:
        return DatasetWriter(tmp_path, kind=REWARDS, recipe={}, versions=run_versions(), config=SMALL)

    with open_rewards() as writer:
        writer.write(rewards, prefix="rewards")
    before = read_manifest(tmp_path).shards
    stale = {REWARDS.key_of(r) for r in rewards[3:5]}  # both in the first shard

    real_replace = os.replace

    def dying_replace(src, dst):  # type: ignore[no-untyped-def]
        if str(src).endswith(".next"):
            raise KeyboardInterrupt("killed between the manifest and the renames")
        return real_replace(src, dst)

    with open_rewards() as writer:  # killed before the manifest: nothing changed
        monkeypatch.setattr("taskforge.datasets.writer.write_manifest",
                            lambda *_: (_ for _ in ()).throw(KeyboardInterrupt("killed before the manifest")))
        with pytest.raises(KeyboardInterrupt):
            writer.drop(stale, reason="stale", prefix="rewards")
        monkeypatch.undo()
    assert read_manifest(tmp_path).shards == before and not read_manifest(tmp_path).retracted
    assert read_rows(tmp_path) == rewards
    with open_rewards() as writer:
        assert writer.column("task_sha256") == {REWARDS.key_of(r): r["task_sha256"] for r in rewards}
        monkeypatch.setattr("taskforge.datasets.writer.os.replace", dying_replace)
        with pytest.raises(KeyboardInterrupt):
            writer.drop(stale, reason="stale", prefix="rewards")
        monkeypatch.undo()
    with pytest.raises(TaskforgeError):  # committed; the new shard is still pending
        verify(tmp_path)
    with open_rewards() as writer:
        assert writer.keys == {REWARDS.key_of(r) for r in rewards} - stale
        assert writer.drop(stale, reason="stale", prefix="rewards") == 0  # gone already
    manifest = verify(tmp_path)
    assert [s.name for s in manifest.shards] == ["rewards-00001.parquet", "rewards-00002.parquet"]
    assert [(r.shard.name, r.reason) for r in manifest.retracted] == [("rewards-00000.parquet", "stale")]
    assert not (tmp_path / "rewards-00000.parquet").exists()
    kept = [r for r in rewards if REWARDS.key_of(r) not in stale]
    assert sorted(read_rows(tmp_path), key=REWARDS.key_of) == sorted(kept, key=REWARDS.key_of)
    with open_rewards() as writer:  # the stale rows may be written again, scored anew
        assert writer.write(rewards, prefix="rewards").written == 2
    assert open_dataset(tmp_path).count_rows() == 60

"""Datasets at a filesystem URI: a staging folder mirrored to a remote folder, read back through
the URI. The remote is pyarrow's LocalFileSystem reached through ``file://`` URIs, a real
filesystem with the same API as S3 or GCS."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from taskforge.datasets import (
    MANIFEST,
    TASKS,
    DatasetWriter,
    RemoteDataset,
    WriterConfig,
    is_uri,
    read_manifest,
    read_rows,
    read_tasks,
    run_versions,
    staging_dir,
)
from taskforge.datasets import (
    open as open_dataset,
)
from taskforge.datasets.testing import task_rows
from taskforge.errors import TaskforgeError

RECIPE: dict[str, object] = {"command": "mine", "config": {"seed": 0}}
SMALL = WriterConfig(rows_per_shard=40, row_group_rows=8)
SUMMARY = "mine-summary.json"


def _write(staging: Path, rows: list[dict[str, object]], *, prefix: str = "tasks-demo") -> list[str]:
    with DatasetWriter(staging, kind=TASKS, recipe=RECIPE, versions=run_versions(), config=SMALL) as writer:
        return writer.write(rows, prefix=prefix).shards


def _ids(rows: list[dict[str, object]]) -> list[object]:
    return [row["instance_id"] for row in rows]


def _listed(folder: Path) -> list[str]:
    return [s.name for s in read_manifest(folder).shards]


@pytest.fixture
def remote_dir(tmp_path: Path) -> Path:
    return tmp_path / "remote" / "tasks"


@pytest.fixture
def uri(remote_dir: Path) -> str:
    return remote_dir.as_uri()


def test_uris_are_told_from_paths() -> None:
    for uri in ("s3://bucket/tasks", "file:///srv/tasks", "gs://b/x", "hdfs://namenode:8020/data"):
        assert is_uri(uri), uri
    paths: tuple[str | Path, ...] = ("out", "/srv/tasks", "./s3:/x", "C://data", r"C:\data", Path("/srv/tasks"))
    for path in paths:
        assert not is_uri(path), path


def test_an_unknown_scheme_is_refused_rather_than_taken_for_a_folder(tmp_path: Path) -> None:
    with pytest.raises(TaskforgeError) as err:
        RemoteDataset("nosuchfs://bucket/tasks", tmp_path / "staging")
    assert err.value.reason == "bad_uri"
    with pytest.raises(TaskforgeError) as err:
        read_rows("nosuchfs://bucket/tasks")
    assert err.value.reason == "bad_uri"


def test_staging_folders_are_one_per_uri_under_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKFORGE_CACHE", str(tmp_path / "cache"))
    first = staging_dir("s3://bucket/tasks")
    assert first.is_relative_to(tmp_path / "cache") and first.name.startswith("tasks-")
    assert staging_dir("s3://bucket/tasks/") == first
    assert staging_dir("s3://other/tasks") != first


def test_a_pushed_dataset_reads_back_identically_through_its_uri(tmp_path: Path, remote_dir: Path, uri: str) -> None:
    staging = tmp_path / "staging"
    rows = task_rows(100)
    shards = _write(staging, rows)
    (staging / SUMMARY).write_text('{"tasks": 100}')
    remote = RemoteDataset(uri, staging)
    assert remote.push(extra=(SUMMARY,)) == 3
    assert sorted(os.listdir(remote_dir)) == sorted([MANIFEST, SUMMARY, *shards])  # no temporaries left
    assert (remote_dir / MANIFEST).read_bytes() == (staging / MANIFEST).read_bytes()
    assert read_rows(uri) == rows
    assert open_dataset(uri).to_table().to_pylist() == rows
    assert open_dataset(uri, digests=False).count_rows() == 100
    assert read_tasks(uri) == read_tasks(staging)
    assert remote.push(extra=(SUMMARY,)) == 0  # idempotent
    assert read_rows(uri) == rows


def test_a_remote_without_a_manifest_is_an_empty_dataset(tmp_path: Path, remote_dir: Path, uri: str) -> None:
    staging = tmp_path / "staging"
    remote = RemoteDataset(uri, staging)
    assert remote.pull(extra=(SUMMARY,)) == 0
    with pytest.raises(TaskforgeError) as err:
        read_rows(uri)
    assert err.value.reason == "no_manifest"
    _write(staging, task_rows(10))
    assert remote.push(extra=(SUMMARY,)) == 1  # the sidecar is not there yet, so it is not sent
    assert SUMMARY not in os.listdir(remote_dir)
    assert _ids(read_rows(uri)) == _ids(task_rows(10))


def test_pull_then_resume_then_push_leaves_exactly_the_union(tmp_path: Path, remote_dir: Path, uri: str) -> None:
    first = tmp_path / "first"
    _write(first, task_rows(50))
    (first / SUMMARY).write_text('{"run": 1}')
    RemoteDataset(uri, first).push(extra=(SUMMARY,))

    fresh = tmp_path / "fresh"
    remote = RemoteDataset(uri, fresh)
    assert remote.pull(extra=(SUMMARY,)) == 2
    assert (fresh / SUMMARY).read_text() == '{"run": 1}'
    assert read_rows(fresh) == task_rows(50)
    assert remote.pull(extra=(SUMMARY,)) == 0  # already there, with the right digests
    with DatasetWriter(fresh, kind=TASKS, recipe=RECIPE, versions=run_versions(), config=SMALL) as writer:
        result = writer.write(task_rows(80), prefix="tasks-demo")
    assert (result.written, result.skipped) == (30, 50)
    (fresh / SUMMARY).write_text('{"run": 2}')
    assert remote.push(extra=(SUMMARY,)) == 1

    assert _ids(read_rows(uri)) == _ids(task_rows(80))
    listed = _listed(fresh)
    assert len(listed) == 3 and len(read_manifest(fresh).runs) == 2
    assert sorted(os.listdir(remote_dir)) == sorted([MANIFEST, SUMMARY, *listed])
    assert (remote_dir / SUMMARY).read_text() == '{"run": 2}'


def test_a_retraction_reaches_the_remote_after_its_manifest(tmp_path: Path, remote_dir: Path, uri: str) -> None:
    staging = tmp_path / "staging"
    _write(staging, task_rows(30), prefix="tasks-a")
    _write(staging, task_rows(10, start=30), prefix="tasks-b")
    remote = RemoteDataset(uri, staging)
    remote.push()
    other = tmp_path / "other"  # another machine's staging folder, pulled before the retraction
    assert RemoteDataset(uri, other).pull() == 2
    with DatasetWriter(staging, kind=TASKS, recipe=RECIPE, versions=run_versions(), config=SMALL) as writer:
        writer.retract(["tasks-b-00000.parquet"], reason="mined again")
    assert remote.push() == 0
    assert sorted(os.listdir(remote_dir)) == sorted([MANIFEST, "tasks-a-00000.parquet"])
    assert _ids(read_rows(uri)) == _ids(task_rows(30))
    assert [r.shard.name for r in read_manifest(staging).retracted] == ["tasks-b-00000.parquet"]
    # The other staging folder still holds the retracted shard; pulling then opening it drops it.
    RemoteDataset(uri, other).pull()
    with DatasetWriter(other, kind=TASKS, recipe=RECIPE, versions=run_versions(), config=SMALL):
        pass
    assert _ids(read_rows(other)) == _ids(task_rows(30))


def test_a_retraction_not_yet_pushed_survives_a_pull(tmp_path: Path, remote_dir: Path, uri: str) -> None:
    """Killed after retracting (and writing anew) but before the push: the next run's pull must not
    bring the retracted shard back, and the push after it publishes the retraction."""
    staging = tmp_path / "staging"
    _write(staging, task_rows(30), prefix="tasks-a")
    with DatasetWriter(staging, kind=TASKS, recipe=RECIPE, versions=run_versions(), config=SMALL) as writer:
        writer.write(task_rows(10, start=30), prefix="tasks-b", done={"pypi:b==1": {"tasks": 10}})
    remote = RemoteDataset(uri, staging)
    remote.push()
    with DatasetWriter(staging, kind=TASKS, recipe=RECIPE, versions=run_versions(), config=SMALL) as writer:
        writer.retract(["tasks-b-00000.parquet"], reason="mined again", done=["pypi:b==1"])
        writer.write(task_rows(10, start=30), prefix="tasks-b", done={"pypi:b==1": {"tasks": 10}})
    assert remote.pull() == 0
    assert _listed(staging) == ["tasks-a-00000.parquet", "tasks-b-00001.parquet"]
    assert not (staging / "tasks-b-00000.parquet").exists()
    with DatasetWriter(staging, kind=TASKS, recipe=RECIPE, versions=run_versions(), config=SMALL):
        pass  # opens cleanly: nothing unlisted
    remote.push()
    assert sorted(os.listdir(remote_dir)) == sorted([MANIFEST, "tasks-a-00000.parquet", "tasks-b-00001.parquet"])
    assert _ids(read_rows(uri)) == _ids(task_rows(40))


def test_pull_brings_a_staging_folder_that_is_behind_up_to_date(tmp_path: Path, uri: str) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    _write(one, task_rows(40))
    (one / SUMMARY).write_text('{"run": 1}')
    RemoteDataset(uri, one).push(extra=(SUMMARY,))
    RemoteDataset(uri, two).pull()
    _write(two, task_rows(80))
    RemoteDataset(uri, two).push()  # no summary this time: the remote keeps the old one

    assert RemoteDataset(uri, one).pull(extra=(SUMMARY,)) == 1
    assert _listed(one) == _listed(two)
    assert read_rows(one) == read_rows(uri) == task_rows(80)
    assert (one / SUMMARY).read_text() == '{"run": 1}'


def test_pull_keeps_a_staging_folder_that_is_ahead_of_the_remote(tmp_path: Path, remote_dir: Path, uri: str) -> None:
    """A run wrote a shard but died before pushing it: the next run must push it, not lose it."""
    staging = tmp_path / "staging"
    _write(staging, task_rows(40))
    (staging / SUMMARY).write_text('{"run": 1}')
    remote = RemoteDataset(uri, staging)
    remote.push(extra=(SUMMARY,))
    _write(staging, task_rows(80))
    (staging / SUMMARY).write_text('{"run": 2}')
    ahead = (staging / MANIFEST).read_bytes()

    assert remote.pull(extra=(SUMMARY,)) == 0
    assert (staging / MANIFEST).read_bytes() == ahead
    assert (staging / SUMMARY).read_text() == '{"run": 2}'
    assert remote.push(extra=(SUMMARY,)) == 1
    assert read_rows(uri) == task_rows(80)


def test_a_push_cut_before_the_manifest_leaves_the_old_dataset_and_the_next_push_cleans_up(
        tmp_path: Path, remote_dir: Path, uri: str) -> None:
    staging = tmp_path / "staging"
    _write(staging, task_rows(40))
    remote = RemoteDataset(uri, staging)
    remote.push()
    new = _write(staging, task_rows(40, start=40), prefix="tasks-more")
    assert remote._push_shards(read_manifest(staging)) == 1  # the shards went up; then the process died
    (remote_dir / f".tmp-{MANIFEST}-0123456789abcdef").write_bytes(b'{"half": ')  # and a manifest half sent
    assert (remote_dir / new[0]).is_file()

    assert read_rows(uri) == task_rows(40)  # only what the old manifest lists
    assert open_dataset(uri).count_rows() == 40

    assert remote.push() == 0  # the shard is already there; the manifest now lists it
    assert read_rows(uri) == task_rows(80)
    assert not [name for name in os.listdir(remote_dir) if name.startswith(".")]


def test_a_corrupt_remote_shard_is_caught_by_pull_and_by_readers(tmp_path: Path, remote_dir: Path, uri: str) -> None:
    staging = tmp_path / "staging"
    shards = _write(staging, task_rows(60))
    RemoteDataset(uri, staging).push()
    victim = remote_dir / shards[1]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different bytes: only the digest can tell
    victim.write_bytes(bytes(data))

    with pytest.raises(TaskforgeError) as err:
        open_dataset(uri)
    assert err.value.reason == "corrupt_shard" and "sha256" in str(err.value)
    fresh = tmp_path / "fresh"
    with pytest.raises(TaskforgeError) as err:
        RemoteDataset(uri, fresh).pull()
    assert err.value.reason == "corrupt_shard"
    assert sorted(os.listdir(fresh)) == [shards[0]]  # no temporary left; no manifest for a half pull

    victim.write_bytes(bytes(data[:-10]))  # truncated: the size alone shows it, without reading it
    with pytest.raises(TaskforgeError) as err:
        open_dataset(uri, digests=False)
    assert err.value.reason == "corrupt_shard" and "bytes" in str(err.value)

    victim.unlink()
    for check in (lambda: read_rows(uri, digests=False), lambda: RemoteDataset(uri, tmp_path / "third").pull()):
        with pytest.raises(TaskforgeError) as err:
            check()
        assert err.value.reason == "missing_shard"


def test_a_shard_damaged_in_staging_is_never_published(tmp_path: Path, remote_dir: Path, uri: str) -> None:
    staging = tmp_path / "staging"
    shards = _write(staging, task_rows(40))
    remote = RemoteDataset(uri, staging)
    remote.push()
    before = (remote_dir / MANIFEST).read_bytes()
    more = _write(staging, task_rows(40, start=40), prefix="tasks-more")
    data = bytearray((staging / more[0]).read_bytes())
    data[100] ^= 0xFF
    (staging / more[0]).write_bytes(bytes(data))

    with pytest.raises(TaskforgeError) as err:
        remote.push()
    assert err.value.reason == "corrupt_shard"
    assert (remote_dir / MANIFEST).read_bytes() == before
    assert sorted(os.listdir(remote_dir)) == sorted([MANIFEST, *shards])
    assert read_rows(uri) == task_rows(40)


def test_a_reader_of_a_uri_checks_the_kind_and_version(tmp_path: Path, remote_dir: Path, uri: str) -> None:
    staging = tmp_path / "staging"
    _write(staging, task_rows(5))
    RemoteDataset(uri, staging).push()
    manifest = json.loads((remote_dir / MANIFEST).read_text())
    (remote_dir / MANIFEST).write_text(json.dumps({**manifest, "schema_version": 1}))
    with pytest.raises(TaskforgeError) as err:
        read_tasks(uri)
    assert err.value.reason == "schema_version"
    (remote_dir / MANIFEST).write_text("{not json")
    with pytest.raises(TaskforgeError) as err:
        open_dataset(uri)
    assert err.value.reason == "bad_manifest"

"""Three other readers of a dataset folder return exactly the rows taskforge wrote: Hugging Face
``datasets.load_dataset("parquet", ...)``, DuckDB SQL, and Ray Data ``read_parquet``.

Each reads the shard files the manifest lists (``taskforge.datasets.shard_files``); the rows are
compared, value for value, with what ``taskforge.datasets.open`` (pyarrow) returns, for task rows
(the real sample dataset and a larger synthetic one) and reward rows.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa
import pytest

from taskforge.datasets import (
    REWARDS,
    TASKS,
    DatasetWriter,
    WriterConfig,
    read_manifest,
    run_versions,
    shard_files,
)
from taskforge.datasets.card import CARD
from taskforge.datasets import open as open_dataset
from taskforge.datasets.testing import reward_rows, task_rows

SAMPLE = Path(__file__).resolve().parents[2] / "datasets" / "sample"


def _hf() -> ModuleType:
    hf = pytest.importorskip("datasets")
    if not hasattr(hf, "load_dataset"):  # the repository's own datasets/ folder, seen as a namespace package
        pytest.skip("Hugging Face datasets is not installed")
    return hf


@pytest.fixture(scope="module", params=["sample", "synthetic-tasks", "synthetic-rewards"])
def folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    if request.param == "sample":
        return SAMPLE, "instance_id"
    out = tmp_path_factory.mktemp(request.param)
    config = WriterConfig(rows_per_shard=100, row_group_rows=16)
    tasks = task_rows(250)
    if request.param == "synthetic-tasks":
        with DatasetWriter(out, kind=TASKS, recipe={}, versions=run_versions(), config=config) as writer:
            writer.write(tasks, prefix="tasks-synthetic")
    else:
        with DatasetWriter(out, kind=REWARDS, recipe={}, versions=run_versions(), config=config) as writer:
            writer.write(reward_rows(tasks[:80], candidates=("gold", "empty", "m")), prefix="rewards")
    return out, "instance_id"


def _key(row: dict[str, Any]) -> tuple[str, str]:
    return row["instance_id"], row.get("candidate_id", "")


def _expected(directory: Path) -> list[dict[str, Any]]:
    return sorted(open_dataset(directory).to_table().to_pylist(), key=_key)


def _plain(value: Any) -> Any:
    """numpy arrays and scalars (as Ray hands them out) as Python values."""
    import numpy as np

    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def test_the_sample_is_a_verified_dataset_of_real_tasks() -> None:
    rows = open_dataset(SAMPLE).to_table().to_pylist()
    assert 1 <= len(rows) <= 5
    for row in rows:
        assert row["FAIL_TO_PASS"] and row["PASS_TO_PASS"] and row["patch"].startswith("diff --git")


def test_hugging_face_datasets_reads_the_same_rows(folder: tuple[Path, str], tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    hf = _hf()
    directory, _ = folder
    loaded = hf.load_dataset("parquet", data_files=[str(p) for p in shard_files(directory)], split="train",
                             cache_dir=str(tmp_path / "hf-cache"))
    assert sorted(loaded.to_list(), key=_key) == _expected(directory)


def test_load_dataset_reads_a_mined_folder_by_its_card(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``load_dataset(DIR)`` on a mined folder, as a user types it: its JSON files (manifest,
    mine summary, validation report) outnumber the one shard, so without the card's ``configs``
    header the library would read them as the data."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    hf = _hf()
    mined = tmp_path / "mined"
    shutil.copytree(SAMPLE, mined)
    # Opening the folder for writing (as a resumed mine does) gives it its card.
    with DatasetWriter(mined, kind=TASKS, recipe=read_manifest(SAMPLE).recipe, versions=run_versions()):
        pass
    (mined / "validate.json").write_text("[]")
    assert (mined / CARD).is_file()
    assert len(list(mined.glob("*.json"))) > len(shard_files(mined))
    loaded = hf.load_dataset(str(mined), split="train", cache_dir=str(tmp_path / "hf-cache"))
    assert sorted(loaded.to_list(), key=_key) == _expected(mined)
    assert len(loaded) == len(_expected(SAMPLE))


def test_load_dataset_reads_a_rewards_folder_by_its_card(folder: tuple[Path, str], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    hf = _hf()
    directory, _ = folder
    if not (directory / CARD).is_file():
        pytest.skip("the committed sample predates cards; the mined-folder test covers it")
    loaded = hf.load_dataset(str(directory), split="train", cache_dir=str(tmp_path / "hf-cache"))
    assert sorted(loaded.to_list(), key=_key) == _expected(directory)


def test_duckdb_sql_reads_the_same_rows(folder: tuple[Path, str]) -> None:
    duckdb = pytest.importorskip("duckdb")
    directory, _ = folder
    files = [str(p) for p in shard_files(directory)]
    with duckdb.connect() as con:
        # Arrow's C stream interface: the rows as DuckDB returns them, with no conversion of ours.
        rows = pa.table(con.sql("SELECT * FROM read_parquet($files)", params={"files": files})).to_pylist()
        expected = _expected(directory)
        assert sorted(rows, key=_key) == expected
        # And SQL over it agrees with Python over the same rows.
        counted = con.execute("SELECT instance_id, count(*) FROM read_parquet($files) GROUP BY ALL",
                              {"files": files}).fetchall()
        assert sorted(counted) == sorted((k, n) for k, n in _count(expected).items())


def _count(rows: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["instance_id"]] = counts.get(row["instance_id"], 0) + 1
    return counts


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[ModuleType]:
    with pytest.MonkeyPatch.context() as patch:
        if importlib.util.find_spec("aiohttp") is None:
            # Ray Data lists the input paths in a pool of threads, and each thread imports
            # fsspec's HTTP filesystem, which needs aiohttp. Without it, a thread can see the
            # half-imported module of another and get ImportError ("cannot import name") instead
            # of the ModuleNotFoundError Ray catches. One listing thread has no one to race; the
            # local cluster's workers inherit the setting.
            patch.setenv("RAY_DATA_LIST_FILES_THREADED_NUM_WORKERS", "1")
        ray = pytest.importorskip("ray")
        pytest.importorskip("ray.data")
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            yield ray
        finally:
            ray.shutdown()


@pytest.mark.ray
# Ray Data's DataContext sets its own deprecated fields while it initializes, and warns about them.
@pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.data.context")
def test_ray_data_reads_the_same_rows(folder: tuple[Path, str], ray_cluster: ModuleType) -> None:
    import ray.data

    directory, _ = folder
    dataset = ray.data.read_parquet([str(p) for p in shard_files(directory)])
    rows = [{k: _plain(v) for k, v in row.items()} for row in dataset.take_all()]
    assert sorted(rows, key=_key) == _expected(directory)


def test_readers_see_no_rows_of_an_unlisted_file(folder: tuple[Path, str], tmp_path: Path) -> None:
    """shard_files gives what the manifest lists; a stray file makes the folder unreadable instead."""
    from taskforge.errors import TaskforgeError

    directory, _ = folder
    copy = tmp_path / "copy"
    shutil.copytree(directory, copy)
    first = shard_files(copy)[0]
    shutil.copy(first, copy / "stray.parquet")
    with pytest.raises(TaskforgeError) as err:
        shard_files(copy)
    assert err.value.reason == "unlisted_shard"

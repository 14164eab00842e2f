"""Task and reward datasets: Parquet shards in a folder, with a manifest.

    from taskforge import datasets
    table = datasets.open("out/").to_table()          # a pyarrow dataset, checked against manifest.json
    tasks = datasets.read_tasks("out/")               # taskforge.task.Task objects

A dataset folder holds one kind of rows (``schema.TASKS`` or ``schema.REWARDS``): zstd Parquet
shards and ``manifest.json``, which lists each shard with its row count and sha256, the schema
version, the recipe and the versions used. ``writer.DatasetWriter`` writes it atomically and
resumably. Rewards for a task folder live in its ``rewards/`` subfolder. ``stats`` summarizes a
folder (``taskforge inspect``), ``export`` writes SWE-bench JSONL and Hugging Face dataset folders
(``taskforge export``), and ``images`` builds and audits one image per task.

A dataset may also live at a pyarrow filesystem URI (``s3://bucket/tasks``): the readers take the
URI, and ``remote.RemoteDataset`` mirrors a local staging folder, which the writer writes, to it.

Nothing heavy is imported here: pyarrow and the optional readers are imported inside functions.
See ``datasets/SCHEMA.md`` for every column and the manifest's format.
"""

from __future__ import annotations

from taskforge.datasets.manifest import MANIFEST, Manifest, ShardInfo, read_manifest
from taskforge.datasets.reader import open, read_rows, read_tasks, shard_files, verify
from taskforge.datasets.remote import RemoteDataset, is_uri, staging_dir
from taskforge.datasets.schema import (
    REWARDS,
    TASKS,
    DatasetKind,
    reward_schema,
    task_schema,
)
from taskforge.datasets.writer import (
    DatasetWriter,
    WriterConfig,
    WriteResult,
    run_versions,
)

__all__ = [
    "MANIFEST",
    "REWARDS",
    "TASKS",
    "DatasetKind",
    "DatasetWriter",
    "Manifest",
    "RemoteDataset",
    "ShardInfo",
    "WriteResult",
    "WriterConfig",
    "is_uri",
    "open",
    "read_manifest",
    "read_rows",
    "read_tasks",
    "reward_schema",
    "run_versions",
    "shard_files",
    "staging_dir",
    "task_schema",
    "verify",
]

"""The task shard functions of earlier versions, now backed by :mod:`taskforge.datasets`.

Kept for the modules and tests that import them; new code uses ``taskforge.datasets`` directly.
Every read goes through the folder's manifest (``taskforge.datasets.verify``), and ``write_shard``
appends through a ``DatasetWriter``, so the manifest stays right.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from taskforge.datasets.reader import read_tasks, shard_files
from taskforge.datasets.schema import TASK_SCHEMA_VERSION, task_schema
from taskforge.errors import TaskforgeError

if TYPE_CHECKING:
    from taskforge.task import Task

__all__ = ["TASK_SCHEMA_VERSION", "read_shard", "read_tasks", "shard_paths", "task_schema", "write_shard"]


def shard_paths(directory: Path) -> list[Path]:
    """The task shards of a folder, in manifest order, after checking it against its manifest."""
    return shard_files(directory)


def read_shard(shard: Path) -> list[Task]:
    """The tasks of one shard of a verified folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from taskforge.datasets.reader import check_shard_file
    from taskforge.datasets.schema import TASKS
    from taskforge.task import Task

    check_shard_file(shard, TASKS)
    try:
        rows = pq.read_table(shard).to_pylist()
    except (pa.ArrowException, OSError) as err:
        raise TaskforgeError(f"cannot read shard {shard}: {err}", reason="corrupt_shard") from err
    return [Task.from_row(row) for row in rows]


def write_shard(tasks: Sequence[Task], out_dir: Path, *, name: str) -> list[Path]:
    """Append ``tasks`` to the task folder ``out_dir`` as shards ``NAME-NNNNN.parquet`` (``name``
    without ``.parquet``), skipping tasks already there; returns the shards written."""
    from taskforge.datasets.schema import TASKS
    from taskforge.datasets.writer import DatasetWriter, run_versions

    recipe = {}
    if (out_dir / "manifest.json").exists():
        from taskforge.datasets.manifest import read_manifest

        recipe = read_manifest(out_dir).recipe
    with DatasetWriter(out_dir, kind=TASKS, recipe=recipe, versions=run_versions()) as writer:
        result = writer.write((t.to_row() for t in tasks), prefix=name.removesuffix(".parquet"))
    return [out_dir / n for n in result.shards]

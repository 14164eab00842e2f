"""Parquet shards of task rows (pyarrow, zstd), written atomically.

Each shard is written to a temporary file in the output directory, fsynced, and renamed into
place, so a reader never sees half a shard. ``read_tasks`` reads every shard of a directory.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskforge.errors import TaskforgeError

if TYPE_CHECKING:
    import pyarrow as pa

    from taskforge.mine import Task

__all__ = ["TASK_SCHEMA_VERSION", "read_shard", "read_tasks", "shard_paths", "task_schema", "write_shard"]

TASK_SCHEMA_VERSION = 2


def task_schema() -> pa.Schema:
    import pyarrow as pa

    text, strings = pa.string(), pa.list_(pa.string())
    fields = [
        ("instance_id", text), ("repo", text), ("source", text), ("base_commit", text),
        ("source_commit", text), ("version", text),
        ("strategy", text), ("target", text), ("removed", strings), ("patch", text), ("test_patch", text),
        ("removal_patch", text), ("problem_statement", text), ("FAIL_TO_PASS", strings), ("PASS_TO_PASS", strings),
        ("hidden_tests", strings), ("image_name", text), ("environment", text), ("lines_removed", pa.int64()),
        ("validation", text), ("audit", text), ("seed", pa.int64()), ("taskforge_version", text),
    ]
    return pa.schema(fields, metadata={b"taskforge.schema": b"task", b"taskforge.schema_version": str(TASK_SCHEMA_VERSION).encode()})


def write_shard(tasks: Sequence[Task], out_dir: Path, *, name: str) -> Path:
    """Write ``tasks`` as ``out_dir/name``; atomic."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out_dir.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist([t.to_row() for t in tasks], schema=task_schema())
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out_dir)
    try:
        with os.fdopen(fd, "wb") as f:
            pq.write_table(table, f, compression="zstd", row_group_size=256)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; a shard is for sharing
        final = out_dir / name
        os.replace(tmp, final)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return final


def shard_paths(directory: Path) -> list[Path]:
    """The task shards of a directory, in name order (hidden temporaries left out)."""
    shards = sorted(p for p in directory.glob("*.parquet") if not p.name.startswith("."))
    if not shards:
        raise TaskforgeError(f"no task shards (*.parquet) in {directory}", reason="no_shards")
    return shards


def read_shard(shard: Path) -> list[Task]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from taskforge.mine import Task

    try:
        rows: Iterable[dict[str, Any]] = pq.read_table(shard).to_pylist()
    except (pa.ArrowException, OSError) as err:
        raise TaskforgeError(f"cannot read shard {shard}: {err}", reason="corrupt_shard") from err
    try:
        return [Task.from_row(row) for row in rows]
    except TypeError as err:
        raise TaskforgeError(f"shard {shard} does not hold task rows of this version: {err}", reason="schema_mismatch") from err


def read_tasks(directory: Path) -> list[Task]:
    """Every task in the directory's shards, in shard-name order."""
    return [task for shard in shard_paths(directory) for task in read_shard(shard)]

"""Bringing a dataset folder written by an older schema version to the current one, in place.

    taskforge migrate DIR

Tasks version 2 to 3 adds the difficulty record, which is computed from each row
(:func:`taskforge.difficulty.difficulty_of`), and empty solve rates. Rewards version 2 to 3 adds
``task_sha256``, the version of the task each row scored, as empty: nobody can tell now which
version an old row was about, so a resumed ``taskforge score`` scores those candidates again and
``taskforge rate`` and ``taskforge report`` count only rows of the task as it is. The
migration holds the folder's writer lock, writes every upgraded shard beside its old one
(``.NAME.next``, fsynced), then commits a manifest that names the new digests and version (the
one point where the folder changes version), then renames the new shards into place. A kill
before the commit leaves the old folder, whose stale ``.next`` files the next run deletes; a kill
after it leaves renames pending, which a reader reports and the next open for writing (or a second
``taskforge migrate``) finishes. Rows keep their order, keys and every old column's value.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from taskforge.datasets.card import write_card
from taskforge.datasets.manifest import (
    MANIFEST,
    fsync_dir,
    read_manifest,
    sha256_file,
    utc_now,
    write_manifest,
)
from taskforge.datasets.schema import KINDS
from taskforge.datasets.writer import WriterConfig, _ShardFile
from taskforge.difficulty import difficulty_of
from taskforge.errors import TaskforgeError

__all__ = ["Migration", "migrate"]


def _tasks_v2_to_v3(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, **difficulty_of(row).columns(), "solve_rate": None, "solve_attempts": 0}


def _rewards_v2_to_v3(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "task_sha256": ""}


_UPGRADES: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {
    ("tasks", 2): _tasks_v2_to_v3, ("rewards", 2): _rewards_v2_to_v3}
"""(kind, version) -> the function that makes a row of the next version."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Migration:
    """What :func:`migrate` did."""

    directory: Path
    before: int
    """The folder's schema version before."""
    after: int
    shards: int
    """Shards rewritten."""
    rows: int


def migrate(directory: Path, *, config: WriterConfig | None = None) -> Migration:
    """Upgrade ``directory`` to the current schema version of its kind (a no-op when it is current)."""
    directory = Path(directory)
    if not (directory / MANIFEST).exists():
        raise TaskforgeError(f"{directory} has no {MANIFEST}: not a dataset folder", reason="no_manifest")
    config = config or WriterConfig()
    lock = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            raise TaskforgeError(f"another process is writing to {directory}", reason="dataset_locked") from err
        return _migrate(directory, config)
    finally:
        os.close(lock)


def _migrate(directory: Path, config: WriterConfig) -> Migration:
    import pyarrow as pa
    import pyarrow.parquet as pq

    manifest = read_manifest(directory)
    listed = {s.name: s for s in manifest.shards}
    for pending in sorted(directory.glob(".*.parquet.next")):  # a killed migration or rewrite
        name = pending.name[1:].removesuffix(".next")
        if name in listed and sha256_file(pending) == listed[name].sha256:
            os.replace(pending, directory / name)
        else:
            pending.unlink()
    fsync_dir(directory)
    before = manifest.schema_version
    kind = KINDS.get(manifest.kind)
    if kind is None or before == kind.version:
        return Migration(directory=directory, before=before, after=before, shards=0, rows=0)
    if before > kind.version:
        raise TaskforgeError(f"{directory} holds {kind.name} v{before}, newer than this taskforge's v{kind.version}; "
                             "upgrade taskforge", reason="schema_version")
    steps = []
    for version in range(before, kind.version):
        upgrade = _UPGRADES.get((manifest.kind, version))
        if upgrade is None:
            raise TaskforgeError(f"{directory} holds {kind.name} v{before}; no migration from v{version} exists "
                                 f"(it predates taskforge.datasets.migrate): make it again", reason="schema_version")
        steps.append(upgrade)
    schema = kind.schema()
    rewritten: dict[str, tuple[int, str]] = {}
    rows = 0
    for shard in manifest.shards:
        try:
            old = pq.read_table(directory / shard.name).to_pylist()
        except (pa.ArrowException, OSError) as err:
            raise TaskforgeError(f"shard {directory / shard.name} is unreadable: {err}", reason="corrupt_shard") from err
        new = [_upgraded(row, steps) for row in old]
        writer = _ShardFile(directory, shard.name, schema, config)
        try:
            for start in range(0, len(new), config.row_group_rows):
                writer.add(pa.Table.from_pylist(new[start:start + config.row_group_rows], schema=schema))
            rewritten[shard.name] = writer.finish(directory / f".{shard.name}.next")
        except BaseException:
            writer.discard()
            raise
        rows += len(new)
    now = utc_now()
    manifest.shards = [replace(s, sha256=rewritten[s.name][1], bytes=rewritten[s.name][0], written_at=now)
                       for s in manifest.shards]
    manifest.schema_version = kind.version
    manifest.updated_at = now
    write_manifest(directory, manifest)  # the commit point
    for name in rewritten:
        os.replace(directory / f".{name}.next", directory / name)
    fsync_dir(directory)
    write_card(directory, kind)
    return Migration(directory=directory, before=before, after=kind.version, shards=len(rewritten), rows=rows)


def _upgraded(row: Mapping[str, Any], steps: list[Callable[[dict[str, Any]], dict[str, Any]]]) -> dict[str, Any]:
    out = dict(row)
    for step in steps:
        out = step(out)
    return out

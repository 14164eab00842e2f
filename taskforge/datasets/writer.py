"""Writing a dataset folder: shards put in place atomically, the manifest last, resumable.

    writer = DatasetWriter(out, kind=TASKS, recipe={"mine": asdict(config)}, versions=run_versions())
    result = writer.write((task.to_row() for task in tasks), prefix="tasks-iniconfig-9ce18aa30030-s0",
                          done={source: summary})

Each shard is written as a hidden temporary in the folder (``.NAME.*.tmp``; row group by row
group, as rows arrive), fsynced, and renamed into place; then the manifest, listing it, replaces
the old one atomically. So whatever kills the process, a reader sees only whole shards, and the
manifest always describes whole shards.

Opening a folder for writing resumes it:
- stale temporaries of a killed writer are deleted;
- a shard that is in place but not listed (killed between the rename and the manifest) was
  complete, fsynced and renamed, so it is checked and adopted into the manifest;
- an interrupted rewrite (``.NAME.next``, see :meth:`DatasetWriter.rewrite`) is finished if the
  manifest already names its digest, and dropped if not;
- a retracted shard (:meth:`DatasetWriter.retract`) whose file is still there (killed between
  the manifest and the unlink) is deleted;
- every listed shard is verified (size, sha256, schema), and the keys of its rows are loaded:
  :meth:`DatasetWriter.write` skips rows whose key is already there, so a run done twice never
  duplicates a row.
The folder also gets a dataset card (``README.md``, :mod:`taskforge.datasets.card`) whose YAML
header names the shards, so ``datasets.load_dataset(directory)`` reads it.
A folder made with another recipe, kind or schema version is refused, and only one writer at a
time may open a folder (an ``flock`` on the folder, released by the kernel however the process
ends).
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import re
import tempfile
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from taskforge.datasets.card import write_card
from taskforge.datasets.manifest import (
    MANIFEST,
    Manifest,
    Retraction,
    RunInfo,
    ShardInfo,
    fsync_dir,
    read_manifest,
    sha256_file,
    shareable,
    utc_now,
    write_manifest,
)
from taskforge.datasets.reader import check_listed, check_shard_file, visible_shards
from taskforge.datasets.schema import DatasetKind
from taskforge.errors import TaskforgeError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["DatasetWriter", "WriteResult", "WriterConfig", "run_versions"]

_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")
_TEMPORARY = re.compile(r"\.(?:manifest\.json|[^/]+\.parquet)\.[A-Za-z0-9_]+\.tmp")
"""What ``tempfile.mkstemp`` names the temporaries of shards and manifests."""


@dataclass(kw_only=True, slots=True)
class WriterConfig:
    """How shards are cut and compressed."""

    rows_per_shard: int = 2048
    """A shard is closed after this many rows; a larger batch makes several shards."""
    row_group_rows: int = 64
    """Rows per Parquet row group, the unit a reader fetches alone. Task rows are 10-200 KB
    uncompressed (patches and test lists), so a group stays in the low megabytes."""
    zstd_level: int = 9
    """zstd level: written once, read many times, so spend some time on the size."""

    def __post_init__(self) -> None:
        for name in ("rows_per_shard", "row_group_rows"):
            if getattr(self, name) < 1:
                raise ValueError(f"WriterConfig.{name} must be at least 1, got {getattr(self, name)}")
        if not 1 <= self.zstd_level <= 22:
            raise ValueError(f"WriterConfig.zstd_level must be in 1..22, got {self.zstd_level}")


@dataclass(kw_only=True, slots=True)
class WriteResult:
    """What one :meth:`DatasetWriter.write` did."""

    written: int = 0
    """Rows written."""
    skipped: int = 0
    """Rows skipped because their key was already in the folder (or earlier in the same batch)."""
    shards: list[str] = field(default_factory=list)
    """Names of the shards it wrote."""


def run_versions(**extra: str) -> dict[str, str]:
    """The versions that make a run's rows: taskforge, python, pyarrow, the platform, and ``extra``
    (the base image, say)."""
    import pyarrow as pa

    from taskforge import __version__

    return {"taskforge": __version__, "python": platform.python_version(), "pyarrow": pa.__version__,
            "platform": platform.platform(), **extra}


class _ShardFile:
    """One shard being written: a hidden temporary, row group by row group."""

    def __init__(self, directory: Path, name: str, schema: pa.Schema, config: WriterConfig) -> None:
        import pyarrow.parquet as pq

        fd, self.tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
        os.close(fd)
        self.name = name
        self.rows = 0
        self.writer: pq.ParquetWriter | None = pq.ParquetWriter(
            self.tmp, schema, compression="zstd", compression_level=config.zstd_level, write_statistics=True,
        )

    def add(self, table: pa.Table) -> None:
        assert self.writer is not None
        self.writer.write_table(table, row_group_size=table.num_rows)
        self.rows += table.num_rows

    def finish(self, final: Path) -> tuple[int, str]:
        """Close, fsync and rename to ``final``; returns its size and sha256."""
        assert self.writer is not None
        self.writer.close()
        self.writer = None
        with open(self.tmp, "rb") as f:
            os.fsync(f.fileno())
        shareable(self.tmp)
        digest = sha256_file(Path(self.tmp))
        size = os.stat(self.tmp).st_size
        os.replace(self.tmp, final)
        fsync_dir(final.parent)
        return size, digest

    def discard(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        Path(self.tmp).unlink(missing_ok=True)


class DatasetWriter:
    """Appends rows of one kind to a dataset folder; see the module docstring."""

    def __init__(
        self,
        directory: Path,
        *,
        kind: DatasetKind,
        recipe: Mapping[str, Any],
        versions: Mapping[str, str],
        config: WriterConfig | None = None,
        run_only: Collection[str] = (),
        defaults: Mapping[str, Any] | None = None,
    ) -> None:
        self.directory = directory
        self.run_only = tuple(run_only)
        """Dotted keys of ``recipe`` (``config.tracebacks``) that only change how a run goes, not
        what it writes: a run may resume a folder that an earlier run wrote with other values."""
        self.defaults: dict[str, Any] = json.loads(json.dumps(defaults or {}))
        """A recipe of default values: a key the manifest's recipe lacks (an option a later
        taskforge added) counts as its default there, which keeps the older behaviour, so a
        folder written before the option existed resumes when the option is left at it."""
        self.kind = kind
        self.config = config or WriterConfig()
        self.adopted: list[str] = []
        """Shards a killed run had put in place without listing them, adopted on opening."""
        self.keys: set[str] = set()
        """Keys of every row in the folder."""
        directory.mkdir(parents=True, exist_ok=True)
        # One writer per folder: a lock on the folder itself (no lock file is left behind), which the
        # kernel drops when the process dies, however it dies.
        self._lock = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            os.close(self._lock)
            raise TaskforgeError(f"another process is writing to {directory}", reason="dataset_locked") from err
        try:
            self._open(recipe, versions)
        except BaseException:
            self.close()
            raise

    def _open(self, recipe: Mapping[str, Any], versions: Mapping[str, str]) -> None:
        directory, kind = self.directory, self.kind
        resolved: dict[str, Any] = json.loads(json.dumps(recipe))  # as the manifest holds it (tuples become lists)
        started = utc_now()
        if (directory / MANIFEST).exists():
            manifest = read_manifest(directory)
            self._check_compatible(manifest, resolved)
            manifest.runs.append(RunInfo(started_at=started, versions=dict(versions)))
            self._recover(manifest)
        else:
            if visible_shards(directory):
                raise TaskforgeError(f"{directory} holds shards but no {MANIFEST}; write to a new folder",
                                     reason="no_manifest")
            manifest = Manifest(kind=kind.name, schema_version=kind.version, recipe=resolved, created_at=started,
                                updated_at=started, runs=[RunInfo(started_at=started, versions=dict(versions))])
        manifest.updated_at = started
        self._manifest = manifest
        write_manifest(directory, manifest)  # from here on the folder is a valid dataset, if an empty one
        write_card(directory, kind)  # so datasets.load_dataset(directory) reads the shards

    def close(self) -> None:
        """Release the folder (every write is already durable; nothing else is pending)."""
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def manifest(self) -> Manifest:
        return self._manifest

    @property
    def done(self) -> Mapping[str, Mapping[str, Any]]:
        """Finished units of work recorded by earlier writes (see ``write(done=...)``)."""
        return self._manifest.done

    def _check_compatible(self, manifest: Manifest, recipe: Mapping[str, Any]) -> None:
        if manifest.kind != self.kind.name or manifest.schema_version != self.kind.version:
            raise TaskforgeError(
                f"{self.directory} holds {manifest.kind} v{manifest.schema_version}, not {self.kind.name} "
                f"v{self.kind.version}; write to a new folder"
                + (f", or run `taskforge migrate {self.directory}`" if manifest.schema_version < self.kind.version else ""),
                reason="schema_version")
        before = _without(_filled(manifest.recipe, self.defaults), self.run_only)
        now = _without(_filled(recipe, self.defaults), self.run_only)  # follow passes the folder's own recipe
        if before != now:
            changed = ", ".join(f"{key} ({old!r} then, {new!r} now)" for key, old, new in _differences(before, now))
            raise TaskforgeError(
                f"{self.directory} was written with another recipe (differs in {changed}); resuming needs "
                "the same one, so write to a new folder", reason="recipe_mismatch")

    def _recover(self, manifest: Manifest) -> None:
        """Clean up after a killed writer (module docstring); loads the keys of every row."""
        listed = {s.name: s for s in manifest.shards}
        for pending in sorted(self.directory.glob(".*.parquet.next")):
            name = pending.name[1:].removesuffix(".next")
            if name in listed and sha256_file(pending) == listed[name].sha256:
                os.replace(pending, self.directory / name)  # the manifest was committed: finish the rename
            else:
                pending.unlink()
        for stale in self.directory.iterdir():
            if _TEMPORARY.fullmatch(stale.name) and stale.is_file():
                stale.unlink()
        fsync_dir(self.directory)
        retracted = {r.shard.name for r in manifest.retracted} - set(listed)
        for name in retracted:
            (self.directory / name).unlink(missing_ok=True)  # the manifest had dropped it: finish the retraction
        check_listed(self.directory, manifest)
        for shard in manifest.shards:
            self.keys.update(self._keys_of(self.directory / shard.name))
        for path in visible_shards(self.directory):
            if path.name in listed:
                continue
            rows = check_shard_file(path, self.kind)
            new_keys = self._keys_of(path)
            if new_keys & self.keys or len(new_keys) != rows:
                raise TaskforgeError(f"unlisted shard {path} repeats rows of the dataset; remove it",
                                     reason="unlisted_shard")
            self.keys |= new_keys
            written = datetime.fromtimestamp(path.stat().st_mtime, UTC).replace(microsecond=0)
            manifest.shards.append(ShardInfo(
                name=path.name, rows=rows, sha256=sha256_file(path), bytes=path.stat().st_size,
                written_at=written.isoformat().replace("+00:00", "Z"), run=len(manifest.runs) - 2,
            ))
            self.adopted.append(path.name)

    def _keys_of(self, path: Path) -> set[str]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path, columns=list(self.kind.key))
        except (pa.ArrowException, OSError) as err:
            raise TaskforgeError(f"shard {path} is unreadable: {err}", reason="corrupt_shard") from err
        columns = [table.column(k).to_pylist() for k in self.kind.key]
        return {"\0".join(str(v) for v in values) for values in zip(*columns, strict=True)}

    def _table(self, rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
        import pyarrow as pa

        try:
            table = pa.Table.from_pylist(rows, schema=schema)
        except (pa.ArrowException, TypeError, ValueError) as err:
            raise TaskforgeError(f"rows do not fit the {self.kind.name} schema: {err}", reason="bad_row") from err
        for name in table.column_names:
            if table.column(name).null_count and name not in self.kind.nullable:
                raise TaskforgeError(f"{self.kind.name} column {name} may not be null", reason="bad_row")
        return table

    def _next_name(self, prefix: str) -> str:
        if not _PREFIX.fullmatch(prefix):
            raise ValueError(f"shard prefix {prefix!r} must be letters, digits and ._+- (not starting with one of them)")
        pattern = re.compile(re.escape(prefix) + r"-(\d{5,})\.parquet")
        names = [s.name for s in self._manifest.shards] + [r.shard.name for r in self._manifest.retracted]
        taken = [int(m.group(1)) for name in names if (m := pattern.fullmatch(name))]  # a retracted name is not reused
        index = max(taken, default=-1) + 1
        while (self.directory / f"{prefix}-{index:05d}.parquet").exists():
            index += 1
        return f"{prefix}-{index:05d}.parquet"

    def write(
        self, rows: Iterable[Mapping[str, Any]], *, prefix: str, done: Mapping[str, Mapping[str, Any]] | None = None
    ) -> WriteResult:
        """Write the rows whose key is new into shards named ``PREFIX-NNNNN.parquet``; ``done``
        is recorded in the manifest with the last of them (or alone, if no row was new)."""
        schema = self.kind.schema()
        names = set(schema.names)
        result = WriteResult()
        batch: list[dict[str, Any]] = []
        shard: _ShardFile | None = None
        try:
            for row in rows:
                if set(row) != names:
                    raise TaskforgeError(f"a {self.kind.name} row has columns {sorted(set(row) ^ names)} wrong",
                                         reason="bad_row")
                key = self.kind.key_of(dict(row))
                if key in self.keys:
                    result.skipped += 1
                    continue
                self.keys.add(key)
                batch.append(dict(row))
                if len(batch) < self.config.row_group_rows:
                    continue
                shard = shard or _ShardFile(self.directory, self._next_name(prefix), schema, self.config)
                shard.add(self._table(batch, schema))
                batch = []
                if shard.rows >= self.config.rows_per_shard:
                    self._commit(shard, result)
                    shard = None
            if batch:
                shard = shard or _ShardFile(self.directory, self._next_name(prefix), schema, self.config)
                shard.add(self._table(batch, schema))
            if shard is not None:
                self._commit(shard, result, done=done)
                shard = None
            elif done:
                self._record_done(done, result.shards)
                self._save()
        except BaseException:
            if shard is not None:
                shard.discard()
            raise
        return result

    def _commit(self, shard: _ShardFile, result: WriteResult,
                done: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        size, digest = shard.finish(self.directory / shard.name)
        self._manifest.shards.append(ShardInfo(name=shard.name, rows=shard.rows, sha256=digest, bytes=size,
                                               written_at=utc_now(), run=len(self._manifest.runs) - 1))
        result.written += shard.rows
        result.shards.append(shard.name)
        if done:
            self._record_done(done, result.shards)
        self._save()

    def retract(self, names: Collection[str], *, reason: str, done: Collection[str] = ()) -> int:
        """Take the shards ``names`` out of the dataset, and the units of work ``done`` out of the
        manifest's finished ones (so a resumed run does them again); returns the rows taken out.

        The manifest, which lists them under ``retracted`` with ``reason``, is the commit point;
        then the files are deleted. A kill in between leaves files that readers refuse as retracted
        and the next writer deletes.
        """
        gone = [s for s in self._manifest.shards if s.name in set(names)]
        if unknown := set(names) - {s.name for s in gone}:
            raise TaskforgeError(f"{self.directory} lists no shard {', '.join(sorted(unknown))}", reason="missing_shard")
        keys = set().union(*(self._keys_of(self.directory / s.name) for s in gone)) if gone else set()
        run, now = len(self._manifest.runs) - 1, utc_now()
        undone = tuple(k for k in done if k in self._manifest.done)
        self._manifest.shards = [s for s in self._manifest.shards if s not in gone]
        self._manifest.retracted += [Retraction(shard=s, reason=reason, retracted_at=now, run=run, done=undone)
                                     for s in gone]
        for key in undone:
            self._manifest.done.pop(key)
        self._save()
        self.keys -= keys
        for shard in gone:
            (self.directory / shard.name).unlink(missing_ok=True)
        fsync_dir(self.directory)
        return sum(s.rows for s in gone)

    def column(self, name: str) -> dict[str, Any]:
        """The value of column ``name`` in every row the dataset holds, by key."""
        import pyarrow.parquet as pq

        values: dict[str, Any] = {}
        for shard in self._manifest.shards:
            table = pq.read_table(self.directory / shard.name,
                                  columns=list(dict.fromkeys([*self.kind.key, name]))).to_pydict()
            keys = zip(*(table[k] for k in self.kind.key), strict=True)
            values.update(("\0".join(str(v) for v in key), value) for key, value in zip(keys, table[name], strict=True))
        return values

    def drop(self, keys: Collection[str], *, reason: str, prefix: str) -> int:
        """Take the rows with ``keys`` out of the dataset (a reward row scored against an earlier
        version of its task, say); returns the rows taken out.

        Each shard holding one is retracted with ``reason`` and its other rows are written to a new
        shard (``PREFIX-NNNNN``), as ``.NAME.next`` (fsynced) first. The manifest that lists the
        new shards and the retractions is the commit point, as for :meth:`rewrite` and
        :meth:`retract`: a kill before it leaves the folder as it was, after it, the renames and
        deletions that the next writer finishes.
        """
        import pyarrow.parquet as pq

        wanted = set(keys) & self.keys
        if not wanted:
            return 0
        hit = [s for s in self._manifest.shards if self._keys_of(self.directory / s.name) & wanted]
        fresh: list[tuple[ShardInfo, Path]] = []
        try:
            for old in hit:
                kept = [r for r in pq.read_table(self.directory / old.name).to_pylist()
                        if self.kind.key_of(r) not in wanted]
                if not kept:
                    continue
                name = self._next_name(prefix)
                pending, size, digest = self._pending(name, kept)
                fresh.append((ShardInfo(name=name, rows=len(kept), sha256=digest, bytes=size, written_at=utc_now(),
                                        run=len(self._manifest.runs) - 1), pending))
                self._manifest.shards.append(fresh[-1][0])  # so that the next name is not this one
        except BaseException:
            for info, pending in fresh:
                self._manifest.shards.remove(info)
                pending.unlink(missing_ok=True)
            raise
        run, now = len(self._manifest.runs) - 1, utc_now()
        self._manifest.shards = [s for s in self._manifest.shards if s not in hit]
        self._manifest.retracted += [Retraction(shard=s, reason=reason, retracted_at=now, run=run) for s in hit]
        self._save()
        for info, pending in fresh:
            os.replace(pending, self.directory / info.name)
        for shard in hit:
            (self.directory / shard.name).unlink(missing_ok=True)
        fsync_dir(self.directory)
        self.keys -= wanted
        return len(wanted)

    def _pending(self, name: str, rows: list[dict[str, Any]]) -> tuple[Path, int, str]:
        """``rows`` written as shard ``name``'s pending file ``.NAME.next`` (fsynced), which the
        manifest's next commit makes the shard: (its path, size, sha256)."""
        schema = self.kind.schema()
        shard = _ShardFile(self.directory, name, schema, self.config)
        try:
            for start in range(0, len(rows), self.config.row_group_rows):
                shard.add(self._table(rows[start : start + self.config.row_group_rows], schema))
            pending = self.directory / f".{name}.next"
            size, digest = shard.finish(pending)
        except BaseException:
            shard.discard()
            raise
        return pending, size, digest

    def _record_done(self, done: Mapping[str, Mapping[str, Any]], shards: list[str]) -> None:
        """Record finished units, each with the shards written for it (``shards``: this call's
        and, for a unit done again, the ones it had), which :meth:`retract` can then name."""
        listed = {s.name for s in self._manifest.shards}
        for key, value in done.items():
            before = [n for n in self._manifest.done.get(key, {}).get("shards", []) if n in listed]
            self._manifest.done[key] = {**dict(value), "shards": [*before, *(n for n in shards if n not in before)]}

    def _save(self) -> None:
        self._manifest.updated_at = utc_now()
        write_manifest(self.directory, self._manifest)

    def rewrite(self, name: str, rows: Iterable[Mapping[str, Any]]) -> ShardInfo:
        """Replace the rows of shard ``name`` by ``rows``, which must have the same keys (``taskforge
        audit`` stores fresh audits this way).

        The new shard goes to ``.NAME.next`` (fsynced), then the manifest names its digest (the
        commit point), then it is renamed over ``NAME``. A kill before the manifest leaves the old
        shard valid; after it, readers report the pending rewrite until the folder is opened for
        writing again, which finishes it.
        """
        old = self._manifest.shard(name)
        if old is None:
            raise TaskforgeError(f"{self.directory} has no shard {name}", reason="missing_shard")
        listed = [dict(r) for r in rows]
        if {self.kind.key_of(r) for r in listed} != self._keys_of(self.directory / name) or len(listed) != old.rows:
            raise TaskforgeError(f"a rewrite of {name} must keep exactly its rows (by key)", reason="bad_row")
        pending, size, digest = self._pending(name, listed)
        info = replace(old, sha256=digest, bytes=size, written_at=utc_now(), run=len(self._manifest.runs) - 1)
        self._manifest.shards[self._manifest.shards.index(old)] = info
        self._save()
        os.replace(pending, self.directory / name)
        fsync_dir(self.directory)
        return info


def _filled(recipe: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``recipe`` with every key it lacks taken from ``defaults``, at any depth."""
    copy: dict[str, Any] = json.loads(json.dumps(recipe))
    for key, value in defaults.items():
        if key not in copy:
            copy[key] = value
        elif isinstance(copy[key], dict) and isinstance(value, dict):
            copy[key] = _filled(copy[key], value)
    return copy


def _differences(before: Any, now: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """The dotted keys whose values differ between two recipes, with both values."""
    if isinstance(before, dict) and isinstance(now, dict):
        return [d for key in sorted(set(before) | set(now))
                for d in _differences(before.get(key), now.get(key), f"{prefix}{key}.")]
    return [] if before == now else [(prefix.rstrip("."), before, now)]


def _without(recipe: Mapping[str, Any], dotted: Iterable[str]) -> dict[str, Any]:
    """``recipe`` without the dotted keys (``config.tracebacks``), wherever they are present."""
    copy: dict[str, Any] = json.loads(json.dumps(recipe))
    for key in dotted:
        *parents, last = key.split(".")
        node: Any = copy
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    return copy

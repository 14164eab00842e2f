"""Reading a dataset folder, after checking it against its manifest.

:func:`verify` checks that the folder's visible shards are exactly the ones its manifest lists, and
that each has the listed size, sha256, row count and schema; any difference raises a
``TaskforgeError`` whose reason says which: ``unlisted_shard``, ``missing_shard``,
``corrupt_shard``, ``schema_mismatch`` (or ``no_manifest``/``bad_manifest``/``schema_version``).
:func:`open` returns a ``pyarrow.dataset.Dataset`` of a verified folder; :func:`shard_files` gives
its shard paths for other readers (``datasets.load_dataset("parquet", data_files=...)``, DuckDB's
``read_parquet``, Ray Data's ``read_parquet``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskforge.datasets.manifest import Manifest, read_manifest, sha256_file
from taskforge.datasets.schema import DatasetKind, get_kind
from taskforge.errors import TaskforgeError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads

    from taskforge.mine import Task

__all__ = ["check_listed", "check_shard_file", "open", "read_rows", "read_tasks", "shard_files", "verify", "visible_shards"]


def visible_shards(directory: Path) -> list[Path]:
    """The ``*.parquet`` files directly in ``directory`` that a reader would see (dot files are
    temporaries of a writer and are not part of any dataset)."""
    return sorted(p for p in directory.glob("*.parquet") if not p.name.startswith(".") and p.is_file())


def _same_columns(actual: pa.Schema, expected: pa.Schema) -> bool:
    return [(f.name, f.type) for f in actual] == [(f.name, f.type) for f in expected]


def check_shard_file(path: Path, kind: DatasetKind, *, rows: int | None = None) -> int:
    """Check that ``path`` is a readable shard of ``kind`` (its footer, schema and version, and
    ``rows`` if given); returns its row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(path)
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as err:
        raise TaskforgeError(f"shard {path} is unreadable: {err}", reason="corrupt_shard") from err
    expected = kind.schema()
    if not _same_columns(schema, expected):
        raise TaskforgeError(f"shard {path} does not have the columns of {kind.name} v{kind.version}: {schema.names}",
                             reason="schema_mismatch")
    version = (schema.metadata or {}).get(b"taskforge.schema_version", b"?").decode()
    if version != str(kind.version):
        raise TaskforgeError(f"shard {path} has {kind.name} schema version {version}, not {kind.version}",
                             reason="schema_mismatch")
    if rows is not None and meta.num_rows != rows:
        raise TaskforgeError(f"shard {path} holds {meta.num_rows} rows, but the manifest lists {rows}",
                             reason="corrupt_shard")
    return int(meta.num_rows)


def verify(directory: Path, *, digests: bool = True) -> Manifest:
    """Check the folder against its manifest (see the module docstring); returns the manifest.

    ``digests=False`` skips hashing the shards (their size, footer and schema are still checked).
    """
    manifest = read_manifest(directory)
    kind = get_kind(manifest.kind)
    if manifest.schema_version != kind.version:
        raise TaskforgeError(f"{directory} holds {kind.name} schema version {manifest.schema_version}; this taskforge "
                             f"reads version {kind.version}", reason="schema_version")
    check_listed(directory, manifest, digests=digests)
    listed = {s.name for s in manifest.shards}
    for path in visible_shards(directory):
        if path.name not in listed:
            raise TaskforgeError(
                f"shard {path} is not listed in {directory}/manifest.json: a write was interrupted after the shard "
                "was in place (run the same command again to resume; it adopts the shard), or the file was "
                "copied in (remove it)", reason="unlisted_shard")
    return manifest


def check_listed(directory: Path, manifest: Manifest, *, digests: bool = True) -> None:
    """Check every shard the manifest lists: present, with its size, sha256, rows and schema."""
    kind = get_kind(manifest.kind)
    for shard in manifest.shards:
        path = directory / shard.name
        pending = (" (a rewrite of it was interrupted; open the folder for writing again, e.g. rerun the command, "
                   "to finish it)") if (directory / f".{shard.name}.next").exists() else ""
        if not path.is_file():
            raise TaskforgeError(f"shard {path} is listed in the manifest but missing{pending}", reason="missing_shard")
        size = path.stat().st_size
        if size != shard.bytes or (digests and sha256_file(path) != shard.sha256):
            what = f"{size} bytes, not {shard.bytes}" if size != shard.bytes else "its sha256 differs"
            raise TaskforgeError(f"shard {path} does not match the manifest ({what}): it is corrupt{pending}",
                                 reason="corrupt_shard")
        check_shard_file(path, kind, rows=shard.rows)


def shard_files(directory: Path, *, digests: bool = True) -> list[Path]:
    """The verified folder's shards, in manifest order."""
    return [directory / s.name for s in verify(directory, digests=digests).shards]


def open(directory: Path | str, *, digests: bool = True) -> pads.Dataset:
    """A ``pyarrow.dataset.Dataset`` of the folder's rows, after :func:`verify`."""
    import pyarrow.dataset as pads

    directory = Path(directory)
    manifest = verify(directory, digests=digests)
    schema = get_kind(manifest.kind).schema()
    return pads.dataset([str(directory / s.name) for s in manifest.shards], schema=schema, format="parquet")


def read_rows(directory: Path | str, *, digests: bool = True) -> list[dict[str, Any]]:
    """Every row of the folder as a dict, shard by shard in manifest order, after :func:`verify`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory = Path(directory)
    rows: list[dict[str, Any]] = []
    for path in shard_files(directory, digests=digests):
        try:
            rows += pq.read_table(path).to_pylist()
        except (pa.ArrowException, OSError) as err:
            raise TaskforgeError(f"shard {path} is unreadable: {err}", reason="corrupt_shard") from err
    return rows


def read_tasks(directory: Path | str) -> list[Task]:
    """Every task of a task folder, in manifest order."""
    from taskforge.mine import Task

    directory = Path(directory)
    if read_manifest(directory).kind != "tasks":
        raise TaskforgeError(f"{directory} does not hold task rows", reason="wrong_kind")
    return [Task.from_row(row) for row in read_rows(directory)]


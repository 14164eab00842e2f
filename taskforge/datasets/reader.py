"""Reading a dataset folder, after checking it against its manifest.

:func:`verify` checks that the folder's visible shards are exactly the ones its manifest lists, and
that each has the listed size, sha256, row count and schema; any difference raises a
``TaskforgeError`` whose reason says which: ``unlisted_shard``, ``missing_shard``,
``corrupt_shard``, ``schema_mismatch`` (or ``no_manifest``/``bad_manifest``/``schema_version``).
:func:`open` returns a ``pyarrow.dataset.Dataset`` of a verified folder; :func:`shard_files` gives
its shard paths for other readers (``datasets.load_dataset("parquet", data_files=...)``, DuckDB's
``read_parquet``, Ray Data's ``read_parquet``).

:func:`open`, :func:`read_rows` and :func:`read_tasks` also take a pyarrow filesystem URI
(``s3://bucket/tasks``, ``file:///srv/tasks``; see ``remote``). There the manifest is the whole
truth: each listed shard must be present with its size, row count and schema (and sha256, which
means reading it, when ``digests`` is true), and files it does not list are ignored, since a push
cut short may leave shards in place before the manifest that lists them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from taskforge.datasets.manifest import Manifest, read_manifest, sha256_file
from taskforge.datasets.remote import (
    is_uri,
    open_uri,
    read_remote_manifest,
    sha256_remote,
)
from taskforge.datasets.schema import DatasetKind, get_kind
from taskforge.errors import TaskforgeError

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads
    import pyarrow.fs as pafs

    from taskforge.task import Task

__all__ = ["check_listed", "check_shard_file", "open", "read_rows", "read_tasks", "shard_files", "verify", "visible_shards"]


def visible_shards(directory: Path) -> list[Path]:
    """The ``*.parquet`` files directly in ``directory`` that a reader would see (dot files are
    temporaries of a writer and are not part of any dataset)."""
    return sorted(p for p in directory.glob("*.parquet") if not p.name.startswith(".") and p.is_file())


def _same_columns(actual: pa.Schema, expected: pa.Schema) -> bool:
    return [(f.name, f.type) for f in actual] == [(f.name, f.type) for f in expected]


def check_shard_file(path: Path | str, kind: DatasetKind, *, rows: int | None = None,
                     filesystem: pafs.FileSystem | None = None) -> int:
    """Check that ``path`` (in ``filesystem``, if given) is a readable shard of ``kind`` (its
    footer, schema and version, and ``rows`` if given); returns its row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(path, filesystem=filesystem)
        schema = pq.read_schema(path, filesystem=filesystem)
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
    _readable_kind(directory, manifest)
    check_listed(directory, manifest, digests=digests)
    listed = {s.name for s in manifest.shards}
    retracted = {r.shard.name for r in manifest.retracted}
    for path in visible_shards(directory):
        if path.name in retracted and path.name not in listed:
            raise TaskforgeError(
                f"shard {path} was retracted from {directory} but is still there: the retraction was interrupted "
                "(open the folder for writing again, e.g. rerun the command, to finish it)", reason="unlisted_shard")
        if path.name not in listed:
            raise TaskforgeError(
                f"shard {path} is not listed in {directory}/manifest.json: a write was interrupted after the shard "
                "was in place (run the same command again to resume; it adopts the shard), or the file was "
                "copied in (remove it)", reason="unlisted_shard")
    return manifest


def _readable_kind(where: Path | str, manifest: Manifest) -> DatasetKind:
    kind = get_kind(manifest.kind)
    if manifest.schema_version != kind.version:
        hint = (f": run `taskforge migrate {where}`" if manifest.schema_version < kind.version
                else ": upgrade taskforge")
        raise TaskforgeError(f"{where} holds {kind.name} schema version {manifest.schema_version}; this taskforge "
                             f"reads version {kind.version}{hint}", reason="schema_version")
    return kind


def check_listed(directory: Path, manifest: Manifest, *, digests: bool = True) -> None:
    """Check every shard the manifest lists: present, with its size, sha256, rows and schema."""
    kind = get_kind(manifest.kind)
    for shard in manifest.shards:
        path = directory / shard.name
        pending = (" (a rewrite of it, or a drop of rows, was interrupted; open the folder for writing again, e.g. "
                   "rerun the command, to finish it)") if (directory / f".{shard.name}.next").exists() else ""
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


def _remote_manifest(uri: str) -> tuple[pafs.FileSystem, str, Manifest]:
    filesystem, root = open_uri(uri)
    manifest = read_remote_manifest(filesystem, root, where=uri.rstrip("/"))
    if manifest is None:
        raise TaskforgeError(f"{uri} has no manifest.json: it is not a taskforge dataset", reason="no_manifest")
    return filesystem, root, manifest


def _verify_uri(uri: str, *, digests: bool) -> tuple[pafs.FileSystem, list[str], Manifest]:
    """Check the remote dataset's listed shards (see the module docstring); returns the
    filesystem, the shards' paths in it, and the manifest."""
    import pyarrow.fs as pafs

    filesystem, root, manifest = _remote_manifest(uri)
    kind = _readable_kind(uri, manifest)
    listing = filesystem.get_file_info(pafs.FileSelector(root, allow_not_found=True))
    sizes = {info.base_name: info.size for info in listing if info.type == pafs.FileType.File}
    paths = []
    for shard in manifest.shards:
        path, where = f"{root}/{shard.name}", f"{uri.rstrip('/')}/{shard.name}"
        if shard.name not in sizes:
            raise TaskforgeError(f"shard {where} is listed in the manifest but missing", reason="missing_shard")
        size = sizes[shard.name]
        if size != shard.bytes or (digests and sha256_remote(filesystem, path)[0] != shard.sha256):
            what = f"{size} bytes, not {shard.bytes}" if size != shard.bytes else "its sha256 differs"
            raise TaskforgeError(f"shard {where} does not match the manifest ({what}): it is corrupt",
                                 reason="corrupt_shard")
        check_shard_file(path, kind, rows=shard.rows, filesystem=filesystem)
        paths.append(path)
    return filesystem, paths, manifest


def _verified(target: Path | str, *, digests: bool) -> tuple[pafs.FileSystem | None, list[str], Manifest]:
    if is_uri(target):
        return _verify_uri(str(target), digests=digests)
    directory = Path(target)
    manifest = verify(directory, digests=digests)
    return None, [str(directory / s.name) for s in manifest.shards], manifest


def open(target: Path | str, *, digests: bool = True) -> pads.Dataset:
    """A ``pyarrow.dataset.Dataset`` of the folder's (or URI's) rows, after :func:`verify`."""
    import pyarrow.dataset as pads

    filesystem, paths, manifest = _verified(target, digests=digests)
    schema = get_kind(manifest.kind).schema()
    return pads.dataset(paths, schema=schema, format="parquet", filesystem=filesystem)


def read_rows(target: Path | str, *, digests: bool = True) -> list[dict[str, Any]]:
    """Every row of the folder (or URI) as a dict, shard by shard in manifest order, after :func:`verify`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    filesystem, paths, _ = _verified(target, digests=digests)
    rows: list[dict[str, Any]] = []
    for path in paths:
        try:
            rows += pq.read_table(path, filesystem=filesystem).to_pylist()
        except (pa.ArrowException, OSError) as err:
            raise TaskforgeError(f"shard {path} is unreadable: {err}", reason="corrupt_shard") from err
    return rows


def read_tasks(target: Path | str) -> list[Task]:
    """Every task of a task folder (or URI), in manifest order."""
    from taskforge.task import Task

    manifest = _remote_manifest(str(target))[2] if is_uri(target) else read_manifest(Path(target))
    if manifest.kind != "tasks":
        raise TaskforgeError(f"{target} does not hold task rows", reason="wrong_kind")
    return [Task.from_row(row) for row in read_rows(target)]

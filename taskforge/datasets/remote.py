"""Datasets at a pyarrow filesystem URI (``s3://bucket/tasks``, ``gs://...``, ``hdfs://...``,
``file:///srv/tasks``): a local staging folder mirrored to the remote folder.

    remote = RemoteDataset("s3://bucket/tasks", staging_dir("s3://bucket/tasks"))
    remote.pull(extra=("mine-summary.json",))      # the remote dataset into the staging folder
    with DatasetWriter(remote.staging, ...) as writer:
        writer.write(rows, prefix=...)             # the local engine: atomic, resumable
    remote.push(extra=("mine-summary.json",))      # new shards, then the manifest, then the extras

The writer only ever writes to the local staging folder, so every guarantee of ``writer`` holds
there; this module copies whole files between the two folders.

- :meth:`RemoteDataset.push` uploads each listed shard the remote lacks, then the manifest, then
  the sidecar files. Every file goes to a hidden temporary (``.tmp-NAME-RANDOM``) in the remote
  folder and is moved to its name, and the manifest goes last: readers trust only what the
  manifest lists, so a push cut short leaves the remote dataset as it was (plus unlisted shards
  and temporaries, which the next push removes or lists).
- :meth:`RemoteDataset.pull` brings the remote manifest and its shards (each checked against its
  sha256) into the staging folder. If the staging folder is already ahead of the remote (it lists
  every remote shard with the same digest: a push that never finished), it is kept as it is, so
  that the work it holds gets pushed and not thrown away.

One writer at a time per remote dataset, as for a local one (the lock is on the staging folder,
so two machines must not write to the same URI).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from taskforge.datasets.manifest import (
    MANIFEST,
    Manifest,
    fsync_dir,
    read_manifest,
    sha256_file,
    shareable,
    write_atomic,
)
from taskforge.errors import TaskforgeError

if TYPE_CHECKING:
    import pyarrow.fs as pafs

__all__ = ["RemoteDataset", "is_uri", "open_uri", "read_remote_manifest", "sha256_remote", "staging_dir"]

_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+://")
"""A scheme of two characters or more (``C://`` is a drive letter), then ``://``."""
_TEMPORARY = ".tmp-"
_BLOCK = 1 << 20


def is_uri(target: str | Path) -> bool:
    """Whether ``target`` is a filesystem URI (``s3://...``, ``file:///...``) rather than a local path.

    The test is on the form only; a scheme pyarrow does not know fails in :func:`open_uri` with
    reason ``bad_uri``, rather than quietly becoming a local folder named ``foo:``.
    """
    return isinstance(target, str) and _URI.match(target) is not None


def open_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem of ``uri`` and the folder's path in it (``pyarrow.fs.FileSystem.from_uri``)."""
    import pyarrow as pa
    import pyarrow.fs as pafs

    try:
        filesystem, path = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowException, OSError) as err:
        raise TaskforgeError(f"{uri} is not a filesystem URI pyarrow can open: {err}", reason="bad_uri") from err
    return filesystem, path.rstrip("/")


def staging_dir(uri: str) -> Path:
    """The default local staging folder of a remote dataset: under the cache root, one per URI."""
    from taskforge.paths import cache_root

    key = uri.rstrip("/")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", key.rsplit("/", 1)[-1]).strip(".-") or "dataset"
    return cache_root() / "remote-datasets" / f"{slug}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def sha256_remote(filesystem: pafs.FileSystem, path: str) -> tuple[str, int]:
    """sha256 (hex) and size of a remote file, read as a stream."""
    digest = hashlib.sha256()
    size = 0
    with filesystem.open_input_stream(path, compression=None) as f:
        while block := f.read(_BLOCK):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def read_remote_manifest(filesystem: pafs.FileSystem, root: str, *, where: str | None = None) -> Manifest | None:
    """The manifest of the remote folder ``root``; ``None`` if it has none (an empty dataset)."""
    found = _read_manifest_bytes(filesystem, root, where=where or root)
    return None if found is None else found[1]


def _read_manifest_bytes(filesystem: pafs.FileSystem, root: str, *, where: str) -> tuple[bytes, Manifest] | None:
    data = _read_small(filesystem, f"{root}/{MANIFEST}")
    if data is None:
        return None
    try:
        return data, Manifest.from_json(json.loads(data))
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise TaskforgeError(f"{where}/{MANIFEST} is malformed: {err}", reason="bad_manifest") from err


def _read_small(filesystem: pafs.FileSystem, path: str) -> bytes | None:
    try:
        with filesystem.open_input_stream(path, compression=None) as f:
            return bytes(f.read())
    except FileNotFoundError:
        return None


class RemoteDataset:
    """A dataset at ``uri``, written through the local folder ``staging``; see the module docstring."""

    def __init__(self, uri: str, staging: Path) -> None:
        self.uri = uri.rstrip("/")
        self.staging = staging
        """The local folder a ``DatasetWriter`` writes to."""
        self.filesystem, self.root = open_uri(uri)

    def _path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def pull(self, extra: Sequence[str] = ()) -> int:
        """Bring the remote dataset into the staging folder (see the module docstring): each shard
        the remote manifest lists that the staging folder lacks (or holds with another sha256), then
        the manifest, then the sidecar files ``extra`` (those the remote has). Returns the number
        of shards copied. A remote shard that does not match its listing raises ``corrupt_shard``;
        a missing one ``missing_shard``."""
        found = _read_manifest_bytes(self.filesystem, self.root, where=self.uri)
        if found is None:
            return 0  # nothing there yet: an empty dataset
        data, remote = found
        self.staging.mkdir(parents=True, exist_ok=True)
        local = read_manifest(self.staging) if (self.staging / MANIFEST).exists() else None
        copied = 0
        retracted = {(r.shard.name, r.shard.sha256) for r in local.retracted} if local is not None else set()
        for shard in remote.shards:
            path = self.staging / shard.name
            if (shard.name, shard.sha256) in retracted:
                continue  # taken out here, by a run whose push has not happened yet
            if path.is_file() and path.stat().st_size == shard.bytes and sha256_file(path) == shard.sha256:
                continue
            self._download(shard.name, sha256=shard.sha256, size=shard.bytes)
            copied += 1
        if local is not None and _ahead(local, remote):
            return copied  # a push that did not finish: keep the staging folder's manifest and sidecars
        for name in extra:
            sidecar = _read_small(self.filesystem, self._path(name))
            if sidecar is None:
                (self.staging / name).unlink(missing_ok=True)  # the sidecar follows the dataset it came with
            else:
                write_atomic(self.staging / name, sidecar)
        write_atomic(self.staging / MANIFEST, data)  # last, as the writer would
        return copied

    def _download(self, name: str, *, sha256: str, size: int) -> None:
        """Copy a remote shard into the staging folder: a hidden temporary (the writer's own kind,
        which it removes if this is killed), checked, fsynced and renamed."""
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=self.staging)
        digest = hashlib.sha256()
        got = 0
        try:
            with os.fdopen(fd, "wb") as out:
                try:
                    with self.filesystem.open_input_stream(self._path(name), compression=None) as f:
                        while block := f.read(_BLOCK):
                            digest.update(block)
                            got += len(block)
                            out.write(block)
                except FileNotFoundError as err:
                    raise TaskforgeError(f"shard {self.uri}/{name} is listed in the manifest but missing",
                                         reason="missing_shard") from err
                out.flush()
                os.fsync(out.fileno())
            if got != size or digest.hexdigest() != sha256:
                what = f"{got} bytes, not {size}" if got != size else "its sha256 differs"
                raise TaskforgeError(f"shard {self.uri}/{name} does not match the manifest ({what}): it is corrupt",
                                     reason="corrupt_shard")
            shareable(tmp)
            os.replace(tmp, self.staging / name)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        fsync_dir(self.staging)

    def push(self, extra: Sequence[str] = ()) -> int:
        """Upload the staging folder to the remote (see the module docstring): each listed shard the
        remote lacks or holds with another size, then the manifest, then the sidecar files
        ``extra`` that exist in the staging folder. Idempotent; returns the number of shards
        uploaded."""
        manifest = read_manifest(self.staging)
        self.filesystem.create_dir(self.root, recursive=True)
        self._remove_temporaries()
        uploaded = self._push_shards(manifest)
        self._upload(MANIFEST)  # the commit point: only now do readers see the new shards
        present, listed = self._remote_sizes(), {s.name for s in manifest.shards}
        for retraction in manifest.retracted:  # shards the manifest no longer lists go after it
            if retraction.shard.name in present and retraction.shard.name not in listed:
                self.filesystem.delete_file(self._path(retraction.shard.name))
        for name in extra:
            if (self.staging / name).is_file():
                self._upload(name)
        return uploaded

    def _remote_sizes(self) -> dict[str, int]:
        import pyarrow.fs as pafs

        listing = self.filesystem.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        return {info.base_name: info.size for info in listing if info.type == pafs.FileType.File}

    def _remove_temporaries(self) -> None:
        """Delete what a push cut short left behind (only one writer at a time, so none is live)."""
        for name in self._remote_sizes():
            if name.startswith(_TEMPORARY):
                self.filesystem.delete_file(self._path(name))

    def _push_shards(self, manifest: Manifest) -> int:
        """Upload the listed shards the remote lacks; the manifest is not touched."""
        present = self._remote_sizes()
        uploaded = 0
        for shard in manifest.shards:
            if present.get(shard.name) != shard.bytes:
                self._upload(shard.name, sha256=shard.sha256)
                uploaded += 1
        return uploaded

    def _upload(self, name: str, *, sha256: str | None = None) -> None:
        """Copy a staging file to a hidden remote temporary and move it to ``name``. With ``sha256``,
        the bytes sent are checked against it first, so a shard damaged in the staging folder is
        never published."""
        tmp = self._path(f"{_TEMPORARY}{name}-{secrets.token_hex(8)}")
        digest = hashlib.sha256()
        with (self.staging / name).open("rb") as src, self.filesystem.open_output_stream(tmp, compression=None) as out:
            for block in iter(lambda: src.read(_BLOCK), b""):
                digest.update(block)
                out.write(block)
        if sha256 is not None and digest.hexdigest() != sha256:
            self.filesystem.delete_file(tmp)
            raise TaskforgeError(f"shard {self.staging / name} does not match its manifest (its sha256 differs): it "
                                 "is corrupt, and was not pushed", reason="corrupt_shard")
        self.filesystem.move(tmp, self._path(name))


def _ahead(local: Manifest, remote: Manifest) -> bool:
    """Whether ``local`` holds everything ``remote`` does: the same dataset, every remote shard with
    the same digest or retracted since, every finished unit of work or retracted since, and every
    retraction."""
    if {r.shard.name for r in remote.retracted} - {r.shard.name for r in local.retracted}:
        return False
    if (local.kind, local.schema_version, local.recipe) != (remote.kind, remote.schema_version, remote.recipe):
        return False
    held = {s.name: s.sha256 for s in local.shards} | {r.shard.name: r.shard.sha256 for r in local.retracted}
    undone = {key for r in local.retracted for key in r.done}
    return (all(held.get(s.name) == s.sha256 for s in remote.shards)
            and set(remote.done) <= set(local.done) | undone)

"""``manifest.json``: what a dataset folder holds, and how it was made.

The manifest is the folder's table of contents. It names the kind of rows and their schema
version, the recipe the rows were made with, the versions of every run that wrote to the folder,
each shard with its row count, size and sha256, and the finished units of work (for ``mine``: one
entry per source), so that a resumed run skips them. A shard the manifest does not list is not
part of the dataset. Shards taken out again (``DatasetWriter.retract``: the rows of a source that
an upgraded pipeline mines again, say) are kept in ``retracted`` with the reason, so the folder
says what it once held and why it no longer does.

The manifest is always replaced whole and atomically (:func:`write_atomic`), after the shards it
lists are in place.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from taskforge.errors import TaskforgeError

__all__ = ["FORMAT", "MANIFEST", "Manifest", "Retraction", "RunInfo", "ShardInfo", "read_manifest", "sha256_file", "utc_now",
           "write_atomic"]

MANIFEST = "manifest.json"
FORMAT = "taskforge-dataset/1"
"""The manifest's own format; bumped if its fields change."""
FORMAT_RETRACTED = "taskforge-dataset/2"
"""The format of a manifest that lists retracted shards: a reader (or writer) from before
retraction refuses it rather than dropping the record and reusing a retracted name. A manifest
without retractions keeps format 1, which every version reads."""


def utc_now() -> str:
    """The current time, ISO 8601 in UTC, to the second."""
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass(kw_only=True, slots=True)
class ShardInfo:
    """One shard of the folder."""

    name: str
    """File name inside the folder (``*.parquet``)."""
    rows: int
    """Rows it holds."""
    sha256: str
    """sha256 of the file, hex."""
    bytes: int
    """Size of the file."""
    written_at: str
    """When it was put in place (ISO 8601, UTC)."""
    run: int
    """Index of the run that wrote it, in ``Manifest.runs``."""

    def __post_init__(self) -> None:
        if not self.name.endswith(".parquet") or "/" in self.name or self.name.startswith("."):
            raise ValueError(f"ShardInfo.name must be a visible *.parquet file name, got {self.name!r}")
        if self.rows < 0 or self.bytes <= 0:
            raise ValueError(f"ShardInfo {self.name}: rows must be >= 0 and bytes > 0, got {self.rows}, {self.bytes}")
        if len(self.sha256) != 64:
            raise ValueError(f"ShardInfo.sha256 of {self.name} must be 64 hex digits, got {self.sha256!r}")


@dataclass(kw_only=True, slots=True)
class RunInfo:
    """One run that wrote to the folder."""

    started_at: str
    """When it opened the folder (ISO 8601, UTC)."""
    versions: dict[str, str]
    """Versions of what made the rows: taskforge, python, pyarrow, base image, ..."""


@dataclass(kw_only=True, slots=True)
class Retraction:
    """A shard taken out of the dataset, and why."""

    shard: ShardInfo
    """The shard as the manifest listed it."""
    reason: str
    """Why (``taskforge mine --again SOURCE --replace``: which source was mined again)."""
    retracted_at: str
    """When (ISO 8601, UTC)."""
    run: int
    """Index of the run that took it out, in ``Manifest.runs``."""
    done: tuple[str, ...] = ()
    """Keys of ``Manifest.done`` the retraction took out with it (the source mined again)."""


@dataclass(kw_only=True, slots=True)
class Manifest:
    """The parsed ``manifest.json``."""

    kind: str
    """Kind of rows (taskforge.datasets.schema.KINDS): ``tasks`` or ``rewards``."""
    schema_version: int
    """Schema version of every shard."""
    recipe: dict[str, Any]
    """The resolved configuration the rows were made with; a resumed run must use the same."""
    created_at: str
    updated_at: str
    runs: list[RunInfo] = field(default_factory=list)
    shards: list[ShardInfo] = field(default_factory=list)
    done: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Finished units of work, by key (``mine``: source → its summary); a resumed run skips them."""
    retracted: list[Retraction] = field(default_factory=list)
    """Shards taken out of the dataset; their files are deleted (a reader refuses one still there)."""

    def __post_init__(self) -> None:
        names = [s.name for s in self.shards]
        if len(set(names)) != len(names):
            raise ValueError("Manifest.shards lists a shard twice")
        if self.schema_version < 1:
            raise ValueError(f"Manifest.schema_version must be at least 1, got {self.schema_version}")
        for shard in self.shards:
            if not 0 <= shard.run < len(self.runs):
                raise ValueError(f"Manifest: shard {shard.name} names run {shard.run}, but there are {len(self.runs)}")

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    def shard(self, name: str) -> ShardInfo | None:
        return next((s for s in self.shards if s.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT_RETRACTED if self.retracted else FORMAT,
            "kind": self.kind,
            "schema_version": self.schema_version,
            "rows": self.rows,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "recipe": self.recipe,
            "runs": [{"started_at": r.started_at, "versions": r.versions} for r in self.runs],
            "shards": [
                {"name": s.name, "rows": s.rows, "sha256": s.sha256, "bytes": s.bytes, "written_at": s.written_at,
                 "run": s.run}
                for s in self.shards
            ],
            "done": self.done,
            **({"retracted": [
                {"shard": {"name": r.shard.name, "rows": r.shard.rows, "sha256": r.shard.sha256,
                           "bytes": r.shard.bytes, "written_at": r.shard.written_at, "run": r.shard.run},
                 "reason": r.reason, "retracted_at": r.retracted_at, "run": r.run, "done": list(r.done)}
                for r in self.retracted]} if self.retracted else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Manifest:
        if data.get("format") not in (FORMAT, FORMAT_RETRACTED):
            raise ValueError(f"format is {data.get('format')!r}, not {FORMAT!r} or {FORMAT_RETRACTED!r}")
        manifest = cls(
            kind=data["kind"],
            schema_version=int(data["schema_version"]),
            recipe=dict(data["recipe"]),
            created_at=data["created_at"],
            updated_at=data["updated_at"],
            runs=[RunInfo(started_at=r["started_at"], versions=dict(r["versions"])) for r in data["runs"]],
            shards=[ShardInfo(**s) for s in data["shards"]],
            done={str(k): dict(v) for k, v in data["done"].items()},
            retracted=[Retraction(shard=ShardInfo(**r["shard"]), reason=str(r["reason"]),
                                  retracted_at=str(r["retracted_at"]), run=int(r["run"]),
                                  done=tuple(str(k) for k in r.get("done", ())))
                       for r in data.get("retracted", [])],
        )
        if data["rows"] != manifest.rows:
            raise ValueError(f"rows is {data['rows']}, but the shards add up to {manifest.rows}")
        return manifest


def read_manifest(directory: Path) -> Manifest:
    """The folder's manifest; a missing or malformed one raises with reason ``no_manifest`` or ``bad_manifest``."""
    path = directory / MANIFEST
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as err:
        raise TaskforgeError(f"{directory} has no {MANIFEST}: it is not a taskforge dataset folder",
                             reason="no_manifest") from err
    try:
        return Manifest.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise TaskforgeError(f"{path} is malformed: {err}", reason="bad_manifest") from err


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fsync_dir(directory: Path) -> None:
    """Make a rename inside ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def shareable(path: str | Path) -> None:
    """mkstemp creates files 0600; a dataset is for sharing, so give them the umask's usual mode."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: a hidden temporary in the same folder, fsynced, renamed."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        shareable(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_manifest(directory: Path, manifest: Manifest) -> None:
    write_atomic(directory / MANIFEST, (json.dumps(manifest.to_json(), indent=2, sort_keys=False) + "\n").encode())

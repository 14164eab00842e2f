"""The sandbox layer: isolated places to run untrusted repository code.

It knows nothing about tasks, tests or mining. Backends are chosen by short name from
``BACKENDS``; the Docker backend (``taskforge.sandbox.docker``) is the only module in taskforge
that imports the Docker SDK.

    backend = open_backend("docker")
    with backend.start(image, limits=SandboxLimits.load()) as box:
        box.put_tree(repo, "/workspace")
        result = box.exec(["python", "-m", "pytest"], timeout_s=600, workdir="/workspace")
"""

from __future__ import annotations

import importlib
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal, Protocol, Self

from taskforge.errors import SandboxError
from taskforge.paths import sandboxes_dir

__all__ = [
    "BACKENDS",
    "ExecResult",
    "ExecStatus",
    "Sandbox",
    "SandboxBackend",
    "SandboxLimits",
    "open_backend",
]

ExecStatus = Literal["ok", "failed", "timeout", "oom", "pids_limit"]


@dataclass(kw_only=True, slots=True)
class SandboxLimits:
    """Resource and isolation settings for one sandbox. Defaults live in sandboxes/security.toml."""

    user: str = "10001:10001"
    """uid:gid the processes run as; never root."""
    network: str = "none"
    """Docker network mode; "none" cuts every connection."""
    memory_mb: int = 4096
    """Memory limit; swap is capped at the same value, so there is no extra swap."""
    cpus: float = 1.0
    """CPU quota in cores."""
    pids_limit: int = 512
    """Maximum number of processes and threads; stops fork bombs."""
    read_only_root: bool = True
    """Mount the root filesystem read-only; only the tmpfs work dirs are writable."""
    workspace_mb: int = 2048
    """Size of the tmpfs at /workspace."""
    tmp_mb: int = 1024
    """Size of the tmpfs at /tmp (reports, HOME, scratch)."""
    cap_drop: tuple[str, ...] = ("ALL",)
    """Linux capabilities to drop."""
    security_opt: tuple[str, ...] = ("no-new-privileges",)
    """Docker security options."""
    output_limit_bytes: int = 4 * 1024 * 1024
    """Bytes kept per output stream of one exec; the rest is discarded and flagged."""
    supervisor: bool = False
    """Start the container's init as root with only the SETUID and SETGID capabilities, so that an
    exec as root (``Sandbox.exec(user="root")``, the scoring supervisor) can run the tests as
    ``user`` and read their outcomes where the tests cannot reach. Every other exec still runs as
    ``user``, with no capabilities."""
    cgroup_parent: str = ""
    """The cgroup the sandboxes are created under (Docker's --cgroup-parent; "" is the engine's
    default): a cluster's accounting, or a benchmark that counts its own containers' CPU alone."""

    def __post_init__(self) -> None:
        for name in ("memory_mb", "pids_limit", "workspace_mb", "tmp_mb", "output_limit_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be positive, got {getattr(self, name)}")
        if self.cpus <= 0:
            raise ValueError(f"SandboxLimits.cpus must be positive, got {self.cpus}")
        uid = self.user.split(":")[0]
        if uid in ("0", "root"):
            raise ValueError("SandboxLimits.user must not be root")
        self.cap_drop = tuple(self.cap_drop)
        self.security_opt = tuple(self.security_opt)

    @classmethod
    def load(cls, path: Path | None = None, **overrides: Any) -> Self:
        """Read the defaults from sandboxes/security.toml (or ``path``), then apply ``overrides``."""
        data = tomllib.loads((path or sandboxes_dir() / "security.toml").read_text())
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown sandbox settings {sorted(unknown)}; known: {sorted(known)}")
        return replace(cls(**data), **overrides)


@dataclass(frozen=True, kw_only=True, slots=True)
class ExecResult:
    """What one command did inside a sandbox."""

    exit_code: int | None
    """The process's exit status; None when it was killed by the timeout."""
    stdout: bytes
    stderr: bytes
    truncated: bool
    """True when either stream exceeded the output limit and its excess was discarded."""
    timed_out: bool
    limit_hit: Literal["oom", "pids_limit"] | None
    """A resource limit the command ran into: the OOM killer fired, or a fork was refused."""
    duration_s: float
    output_bytes: int = field(default=0)
    """Total bytes the command wrote to stdout and stderr, kept or not."""

    @property
    def status(self) -> ExecStatus:
        if self.timed_out:
            return "timeout"
        if self.limit_hit is not None:
            return self.limit_hit
        return "ok" if self.exit_code == 0 else "failed"

    def text(self) -> str:
        """stdout then stderr, decoded leniently, for messages and logs."""
        return (self.stdout + self.stderr).decode("utf-8", "replace")


class Sandbox(Protocol):
    """One running, isolated environment. Closing it destroys it and everything inside."""

    @property
    def alive(self) -> bool: ...

    def exec(
        self,
        cmd: Sequence[str],
        *,
        timeout_s: float,
        workdir: str = "/workspace",
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        output_limit: int | None = None,
        reap: bool = True,
        user: str | None = None,
    ) -> ExecResult: ...

    def prespawn(self, cmd: Sequence[str], *, workdir: str = "/workspace", env: Mapping[str, str] | None = None,
                 user: str | None = None) -> None:
        """Start ``cmd`` waiting on its stdin, for the next ``exec`` of the same command to take over."""
        ...

    def put_tree(self, src: Path, dest: str, *, exclude: Sequence[str] = (),
                 also: Mapping[str, bytes] | None = None, replace: bool = False) -> None: ...

    def put_files(self, files: Mapping[str, bytes], dest: str) -> None: ...

    def read_file(self, path: str, *, max_bytes: int = 512 * 1024 * 1024) -> bytes: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc: object) -> None: ...


class SandboxBackend(Protocol):
    """Starts sandboxes from images, builds images, and cleans up what leaked."""

    def start(
        self, image: str, *, limits: SandboxLimits, labels: Mapping[str, str] | None = None
    ) -> Sandbox: ...

    def image_exists(self, tag: str) -> bool: ...

    def image_id(self, tag: str) -> str: ...

    def build_image(self, context: Path, *, tag: str, labels: Mapping[str, str]) -> str: ...

    def import_image(self, tarball: Path, *, tag: str, changes: Sequence[str]) -> str: ...

    def tag_image(self, image: str, tag: str) -> None: ...

    def gc(self, *, everything: bool = False) -> list[str]: ...


BACKENDS: dict[str, str] = {
    "docker": "taskforge.sandbox.docker:DockerBackend",
}
"""Sandbox backends by short name, as ``module:Class`` paths imported on first use."""


def open_backend(name: str = "docker", **kwargs: Any) -> SandboxBackend:
    """Instantiate the backend registered under ``name``."""
    if name not in BACKENDS:
        raise SandboxError(f"unknown sandbox backend {name!r}; known: {', '.join(sorted(BACKENDS))}")
    module_name, _, class_name = BACKENDS[name].partition(":")
    backend_cls = getattr(importlib.import_module(module_name), class_name)
    return backend_cls(**kwargs)

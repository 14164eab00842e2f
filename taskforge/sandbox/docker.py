"""Docker sandboxes: the only module in taskforge that imports the Docker SDK.

Every container is started hardened (see sandboxes/security.toml): no network, memory, CPU and
pids limits, all capabilities dropped, no-new-privileges, a non-root user, a read-only root and
tmpfs work dirs. A container's PID 1 is a tiny Python reaper; commands run as execs beside it.

Files move in and out as tar streams through an exec's stdin and stdout, because Docker's
archive API refuses containers with a read-only root and does not write into tmpfs mounts.
"""

from __future__ import annotations

import io
import os
import shlex
import socket
import struct
import tarfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, Self

import docker
import docker.errors
import requests.exceptions

from taskforge.errors import SandboxError, SandboxUnavailable
from taskforge.sandbox import ExecResult, SandboxLimits

__all__ = ["DockerBackend", "DockerSandbox", "MANAGED_LABEL"]

MANAGED_LABEL = "taskforge.managed"
"""Label on every container taskforge starts; `taskforge sandbox gc` looks for it."""

_OWNER_PID = "taskforge.owner.pid"
_OWNER_HOST = "taskforge.owner.host"
_KILL_GRACE_S = 10.0
_CHUNK = 1 << 16
# PID 1 of every sandbox: reaps whatever is reparented to it, forever. Not Docker's init: that
# exits with its child, and the reap below (kill -9 -1) kills every process but PID 1.
_REAPER = (
    "import os, sys, time\n"
    # HOME, made here rather than by an exec of its own (a round trip to the engine per container),
    # as the sandbox user: a container that starts as root (the scoring supervisor's) drops to it.
    "uid, gid = int(sys.argv[1]), int(sys.argv[2])\n"
    "if os.getuid() != 0:\n"
    "    os.makedirs('/tmp/home', exist_ok=True)\n"
    "elif os.fork() == 0:\n"
    "    try:\n"
    "        os.setgroups([]); os.setgid(gid); os.setuid(uid); os.makedirs('/tmp/home', exist_ok=True)\n"
    "    finally:\n"
    "        os._exit(0)\n"
    "while True:\n"
    "    try:\n"
    "        os.wait()\n"
    "    except ChildProcessError:\n"
    "        time.sleep(0.5)\n"
)
# Shell builtins only: while a fork bomb holds every pid, this script cannot fork either.
_REAP_SCRIPT = (
    "kill -9 -1 2>/dev/null;"
    " for f in /sys/fs/cgroup/pids/pids.events /sys/fs/cgroup/pids.events"
    " /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events;"
    ' do [ -r "$f" ] && while read -r line; do echo "$line"; done < "$f"; done; exit 0'
)


def _short(err: BaseException) -> str:
    """The first line of an SDK error, without the noise around it."""
    text = getattr(err, "explanation", None) or str(err)
    return " ".join(str(text).split())[:300]


@dataclass(frozen=True, slots=True)
class _Listed:
    """A container as the engine's listing gives it."""

    id: str
    name: str
    labels: dict[str, str]


class DockerBackend:
    """Starts hardened containers and builds images on one Docker engine."""

    def __init__(self, *, base_url: str | None = None, timeout_s: float = 600.0) -> None:
        url = base_url or os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        try:
            self.client = docker.DockerClient(base_url=url, timeout=int(timeout_s), version="auto")
            self.client.ping()
        except (docker.errors.DockerException, requests.exceptions.RequestException) as err:
            raise SandboxUnavailable(
                f"Docker engine is not reachable at {url} ({_short(err)}); start dockerd "
                "(see the README) or set DOCKER_HOST"
            ) from err
        self.api = self.client.api

    # -- containers ---------------------------------------------------------------------------

    def start(
        self, image: str, *, limits: SandboxLimits, labels: Mapping[str, str] | None = None
    ) -> DockerSandbox:
        uid, _, gid = limits.user.partition(":")
        tmpfs_opts = f"rw,exec,nosuid,nodev,uid={uid},gid={gid or uid}"
        all_labels = {
            MANAGED_LABEL: "1",
            _OWNER_PID: str(os.getpid()),
            _OWNER_HOST: socket.gethostname(),
            **(labels or {}),
        }
        try:
            container = self.client.containers.run(
                image,
                command=["python3", "-c", _REAPER, uid, gid or uid],
                detach=True,
                # Only the supervisor's container starts as root, and then with SETUID and SETGID
                # alone: its execs as root get those to drop to ``limits.user``; every other exec
                # runs as ``limits.user`` with no capabilities at all.
                user="0:0" if limits.supervisor else limits.user,
                cap_add=["SETUID", "SETGID"] if limits.supervisor else None,
                network_mode=limits.network,
                mem_limit=f"{limits.memory_mb}m",
                memswap_limit=f"{limits.memory_mb}m",
                nano_cpus=int(limits.cpus * 1e9),
                pids_limit=limits.pids_limit,
                read_only=limits.read_only_root,
                tmpfs={
                    "/workspace": f"{tmpfs_opts},mode=0755,size={limits.workspace_mb}m",
                    "/tmp": f"{tmpfs_opts},mode=1777,size={limits.tmp_mb}m",
                },
                cap_drop=list(limits.cap_drop),
                security_opt=list(limits.security_opt),
                labels=all_labels,
                working_dir="/workspace",
                environment={"HOME": "/tmp/home"},
                **({"cgroup_parent": limits.cgroup_parent} if limits.cgroup_parent else {}),
            )
        except docker.errors.ImageNotFound as err:
            raise SandboxError(f"image {image} does not exist: {_short(err)}", reason="image_missing") from err
        except (docker.errors.DockerException, requests.exceptions.RequestException) as err:
            raise SandboxError(f"cannot start a sandbox from {image}: {_short(err)}") from err
        return DockerSandbox(backend=self, container=container, limits=limits)

    def gc(self, *, everything: bool = False) -> list[str]:
        """Remove leaked sandboxes: those whose owning process on this host is gone (all with ``everything``)."""
        removed = []
        for container in self._managed():
            if everything or self._leaked(container):
                try:
                    self.api.remove_container(container.id, force=True)
                except docker.errors.NotFound:
                    continue  # another process on this engine removed it first
                except (docker.errors.DockerException, requests.exceptions.RequestException):
                    # Another process is removing it now (409: removal already in progress), or the
                    # engine refused: housekeeping never fails the caller; a later gc tries again.
                    continue
                removed.append(container.name)
        return removed

    def leaked_containers(self) -> list[str]:
        """Names of sandboxes whose owning process is gone: what ``gc`` would remove."""
        return [c.name for c in self._managed() if self._leaked(c)]

    def _managed(self) -> list[_Listed]:
        """taskforge's containers, from one listing: other processes on the engine start and remove
        theirs meanwhile, so nothing here inspects a container one by one (it may be gone)."""
        rows = self.api.containers(all=True, filters={"label": MANAGED_LABEL})
        return [_Listed(id=row["Id"], name=(row.get("Names") or [row["Id"][:12]])[0].lstrip("/"),
                        labels=row.get("Labels") or {}) for row in rows]

    @staticmethod
    def _leaked(container: _Listed) -> bool:
        owner_host = container.labels.get(_OWNER_HOST)
        owner_pid = int(container.labels.get(_OWNER_PID, "0"))
        return not (owner_host == socket.gethostname() and _pid_alive(owner_pid))

    def managed_containers(self) -> list[str]:
        """Names of all containers taskforge started that still exist."""
        return [c.name for c in self._managed()]

    # -- images -------------------------------------------------------------------------------

    def image_exists(self, tag: str) -> bool:
        try:
            self.client.images.get(tag)
        except docker.errors.ImageNotFound:
            return False
        return True

    def image_id(self, tag: str) -> str:
        try:
            return str(self.client.images.get(tag).id)
        except docker.errors.ImageNotFound as err:
            raise SandboxError(f"image {tag} does not exist", reason="image_missing") from err

    def image_labels(self, tag: str) -> dict[str, str]:
        try:
            return dict(self.client.images.get(tag).labels or {})
        except docker.errors.ImageNotFound as err:
            raise SandboxError(f"image {tag} does not exist", reason="image_missing") from err

    def build_image(self, context: Path, *, tag: str, labels: Mapping[str, str]) -> str:
        """``docker build`` of ``context`` (which holds a Dockerfile); returns the image id."""
        log: list[str] = []
        try:
            for chunk in self.api.build(
                path=str(context), tag=tag, labels=dict(labels), rm=True, forcerm=True, decode=True
            ):
                if "error" in chunk:
                    detail = " ".join(line.strip() for line in log[-5:] if line.strip())
                    raise SandboxError(
                        f"image build failed: {chunk['error'].strip()} ({detail[-400:]})",
                        reason="image_build_failed",
                    )
                if "stream" in chunk:
                    log.append(chunk["stream"])
        except (docker.errors.DockerException, requests.exceptions.RequestException) as err:
            raise SandboxError(f"image build failed: {_short(err)}", reason="image_build_failed") from err
        return self.image_id(tag)

    def import_image(self, tarball: Path, *, tag: str, changes: Sequence[str]) -> str:
        """``docker import`` of a root filesystem tarball; returns the image id."""
        repository, _, version = tag.rpartition(":")
        try:
            self.api.import_image_from_file(
                str(tarball), repository=repository, tag=version, changes=list(changes)
            )
        except (docker.errors.DockerException, requests.exceptions.RequestException) as err:
            raise SandboxError(f"image import failed: {_short(err)}", reason="image_build_failed") from err
        return self.image_id(tag)

    def tag_image(self, image: str, tag: str) -> None:
        """Give the image ``image`` (a tag or an id) the name ``tag`` as well."""
        repository, _, version = tag.rpartition(":")
        try:
            self.client.images.get(image).tag(repository, version)
        except docker.errors.ImageNotFound as err:
            raise SandboxError(f"image {image} does not exist", reason="image_missing") from err
        except (docker.errors.DockerException, requests.exceptions.RequestException) as err:
            raise SandboxError(f"cannot tag {image} as {tag}: {_short(err)}", reason="image_build_failed") from err

    def remove_image(self, tag: str) -> None:
        try:
            self.client.images.remove(tag, force=True)
        except docker.errors.ImageNotFound:
            return


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_SPAWN_END_S = 10.0


def _spawn_key(cmd: Sequence[str], workdir: str, env: Mapping[str, str] | None, user: str) -> tuple[Any, ...]:
    return (tuple(cmd), workdir, tuple(sorted((env or {}).items())), user)


@dataclass(slots=True)
class _Spawned:
    """A command ``DockerSandbox.prespawn`` started, waiting on its stdin."""

    key: tuple[Any, ...]
    exec_id: str
    sock: Any

    def close(self) -> None:
        for closable in (self.sock, getattr(self.sock, "_sock", None)):
            try:
                if closable is not None:
                    closable.close()
            except OSError:
                pass


class DockerSandbox:
    """One hardened container. Use it as a context manager; leaving the block removes it."""

    def __init__(self, *, backend: DockerBackend, container: Any, limits: SandboxLimits) -> None:
        self._backend = backend
        self._api = backend.api
        self.container = container
        self.limits = limits
        self._alive = True
        self._counters = {"max": 0, "oom_kill": 0}
        self._spawned: _Spawned | None = None

    @property
    def alive(self) -> bool:
        return self._alive

    @property
    def name(self) -> str:
        return str(self.container.name)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill and remove the container. Safe to call twice."""
        self._alive = False
        spawned = self._take_spawned()
        if spawned is not None:
            spawned.close()
        try:
            self.container.remove(force=True)
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as err:
            if err.status_code == 409 and "in progress" in str(err):
                return  # another process (a gc) is removing it
            raise SandboxError(f"cannot remove sandbox {self.name}: {_short(err)}") from err
        except (docker.errors.DockerException, requests.exceptions.RequestException) as err:
            raise SandboxError(f"cannot remove sandbox {self.name}: {_short(err)}") from err

    # -- commands -----------------------------------------------------------------------------

    def prespawn(self, cmd: Sequence[str], *, workdir: str = "/workspace", env: Mapping[str, str] | None = None,
                 user: str | None = None) -> None:
        """Start ``cmd`` now, waiting on its stdin, for the next ``exec`` of the same command (same
        workdir, environment and user) to take over: that exec then pays neither the engine's
        round trip to start a process (about 0.05 s here) nor the command's own start-up, which
        ran while nobody waited (the scorer's pool prespawns each container's supervisor).

        Any other exec first ends the waiting one: its stdin is closed and its output read to the
        end, so it cannot act beside the commands that follow."""
        self._check_user(user)
        self._end_spawned(self._take_spawned())
        key = _spawn_key(cmd, workdir, env, user or self.limits.user)
        exec_id, sock = self._start_exec(cmd, stdin=True, user=user, workdir=workdir, env=env)
        self._spawned = _Spawned(key=key, exec_id=exec_id, sock=sock)

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
    ) -> ExecResult:
        """Run ``cmd`` and wait for it, at most ``timeout_s`` seconds.

        When the command ends, every process it left behind is killed (``reap``), so nothing
        outlives it into the next command. On timeout the whole container is killed instead:
        that ends every process however it forked or detached, even when a fork bomb holds
        every pid so that no further exec could start. The sandbox is then dead.

        ``user`` runs the command as another user than the sandbox's (``root``: only in a
        container started with ``SandboxLimits.supervisor``, whose init holds SETUID and SETGID).
        A command ``prespawn`` started alike is taken over rather than started again.
        """
        self._check_user(user)
        if not self._alive:
            raise SandboxError(f"sandbox {self.name} is no longer running", reason="sandbox_dead")
        limit = output_limit if output_limit is not None else self.limits.output_limit_bytes
        started = time.monotonic()
        deadline = started + timeout_s
        spawned = self._take_spawned()
        if spawned is not None and spawned.key == _spawn_key(cmd, workdir, env, user or self.limits.user) \
                and stdin is not None and self._running(spawned.exec_id):
            exec_id, sock = spawned.exec_id, spawned.sock
        else:
            self._end_spawned(spawned)
            exec_id, sock = self._start_exec(cmd, stdin=stdin is not None, user=user, workdir=workdir, env=env)
        raw = sock._sock
        streams = _CappedStreams(limit)
        timed_out = False
        try:
            if stdin is not None:
                raw.settimeout(max(deadline - time.monotonic(), 0.001))
                try:
                    raw.sendall(stdin)
                    raw.shutdown(socket.SHUT_WR)
                except TimeoutError:
                    timed_out = True
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the command exited without reading all input; its exit code says why
            if not timed_out:
                timed_out = not _read_frames(raw, deadline, streams)
        finally:
            sock.close()
            raw.close()
        if timed_out:
            self._kill()
            return streams.result(exit_code=None, timed_out=True, limit_hit=None, started=started)
        exit_code = self._exit_code(exec_id)
        limit_hit = self._reap() if reap else None
        return streams.result(exit_code=exit_code, timed_out=False, limit_hit=limit_hit, started=started)

    def _running(self, exec_id: str) -> bool:
        """Whether a prespawned exec still waits (its container may have died in the pool)."""
        try:
            return bool(self._api.exec_inspect(exec_id)["Running"])
        except (docker.errors.DockerException, requests.exceptions.RequestException):
            return False

    def _check_user(self, user: str | None) -> None:
        if user is not None and user != self.limits.user and not self.limits.supervisor:
            raise SandboxError(f"exec as {user} needs a sandbox started with the supervisor setting",
                               reason="sandbox_misuse")

    def _start_exec(self, cmd: Sequence[str], *, stdin: bool, user: str | None, workdir: str,
                    env: Mapping[str, str] | None) -> tuple[str, Any]:
        if not self._alive:
            raise SandboxError(f"sandbox {self.name} is no longer running", reason="sandbox_dead")
        try:
            exec_id = self._api.exec_create(
                self.container.id,
                list(cmd),
                stdin=stdin,
                stdout=True,
                stderr=True,
                user=user or self.limits.user,
                workdir=workdir,
                environment=dict(env or {}),
            )["Id"]
            return exec_id, self._api.exec_start(exec_id, socket=True)
        except (docker.errors.DockerException, requests.exceptions.RequestException) as err:
            raise SandboxError(f"exec in sandbox {self.name} failed: {_short(err)}") from err

    def _take_spawned(self) -> _Spawned | None:
        spawned, self._spawned = self._spawned, None
        return spawned

    def _end_spawned(self, spawned: _Spawned | None) -> None:
        """End a prespawned command, if any: stdin closed, output drained (a command that does
        not end within ``_SPAWN_END_S`` of its stdin closing takes the container with it)."""
        if spawned is None:
            return
        raw = spawned.sock._sock
        try:
            raw.shutdown(socket.SHUT_WR)
            ended = _read_frames(raw, time.monotonic() + _SPAWN_END_S, _CappedStreams(0))
        except OSError:
            ended = False
        finally:
            spawned.close()
        if not ended:
            self._kill()

    def _exit_code(self, exec_id: str) -> int:
        for _ in range(200):
            info = self._api.exec_inspect(exec_id)
            if not info["Running"]:
                return int(info["ExitCode"])
            time.sleep(0.01)
        raise SandboxError(f"exec in sandbox {self.name} closed its output but never exited")

    def _reap(self) -> str | None:
        """Kill every process the last command left behind; say which limit it hit, if any.

        One exec reads the cgroup's counters (pids ``max`` events, ``oom_kill``; cgroup v1 and
        v2 paths) and then sends SIGKILL to every process of the sandbox user but itself and
        init. If even that exec cannot start, a fork bomb holds every pid: the container is
        killed instead.
        """
        try:
            result = self.exec(["sh", "-c", _REAP_SCRIPT], timeout_s=30, workdir="/", reap=False)
        except SandboxError:
            self._kill()
            return "pids_limit"
        if result.timed_out:
            return "pids_limit"
        counters = {"max": 0, "oom_kill": 0}
        for line in result.stdout.decode().splitlines():
            key, _, value = line.partition(" ")
            if key in counters and value.strip().isdigit():
                counters[key] = max(counters[key], int(value))
        hit = None
        if counters["oom_kill"] > self._counters["oom_kill"]:
            hit = "oom"
        elif counters["max"] > self._counters["max"]:
            hit = "pids_limit"
        self._counters = counters
        return hit

    def _kill(self) -> None:
        self._alive = False
        try:
            self.container.kill()
            self.container.wait(timeout=_KILL_GRACE_S)
        except docker.errors.NotFound:
            return
        except (docker.errors.DockerException, requests.exceptions.RequestException) as err:
            raise SandboxError(f"cannot kill sandbox {self.name}: {_short(err)}") from err

    # -- files --------------------------------------------------------------------------------

    def put_tree(self, src: Path, dest: str, *, exclude: Sequence[str] = (),
                 also: Mapping[str, bytes] | None = None, replace: bool = False) -> None:
        """Copy the directory ``src`` into ``dest`` (which must exist); ``exclude`` holds name globs.
        ``also`` (absolute path in the sandbox -> content) is written in the same copy: one exec.
        ``replace``: empty ``dest`` first (in the same exec), so nothing of another tree is left."""
        buffer = io.BytesIO()
        root = dest.strip("/")
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(_walk(src, exclude)):
                rel = path.relative_to(src).as_posix()
                tar.add(path, arcname=f"{root}/{rel}" if root else rel, recursive=False)
            for target, content in (also or {}).items():
                if not target.startswith("/"):
                    raise ValueError(f"put_tree writes also= files by absolute path, got {target!r}")
                info = tarfile.TarInfo(target.lstrip("/"))
                info.size = len(content)
                info.mode = 0o644
                info.mtime = int(time.time())
                tar.addfile(info, io.BytesIO(content))
        self._untar(buffer.getvalue(), "/", emptied=dest if replace else None)

    def put_files(self, files: Mapping[str, bytes], dest: str) -> None:
        """Write ``files`` (relative path → content) under ``dest``."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel, content in files.items():
                info = tarfile.TarInfo(rel)
                info.size = len(content)
                info.mode = 0o644
                info.mtime = int(time.time())
                tar.addfile(info, io.BytesIO(content))
        self._untar(buffer.getvalue(), dest)

    def _untar(self, payload: bytes, dest: str, *, emptied: str | None = None) -> None:
        command = ["tar", "-x", "--no-same-owner", "-C", dest]
        if emptied is not None:
            folder = shlex.quote(emptied.rstrip("/"))
            command = ["sh", "-c", f"rm -rf {folder}/* {folder}/.[!.]* {folder}/..?* && exec {shlex.join(command)}"]
        result = self.exec(command, timeout_s=300, workdir="/", stdin=payload, reap=False)
        if result.exit_code != 0:
            raise SandboxError(f"copying files into {dest} failed: {result.text().strip()[:300]}")

    def read_file(self, path: str, *, max_bytes: int = 512 * 1024 * 1024) -> bytes:
        """The content of ``path`` inside the sandbox; FileNotFoundError if it is not there."""
        result = self.exec(["cat", "--", path], timeout_s=300, workdir="/", output_limit=max_bytes, reap=False)
        if result.exit_code != 0:
            raise FileNotFoundError(f"{path} in sandbox {self.name}: {result.stderr.decode(errors='replace').strip()}")
        if result.truncated:
            raise SandboxError(f"{path} in sandbox {self.name} is larger than {max_bytes} bytes")
        return result.stdout

    def get_tree(self, src: str, dest: Path) -> None:
        """Copy the directory ``src`` out of the sandbox into the local directory ``dest``."""
        result = self.exec(["tar", "-c", "-C", src, "."], timeout_s=300, workdir="/", output_limit=1 << 30, reap=False)
        if result.exit_code != 0 or result.truncated:
            raise SandboxError(f"copying {src} out of sandbox {self.name} failed: {result.stderr[:300]!r}")
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(result.stdout)) as tar:
            tar.extractall(dest, filter="data")


def _walk(root: Path, exclude: Sequence[str]) -> list[Path]:
    paths = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not any(fnmatch(d, pat) for pat in exclude)]
        base = Path(dirpath)
        paths.extend(base / d for d in dirnames)
        paths.extend(base / f for f in filenames if not any(fnmatch(f, pat) for pat in exclude))
    return paths


class _CappedStreams:
    """stdout and stderr of one exec, each kept up to ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: dict[int, list[bytes]] = {1: [], 2: []}
        self.kept = {1: 0, 2: 0}
        self.total = 0
        self.truncated = False

    def add(self, stream: int, data: bytes) -> None:
        stream = 2 if stream == 2 else 1
        self.total += len(data)
        room = self.limit - self.kept[stream]
        if room <= 0:
            self.truncated = True
            return
        if len(data) > room:
            data = data[:room]
            self.truncated = True
        self.parts[stream].append(data)
        self.kept[stream] += len(data)

    def result(self, *, exit_code: int | None, timed_out: bool, limit_hit: str | None, started: float) -> ExecResult:
        return ExecResult(
            exit_code=exit_code,
            stdout=b"".join(self.parts[1]),
            stderr=b"".join(self.parts[2]),
            truncated=self.truncated,
            timed_out=timed_out,
            limit_hit=limit_hit,
            duration_s=time.monotonic() - started,
            output_bytes=self.total,
        )


def _read_frames(raw: socket.socket, deadline: float, streams: _CappedStreams) -> bool:
    """Read Docker's multiplexed exec stream until EOF; False if the deadline passed first.

    Each frame is an 8-byte header (stream id, three zero bytes, big-endian payload length)
    followed by the payload.
    """
    buffer = bytearray()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        raw.settimeout(min(remaining, 5.0))
        try:
            chunk = raw.recv(_CHUNK)
        except TimeoutError:
            continue
        if not chunk:
            return True
        buffer += chunk
        while len(buffer) >= 8:
            stream, size = buffer[0], struct.unpack(">I", buffer[4:8])[0]
            if len(buffer) < 8 + size:
                break
            streams.add(stream, bytes(buffer[8 : 8 + size]))
            del buffer[: 8 + size]

"""Requests for more tasks, kept in a task folder: how a trainer asks a running miner for harder ones.

    DIR/requests/pending/ID.json   written by whoever asks (the trainer's curriculum, a person)
    DIR/requests/claimed/ID.json   taken by the miner that follows DIR (``taskforge mine --follow``)
    DIR/requests/done/ID.json      the request with its outcome: tasks written, or why none

Each step is one atomic file operation: a request is written whole (a temporary, fsynced, renamed
into ``pending``), claimed by a rename from ``pending`` to ``claimed`` (of several miners, exactly
one wins a rename), and finished by writing its ``done`` record and then removing its claim. A miner
that dies leaves its claims behind; the next one to follow the folder puts them back in
``pending`` (one follower per folder holds ``requests/.follow.lock``).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from taskforge.datasets.manifest import utc_now, write_atomic
from taskforge.errors import TaskforgeError

__all__ = ["REQUESTS_DIR", "MineRequest", "claim", "claimed_requests", "done_requests", "finish", "follow_lock",
           "open_requests", "pending_requests", "requeue_claimed", "submit_request"]

REQUESTS_DIR = "requests"
_STATES = ("pending", "claimed", "done")


@dataclass(frozen=True, kw_only=True, slots=True)
class MineRequest:
    """Mine more tasks of one repository, with these settings."""

    repo: str
    source: str
    """What to fetch: the tasks' own ``source`` column (``pypi:NAME==VERSION``, a git URL@REV, a path)."""
    strategies: tuple[str, ...] = ("feature", "module")
    difficulty: str | tuple[float, float] | None = "hard"
    """A band (``taskforge.difficulty.BANDS``) or ``[low, high]``; None: any."""
    max_tasks: int = 5
    reason: str = ""
    """Why it was asked: ``"solve rate 0.97 over 12 tasks, above the band's 0.9"``."""
    requested_by: str = ""
    request_id: str = ""
    requested_at: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.repo or not self.source:
            raise ValueError("MineRequest needs a repo and a source")
        if self.max_tasks < 1:
            raise ValueError(f"MineRequest.max_tasks must be at least 1, got {self.max_tasks}")
        if not self.strategies:
            raise ValueError("MineRequest.strategies may not be empty")

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["strategies"] = list(self.strategies)
        data["difficulty"] = list(self.difficulty) if isinstance(self.difficulty, tuple) else self.difficulty
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MineRequest:
        difficulty = data.get("difficulty")
        return cls(repo=str(data["repo"]), source=str(data["source"]),
                   strategies=tuple(str(s) for s in data.get("strategies", ("feature", "module"))),
                   difficulty=tuple(float(x) for x in difficulty) if isinstance(difficulty, list) else difficulty,
                   max_tasks=int(data.get("max_tasks", 5)), reason=str(data.get("reason", "")),
                   requested_by=str(data.get("requested_by", "")), request_id=str(data.get("request_id", "")),
                   requested_at=str(data.get("requested_at", "")), extra=dict(data.get("extra", {})))


def _dir(directory: Path, state: str) -> Path:
    path = Path(directory) / REQUESTS_DIR / state
    path.mkdir(parents=True, exist_ok=True)
    return path


def submit_request(directory: Path, request: MineRequest) -> MineRequest:
    """Write ``request`` into ``directory``'s pending requests; returns it with its id and time."""
    stamp = utc_now()
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in request.repo)[:60]
    request_id = request.request_id or f"{stamp.replace(':', '').replace('-', '')}-{safe}-{secrets.token_hex(3)}"
    done = MineRequest.from_json({**request.to_json(), "request_id": request_id, "requested_at": stamp})
    write_atomic(_dir(directory, "pending") / f"{request_id}.json", json.dumps(done.to_json(), indent=1).encode())
    return done


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise TaskforgeError(f"request {path} is unreadable: {err}", reason="bad_request") from err
    if not isinstance(data, dict):
        raise TaskforgeError(f"request {path} is not a JSON object", reason="bad_request")
    return data


def _listed(directory: Path, state: str) -> list[Path]:
    return sorted(p for p in _dir(directory, state).glob("*.json") if not p.name.startswith("."))


def pending_requests(directory: Path) -> list[MineRequest]:
    """Requests nobody has taken yet, oldest first."""
    return [MineRequest.from_json(_read(p)) for p in _listed(directory, "pending")]


def claimed_requests(directory: Path) -> list[MineRequest]:
    return [MineRequest.from_json(_read(p)) for p in _listed(directory, "claimed")]


def done_requests(directory: Path) -> list[dict[str, Any]]:
    """Finished requests: each the request's fields with ``outcome`` added."""
    return [_read(p) for p in _listed(directory, "done")]


def open_requests(directory: Path, *, repo: str | None = None) -> list[MineRequest]:
    """Pending and claimed requests (of ``repo``, if given)."""
    found = [*pending_requests(directory), *claimed_requests(directory)]
    return [r for r in found if repo is None or r.repo == repo]


def claim(directory: Path, request: MineRequest) -> bool:
    """Take ``request`` for mining: True if this caller got it, False if another did first."""
    try:
        os.rename(_dir(directory, "pending") / f"{request.request_id}.json",
                  _dir(directory, "claimed") / f"{request.request_id}.json")
    except FileNotFoundError:
        return False
    return True


def finish(directory: Path, request: MineRequest, outcome: Mapping[str, Any]) -> None:
    """Record what mining ``request`` gave, then drop its claim."""
    record = {**request.to_json(), "outcome": {**outcome, "finished_at": utc_now()}}
    write_atomic(_dir(directory, "done") / f"{request.request_id}.json", json.dumps(record, indent=1).encode())
    (_dir(directory, "claimed") / f"{request.request_id}.json").unlink(missing_ok=True)


def requeue_claimed(directory: Path) -> list[str]:
    """Put the claims a dead follower left back into ``pending`` (call it holding :func:`follow_lock`)."""
    moved = []
    for path in _listed(directory, "claimed"):
        if (_dir(directory, "done") / path.name).exists():
            path.unlink()  # finished, then killed before the claim went
            continue
        os.rename(path, _dir(directory, "pending") / path.name)
        moved.append(path.stem)
    return moved


class follow_lock:  # noqa: N801 - used as a context manager, like open()
    """The one follower of a folder: an ``flock`` on ``requests/.follow.lock``, dropped however the process ends."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / REQUESTS_DIR / ".follow.lock"
        self.fd = -1

    def __enter__(self) -> follow_lock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            os.close(self.fd)
            raise TaskforgeError(f"another miner already follows {self.path.parent.parent}", reason="dataset_locked") from err
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def request_states(directory: Path) -> dict[str, Sequence[str]]:
    """Request ids per state (for status lines and tests)."""
    return {state: [p.stem for p in _listed(directory, state)] for state in _STATES}

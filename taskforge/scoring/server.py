"""The reward service: candidate patches scored over HTTP, for remote trainers and rollout workers.

    taskforge serve --tasks tasks/ --port 8088 --concurrency 4 --rewards-out tasks/rewards

    server = RewardServer(read_tasks("tasks/"), scorer=Scorer(backend=open_backend("docker")),
                          config=ServerConfig(port=0))
    server.start()                    # serves from a background thread; server.url has the port
    ...
    server.close()                    # drains the scorings in flight, then closes the scorer

Each scoring is ``taskforge.scoring.scorer.Scorer.score`` (tamper-resistant: the trusted tests are put back,
and tampering scores 0). ``RewardClient`` (``taskforge.scoring.client``) speaks this protocol.

Protocol: JSON in and out, one request per connection (HTTP/1.0 semantics).

| method and path | body | answer (200) |
|---|---|---|
| ``GET /health`` | | ``{"status": "ok", "tasks": N, "queue": {"depth": d, "limit": L}, "concurrency": C, "scorer_version": V, "taskforge_version": T, "scored": S, "rewards": {...} or null}`` |
| ``GET /tasks`` | | ``{"count": N, "instance_ids": [...]}`` |
| ``GET /tasks?instance_id=ID`` | | the task's public fields (``PUBLIC_TASK_FIELDS``, with ``FAIL_TO_PASS_count`` and ``PASS_TO_PASS_count``); never ``patch``, ``test_patch``, ``removal_patch`` or the test ids |
| ``POST /score`` | ``{"instance_id": str, "patch": str, "candidate_id": str?, "mode": "binary" or "partial"?}`` | one result |
| ``POST /score_many`` | ``{"items": [item, ...]}``, each item as the body of ``/score`` | a JSON list of results, in the order given |

A result is ``RewardResult.to_json()`` without ``patch`` and with ``patch_sha256`` (hex): ``instance_id``,
``candidate_id``, ``reward``, ``mode``, ``status`` (ok, timeout, patch_failed, tampered, infra_error),
``fail_to_pass`` and ``pass_to_pass`` (test id → outcome), ``dropped``, ``tampering``, ``detail``,
``apply_s``, ``test_s``, ``duration_s``, ``image_name``, ``scored_at`` (ISO 8601). A scoring that
could not run for a reason of the infrastructure is still a 200 with status ``infra_error``.

``patch`` is a unified diff against the task's start state (``""`` is the empty candidate).
``mode`` defaults to the server's (binary). An empty or absent ``candidate_id`` becomes
``sha256:`` and the first 16 hex digits of the patch's sha256, so that reward rows stay keyed by
content; reward rows are keyed by (instance_id, candidate_id), and a pair already stored is scored
and answered but not stored again.

Errors answer ``{"error": "<one line>", "reason": "<code>"}``:

| status | reason | when |
|---|---|---|
| 400 | ``invalid_json``, ``bad_request`` | the body is not JSON; a field is missing, unknown or of the wrong type; an unknown mode |
| 401 | ``unauthorized`` | an API key is set and the request (other than ``/health``) lacks ``Authorization: Bearer KEY`` |
| 404 | ``not_found``, ``unknown_instance`` | an unknown path; an unknown ``instance_id`` |
| 405 | ``method_not_allowed`` | a known path with another method (``Allow`` names the right one) |
| 411 | ``length_required`` | a POST without ``Content-Length`` (chunked bodies are not read) |
| 413 | ``body_too_large``, ``too_many_items`` | a body over ``max_body_bytes``; more ``/score_many`` items than the queue holds |
| 500 | ``internal`` | a bug; the traceback goes to the server's log |
| 503 | ``queue_full``, ``shutting_down`` | the queue is full (``Retry-After``: seconds, an estimate); the server is stopping |
| 504 | ``timeout`` | the answer took longer than ``request_timeout_s``; the scoring goes on (its own timeout bounds it), and its reward row is still stored |

The queue counts scorings, not requests: a ``/score`` takes one place, a ``/score_many`` one per
item, from when it is admitted until its scoring ends (even after a 504). At most ``concurrency``
(the scorer's) run at once; the rest wait in order.

With ``rewards_out``, every result is also a reward row (``taskforge.datasets.REWARDS``) in that
folder, written by ``RewardSink`` in small shards: when ``flush_rows`` rows are waiting or
``flush_s`` seconds have passed, and on close. Rows not yet flushed are lost if the process is
killed (SIGKILL); SIGTERM and SIGINT flush them (``taskforge serve`` closes the server on both).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import socketserver
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self, TextIO
from urllib.parse import parse_qs, urlsplit

from taskforge.errors import TaskforgeError
from taskforge.scoring.scorer import (
    MODES,
    SCORER_VERSION,
    RewardMode,
    RewardResult,
    Scorer,
)
from taskforge.task import Task

__all__ = [
    "PUBLIC_TASK_FIELDS",
    "RewardServer",
    "RewardSink",
    "ServerConfig",
    "candidate_key",
    "public_result",
    "public_task",
]

PUBLIC_TASK_FIELDS = ("instance_id", "repo", "version", "base_commit", "strategy", "problem_statement", "image_name")
"""What ``GET /tasks?instance_id=`` shows of a task: what an agent may see, and no more."""

_ITEM_FIELDS = ("instance_id", "patch", "candidate_id", "mode")
_MAX_CANDIDATE_ID = 512
_DRAIN_LIMIT = 64 * 1024 * 1024
"""A refused body up to this size is read and thrown away before the answer, so that the client,
still sending, is not cut off by a reset and gets the answer; a larger one just closes the connection."""


def candidate_key(candidate_id: str, patch: str) -> str:
    """The candidate id a reward row is stored under: ``candidate_id``, or, when it is empty, one
    derived from the patch's content (``sha256:`` and 16 hex digits)."""
    return candidate_id or f"sha256:{hashlib.sha256(patch.encode()).hexdigest()[:16]}"


def public_result(result: RewardResult) -> dict[str, Any]:
    """A result as the service answers it: ``to_json()`` with ``patch_sha256`` instead of ``patch``,
    and without ``canaries_passed`` (mining's gate reads it) and ``task_sha256`` (the stored row's):
    a client of an earlier version would refuse a field it does not know."""
    data = result.to_json()
    data["patch_sha256"] = hashlib.sha256(data.pop("patch").encode()).hexdigest()
    data.pop("canaries_passed", None)
    data.pop("task_sha256", None)
    return data


def public_task(task: Task) -> dict[str, Any]:
    """The fields of ``task`` an agent may see (``PUBLIC_TASK_FIELDS``) and its test counts."""
    data: dict[str, Any] = {name: getattr(task, name) for name in PUBLIC_TASK_FIELDS}
    data["FAIL_TO_PASS_count"] = len(task.FAIL_TO_PASS)
    data["PASS_TO_PASS_count"] = len(task.PASS_TO_PASS)
    return data


@dataclass(kw_only=True, slots=True)
class ServerConfig:
    """How the service listens, queues and stores (the scorer's own settings are the scorer's)."""

    host: str = "127.0.0.1"
    """Address to listen on; loopback by default (set an API key before opening it wider)."""
    port: int = 8088
    """Port to listen on; 0 takes a free one (see ``RewardServer.url``)."""
    max_queue: int = 64
    """Scorings admitted at once, waiting or running; beyond it requests get 503."""
    request_timeout_s: float = 900.0
    """Longest a request waits for its results before a 504 (the scoring itself goes on)."""
    max_body_bytes: int = 32 * 1024 * 1024
    """Largest request body read; a larger one gets 413."""
    read_timeout_s: float = 60.0
    """Longest the server waits on a client that is slow to send its request."""
    rewards_out: Path | None = None
    """A reward dataset folder to store every result in (``taskforge.datasets.REWARDS``), or None."""
    flush_rows: int = 64
    """Reward rows are written as a shard once this many are waiting..."""
    flush_s: float = 30.0
    """...or once the oldest has waited this long."""

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"ServerConfig.port must be in 0..65535, got {self.port}")
        for name in ("max_queue", "max_body_bytes", "flush_rows"):
            if getattr(self, name) < 1:
                raise ValueError(f"ServerConfig.{name} must be at least 1, got {getattr(self, name)}")
        for name in ("request_timeout_s", "read_timeout_s", "flush_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"ServerConfig.{name} must be positive, got {getattr(self, name)}")


RETRY = "retry:"
"""What :attr:`RewardSink.versions` puts before the task version of an ``infra_error`` row."""


class RewardSink:
    """Reward rows stored in a dataset folder in small shards as results arrive; thread-safe.

    The folder is opened with ``DatasetWriter`` (kind REWARDS), so it resumes: ``keys`` holds the
    (instance_id, candidate_id) keys already stored, and a row whose key is there is skipped,
    unless the stored row scored another version of the task, or is an ``infra_error``
    (``versions``): that row is taken out (``DatasetWriter.drop``, a retraction in the manifest)
    and the new one stored.
    A background thread flushes rows that have waited ``flush_s``.
    """

    def __init__(self, directory: Path, *, recipe: Mapping[str, Any], prefix: str, flush_rows: int = 64,
                 flush_s: float = 30.0) -> None:
        from taskforge.datasets import REWARDS, DatasetWriter, run_versions

        self.directory = directory
        self.prefix = prefix
        self.flush_rows = flush_rows
        self.flush_s = flush_s
        self.writer = DatasetWriter(directory, kind=REWARDS, recipe=recipe,
                                    versions=run_versions(scorer_version=SCORER_VERSION))
        statuses = self.writer.column("status")
        self.versions: dict[str, str] = {key: f"{RETRY}{version}" if statuses.get(key) == "infra_error" else version
                                         for key, version in self.writer.column("task_sha256").items()}
        """Key → ``task_sha256`` of every row stored; of a row the infrastructure kept from being
        scored (``infra_error``: an image that could not be built, an engine that failed), a value
        no task has, so that it is scored again, like a row of another version of its task."""
        self.replaced = 0
        """Stored rows of another version of their task that new rows replaced."""
        self.written = 0
        """Rows written as new by this sink."""
        self.skipped = 0
        """Rows not written because their key was already stored."""
        self.failed = 0
        """Rows lost to a failed write (each failure is also logged)."""
        self._rows: list[dict[str, Any]] = []
        self._oldest = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_aged, name="taskforge-reward-sink", daemon=True)
        self._flusher.start()

    @property
    def keys(self) -> set[str]:
        """Keys of every row stored in the folder (``REWARDS.key_of``: instance_id NUL candidate_id)."""
        return self.writer.keys

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._rows)

    def add(self, result: RewardResult) -> None:
        """Queue ``result``'s row; writes a shard when enough rows wait. A write that fails raises
        (the rows it held are counted in ``failed``)."""
        with self._lock:
            if not self._rows:
                self._oldest = time.monotonic()
            self._rows.append(result.to_row())
            if len(self._rows) >= self.flush_rows:
                self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        rows, self._rows = self._rows, []
        if not rows:
            return
        from taskforge.datasets import REWARDS

        keys = [REWARDS.key_of(row) for row in rows]
        stale = {k for k, row in zip(keys, rows, strict=True)
                 if k in self.versions and self.versions[k] != row["task_sha256"]}
        try:
            if stale:
                retried = sum(1 for k in stale if self.versions[k].startswith(RETRY))
                reason = f"{len(stale) - retried} row(s) scored again against another version of their task"
                if retried:
                    reason = (f"{retried} infra_error row(s) scored again" if retried == len(stale)
                              else f"{reason}, {retried} infra_error row(s) scored again")
                self.writer.drop(stale, prefix=self.prefix, reason=reason)
            written = self.writer.write(rows, prefix=self.prefix)
        except BaseException:
            # The writer has taken the keys of rows it could not write: they cannot be tried again.
            self.failed += len(rows)
            raise
        for key, row in zip(keys, rows, strict=True):  # what is stored now: new rows and replaced ones
            if key not in self.versions or key in stale:
                self.versions[key] = row["task_sha256"]
        self.replaced += len(stale)
        self.written += written.written
        self.skipped += written.skipped

    def _flush_aged(self) -> None:
        while not self._stop.wait(min(self.flush_s, 1.0)):
            with self._lock:
                if not self._rows or time.monotonic() - self._oldest < self.flush_s:
                    continue
                try:
                    self._flush_locked()
                except (TaskforgeError, OSError) as err:
                    print(f"taskforge serve: could not store reward rows in {self.directory}: {err}", file=sys.stderr)

    def close(self) -> None:
        """Write what waits, stop the flusher and release the folder."""
        self._stop.set()
        self._flusher.join()
        try:
            self.flush()
        finally:
            self.writer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Refusal(Exception):
    """A request answered with an error status (caught in the handler, turned into JSON)."""

    def __init__(self, status: int, reason: str, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.headers = dict(headers or {})


@dataclass(frozen=True, slots=True)
class _Item:
    task: Task
    patch: str
    candidate_id: str
    mode: RewardMode


_ROUTES: dict[str, tuple[str, ...]] = {
    "/health": ("GET", "HEAD"),
    "/tasks": ("GET", "HEAD"),
    "/score": ("POST",),
    "/score_many": ("POST",),
}


class RewardServer:
    """The HTTP reward service over ``tasks`` (see the module docstring for the protocol).

    The server owns ``scorer``: ``close`` closes it (and so does a constructor that fails).
    ``api_key``, when given, is required (as ``Authorization: Bearer KEY``) on every request but
    ``GET /health``. ``log`` gets one line
    per request (None: silent).
    """

    def __init__(
        self,
        tasks: Iterable[Task],
        *,
        scorer: Scorer,
        config: ServerConfig | None = None,
        api_key: str | None = None,
        log: TextIO | None = sys.stderr,
    ) -> None:
        self.tasks: dict[str, Task] = {task.instance_id: task for task in tasks}
        self.scorer = scorer
        self.config = config or ServerConfig()
        if api_key is not None and not api_key:
            raise ValueError("api_key must not be empty (pass None for no key)")
        self._api_key = api_key.encode() if api_key else None
        self.log = log
        self._lock = threading.Lock()
        self._depth = 0
        self._scored = 0
        self._recent_s: list[float] = []
        self._closing = False
        self._closed = False
        self._serving = False
        self._thread: threading.Thread | None = None
        self.sink: RewardSink | None = None
        try:
            if self.config.rewards_out is not None:
                self.sink = RewardSink(self.config.rewards_out,
                                       recipe={"command": "serve", "scorer_version": SCORER_VERSION},
                                       prefix="rewards-serve", flush_rows=self.config.flush_rows,
                                       flush_s=self.config.flush_s)
            self.httpd = _HTTPServer((self.config.host, self.config.port), self)
        except BaseException:
            if self.sink is not None:
                self.sink.close()
            scorer.close()
            raise
        self._executor = ThreadPoolExecutor(max_workers=scorer.concurrency, thread_name_prefix="taskforge-serve")

    # -- life cycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> RewardServer:
        """Serve from a background thread; returns at once."""
        self._serving = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="taskforge-serve-http", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve from this thread until ``close`` is called from another one."""
        self._serving = True
        self.httpd.serve_forever()

    def close(self) -> None:
        """Stop taking requests, cancel scorings still waiting, let running ones finish (their own
        timeout bounds them), store the reward rows, and close the scorer (its containers go)."""
        with self._lock:
            if self._closed:
                return
            self._closed = self._closing = True
        if self._serving:  # shutdown() waits for serve_forever, forever if it never ran
            self.httpd.shutdown()
        try:
            self._executor.shutdown(wait=True, cancel_futures=True)
            if self.sink is not None:
                self.sink.close()
        finally:
            self.scorer.close()
            self.httpd.server_close()
            if self._thread is not None:
                self._thread.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the queue ----------------------------------------------------------------------------

    def _admit(self, count: int) -> None:
        with self._lock:
            if self._closing:
                raise _Refusal(503, "shutting_down", "the server is shutting down")
            if self._depth + count > self.config.max_queue:
                raise _Refusal(503, "queue_full",
                               f"the queue is full ({self._depth} of {self.config.max_queue} scorings waiting or "
                               f"running; this request needs {count}); retry later",
                               headers={"Retry-After": str(self._retry_after_locked())})
            self._depth += count

    def _retry_after_locked(self) -> int:
        """Seconds until a place is likely free: the recent mean scoring time, times the queue's
        depth over the scorer's concurrency (at least 1)."""
        mean = sum(self._recent_s) / len(self._recent_s) if self._recent_s else 1.0
        return max(1, math.ceil(mean * self._depth / self.scorer.concurrency))

    def _finished(self, duration_s: float | None) -> None:
        with self._lock:
            self._depth -= 1
            if duration_s is not None:
                self._scored += 1
                self._recent_s = [*self._recent_s[-31:], duration_s]

    def _score_one(self, item: _Item) -> RewardResult:
        result = self.scorer.score(item.task, item.patch, candidate_id=item.candidate_id, mode=item.mode)
        if self.sink is not None:
            try:
                self.sink.add(result)
            except (TaskforgeError, OSError) as err:  # the answer still goes out; the rows are counted as failed
                self._log(f"could not store reward rows in {self.sink.directory}: {err}")
        return result

    def _submit(self, item: _Item) -> Future[RewardResult]:
        future = self._executor.submit(self._score_one, item)

        def done(f: Future[RewardResult]) -> None:
            ok = not f.cancelled() and f.exception() is None
            self._finished(f.result().duration_s if ok else None)

        future.add_done_callback(done)
        return future

    def _score_items(self, items: list[_Item]) -> list[RewardResult]:
        """Admit, score and wait for ``items`` (raises ``_Refusal`` for 413, 503, 504, 500)."""
        if len(items) > self.config.max_queue:
            raise _Refusal(413, "too_many_items",
                           f"{len(items)} items; the queue holds at most {self.config.max_queue} scorings: split them")
        self._admit(len(items))
        futures: list[Future[RewardResult]] = []
        try:
            for item in items:
                futures.append(self._submit(item))
        except RuntimeError as err:  # the executor was shut down between admission and submission
            with self._lock:
                self._depth -= len(items) - len(futures)
            raise _Refusal(503, "shutting_down", "the server is shutting down") from err
        _, waiting = wait(futures, timeout=self.config.request_timeout_s)
        if waiting:
            raise _Refusal(504, "timeout",
                           f"{len(waiting)} of {len(futures)} scorings did not finish within "
                           f"{self.config.request_timeout_s:g} s; they go on, and their rows are stored")
        results = []
        for future in futures:
            try:
                results.append(future.result())
            except CancelledError as err:
                raise _Refusal(503, "shutting_down", "the server is shutting down") from err
            except Exception as err:  # a bug in scoring: the request boundary answers 500
                self._log("".join(traceback.format_exception(err)).rstrip())
                raise _Refusal(500, "internal", f"scoring failed: {type(err).__name__}: {err}") from err
        return results

    def health(self) -> dict[str, Any]:
        from taskforge import __version__

        with self._lock:
            depth, scored = self._depth, self._scored
        rewards = None if self.sink is None else {
            "written": self.sink.written, "pending": self.sink.pending, "skipped": self.sink.skipped,
            "failed": self.sink.failed}
        return {"status": "shutting_down" if self._closing else "ok", "tasks": len(self.tasks),
                "queue": {"depth": depth, "limit": self.config.max_queue}, "concurrency": self.scorer.concurrency,
                "scorer_version": SCORER_VERSION, "taskforge_version": __version__, "scored": scored,
                "rewards": rewards}

    # -- requests -----------------------------------------------------------------------------

    def authorized(self, header: str | None) -> bool:
        if self._api_key is None:
            return True
        scheme, _, token = (header or "").strip().partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self._api_key)

    def _route(self, method: str, target: str, authorization: str | None,
              body: Callable[[], bytes]) -> tuple[int, Any, dict[str, str]]:
        """Answer one request: (status, JSON payload, extra headers). ``body`` reads the request's
        body (raising ``_Refusal`` on a bad one)."""
        split = urlsplit(target)
        path = split.path
        if path != "/health" and not self.authorized(authorization):
            raise _Refusal(401, "unauthorized", "missing or wrong API key: send Authorization: Bearer KEY",
                           headers={"WWW-Authenticate": 'Bearer realm="taskforge"'})
        if path not in _ROUTES:
            raise _Refusal(404, "not_found", f"no such path {path!r}; paths: {', '.join(_ROUTES)}")
        allowed = _ROUTES[path]
        if method not in allowed:
            raise _Refusal(405, "method_not_allowed", f"{method} is not allowed on {path}; use {allowed[0]}",
                           headers={"Allow": ", ".join(allowed)})
        if path == "/health":
            return 200, self.health(), {}
        if path == "/tasks":
            return 200, self._tasks(parse_qs(split.query)), {}
        data = self._json(body())
        if path == "/score":
            return 200, public_result(self._score_items([self._item(data, "the body")])[0]), {}
        return 200, [public_result(r) for r in self._score_items(self._items(data))], {}

    def _tasks(self, query: Mapping[str, list[str]]) -> dict[str, Any]:
        if "instance_id" not in query:
            return {"count": len(self.tasks), "instance_ids": list(self.tasks)}
        instance_id = query["instance_id"][0]
        if instance_id not in self.tasks:
            raise _Refusal(404, "unknown_instance", f"no task {instance_id!r}")
        return public_task(self.tasks[instance_id])

    @staticmethod
    def _json(body: bytes) -> Any:
        try:
            return json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
            raise _Refusal(400, "invalid_json", f"the body is not JSON: {err}") from err

    def _items(self, data: Any) -> list[_Item]:
        if not isinstance(data, dict):
            raise _Refusal(400, "bad_request", "the body must be a JSON object with items")
        unknown = sorted(set(data) - {"items"})
        if unknown:
            raise _Refusal(400, "bad_request", f"unknown field(s) {', '.join(unknown)}; the body holds only items")
        if "items" not in data:
            raise _Refusal(400, "bad_request", "items is missing")
        if not isinstance(data["items"], list):
            raise _Refusal(400, "bad_request", f"items must be a list, not {_json_type(data['items'])}")
        return [self._item(entry, f"items[{n}]") for n, entry in enumerate(data["items"])]

    def _item(self, data: Any, where: str) -> _Item:
        if not isinstance(data, dict):
            raise _Refusal(400, "bad_request", f"{where} must be a JSON object, not {_json_type(data)}")
        unknown = sorted(set(data) - set(_ITEM_FIELDS))
        if unknown:
            raise _Refusal(400, "bad_request",
                           f"{where} has unknown field(s) {', '.join(unknown)}; known: {', '.join(_ITEM_FIELDS)}")
        for name in ("instance_id", "patch"):
            if name not in data:
                raise _Refusal(400, "bad_request", f"{where}: {name} is missing")
        for name, value in data.items():
            optional = name in ("candidate_id", "mode")
            if not isinstance(value, str) and not (optional and value is None):
                raise _Refusal(400, "bad_request", f"{where}: {name} must be a string, not {_json_type(value)}")
        mode = self.scorer.mode if data.get("mode") is None else data["mode"]
        if mode not in MODES:
            raise _Refusal(400, "bad_request", f"{where}: unknown mode {mode!r}; known: {', '.join(MODES)}")
        candidate_id = data.get("candidate_id") or ""
        if len(candidate_id) > _MAX_CANDIDATE_ID:
            raise _Refusal(400, "bad_request", f"{where}: candidate_id is longer than {_MAX_CANDIDATE_ID} characters")
        task = self.tasks.get(data["instance_id"])
        if task is None:
            raise _Refusal(404, "unknown_instance", f"{where}: no task {data['instance_id']!r}")
        return _Item(task=task, patch=data["patch"], candidate_id=candidate_key(candidate_id, data["patch"]),
                     mode=mode)

    def _log(self, line: str) -> None:
        if self.log is not None:
            print(f"taskforge serve: {line}", file=self.log, flush=True)


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # a handler still answering does not hold up close

    def __init__(self, address: tuple[str, int], app: RewardServer) -> None:
        self.app = app
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind looks the host's name up (getfqdn), which can hang without DNS.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.0"  # one request per connection: no idle keep-alive threads

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.app.config.read_timeout_s)  # a client slow to send is dropped

    def version_string(self) -> str:
        from taskforge import __version__

        return f"taskforge-reward/{__version__}"

    def do_GET(self) -> None:
        self._answer()

    def do_HEAD(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_PUT(self) -> None:
        self._answer()

    def do_DELETE(self) -> None:
        self._answer()

    def do_PATCH(self) -> None:
        self._answer()

    def do_OPTIONS(self) -> None:
        self._answer()

    def _answer(self) -> None:
        app = self.server.app
        started = time.monotonic()
        self._body_read = False
        try:
            status, payload, headers = app._route(self.command, self.path, self.headers.get("Authorization"),
                                                 self._read_body)
        except _Refusal as refusal:
            status, headers = refusal.status, refusal.headers
            payload = {"error": refusal.message, "reason": refusal.reason}
        if not self._body_read:
            self._discard_body()
        self._send_json(status, payload, headers)
        app._log(f'{self.client_address[0]} "{self.command} {self.path}" {status} {time.monotonic() - started:.2f}s')

    def _content_length(self) -> int | None:
        raw = self.headers.get("Content-Length")
        if raw is None:
            return None
        try:
            length = int(raw)
        except ValueError:
            length = -1
        if length < 0:
            raise _Refusal(400, "bad_request", f"Content-Length {raw!r} is not a byte count")
        return length

    def _read_body(self) -> bytes:
        self._body_read = True
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise _Refusal(411, "length_required", "send the body with a Content-Length; chunked bodies are not read")
        length = self._content_length()
        if length is None:
            raise _Refusal(411, "length_required", "a POST needs a Content-Length")
        limit = self.server.app.config.max_body_bytes
        if length > limit:
            self._body_read = False  # thrown away before the answer
            raise _Refusal(413, "body_too_large", f"the body is {length} bytes; at most {limit} are read")
        body = self.rfile.read(length)
        if len(body) < length:
            raise _Refusal(400, "bad_request", f"the body ended after {len(body)} of {length} bytes")
        return body

    def _discard_body(self) -> None:
        """Read and drop a body the answer refuses, so that the client gets the answer (closing a
        socket with unread data resets the connection)."""
        self._body_read = True
        try:
            length = self._content_length() or 0
        except _Refusal:
            return
        if length > _DRAIN_LIMIT:
            return
        while length > 0:
            chunk = self.rfile.read(min(length, 1 << 16))
            if not chunk:
                return
            length -= len(chunk)

    def _send_json(self, status: int, payload: Any, headers: Mapping[str, str]) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client left; its scoring was done and stored all the same

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors ``http.server`` finds itself (a malformed request line, an unknown method) as JSON too."""
        self.close_connection = True
        reason = {408: "timeout", 501: "not_implemented"}.get(code, "bad_request")
        self._send_json(code, {"error": message or HTTPStatus(code).phrase, "reason": reason}, {})

    def log_message(self, format: str, *args: Any) -> None:
        pass  # RewardServer._log writes one line per answer

"""A client of the reward service (``taskforge serve``, protocol in ``taskforge.scoring.server``).

    client = RewardClient("http://scorer:8088", api_key=os.environ["TASKFORGE_API_KEY"])
    result = client.score(instance_id, patch, candidate_id="rollout-7")       # a RewardResult
    results = client.score_many([{"instance_id": i, "patch": p} for i, p in batch])

stdlib only (urllib). A request the server refuses for now (503: a full queue, or a server that
is stopping) or that cannot reach the server (refused, reset, cut off before an answer) is tried
again, up to ``retries`` more times, after a backoff: doubling from ``backoff_s`` with jitter,
capped at ``max_backoff_s``, and never shorter than the server's ``Retry-After`` (within that cap).
Every other failure raises ``RewardServerError`` at once; a 504 and a client timeout are not
retried, since the server goes on scoring that request.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from typing import Any

from taskforge.errors import TaskforgeError
from taskforge.scoring.rewards import RewardMode, RewardResult
from taskforge.task import Task

__all__ = ["RewardClient", "RewardServerError"]


class RewardServerError(TaskforgeError):
    """The reward service refused a request, or could not be reached.

    ``status`` is the HTTP status (None when no answer came), ``reason`` the server's short code
    (``queue_full``, ``unknown_instance``, ``unauthorized``, ...; ``unreachable`` without an answer),
    and ``message`` the server's one line.
    """

    reason = "reward_server"

    def __init__(self, message: str, *, status: int | None, reason: str, retry_after_s: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message, reason=reason)
        self.status = status
        self.message = message
        self.retry_after_s = retry_after_s


class RewardClient:
    """Talks to one reward server; safe to share between threads (each request is its own connection)."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 960.0,
        retries: int = 5,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
    ) -> None:
        if retries < 0:
            raise ValueError(f"retries must be at least 0, got {retries}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout_s = timeout_s
        """Longest one attempt waits for an answer; keep it above the server's request timeout."""
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s

    # -- the calls ----------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        result: dict[str, Any] = self._request("GET", "/health")
        return result

    def tasks(self) -> list[str]:
        """The instance ids the server scores."""
        return list(self._request("GET", "/tasks")["instance_ids"])

    def task(self, instance_id: str) -> dict[str, Any]:
        """One task's public fields (never its gold patch or hidden tests)."""
        from urllib.parse import quote

        result: dict[str, Any] = self._request("GET", f"/tasks?instance_id={quote(instance_id, safe='')}")
        return result

    def score(self, task: Task | str, patch: str, *, candidate_id: str = "",
              mode: RewardMode | None = None) -> RewardResult:
        """Score one candidate ``patch`` (a unified diff against the task's start state) for a task
        (its row, or its ``instance_id``: the server holds the row)."""
        instance_id = task if isinstance(task, str) else task.instance_id
        item = _item(instance_id, patch, candidate_id, mode)
        return _result(self._request("POST", "/score", item), patch)

    def score_many(self, items: Iterable[Mapping[str, Any]]) -> list[RewardResult]:
        """Score many candidates in one request; each item holds ``instance_id``, ``patch`` and
        optionally ``candidate_id`` and ``mode``. Results come back in the order given."""
        body = [_item(i["instance_id"], i["patch"], i.get("candidate_id", ""), i.get("mode")) for i in items]
        answers = self._request("POST", "/score_many", {"items": body})
        return [_result(answer, item["patch"]) for answer, item in zip(answers, body, strict=True)]

    # -- one request, with retries ------------------------------------------------------------

    def _request(self, method: str, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        attempt = 0
        while True:
            try:
                return self._once(urllib.request.Request(self.base_url + path, data=data, headers=headers,
                                                         method=method))
            except RewardServerError as err:
                retryable = err.status == 503 or err.reason == "unreachable"
                if not retryable or attempt >= self.retries:
                    raise
                delay = min(self.max_backoff_s, self.backoff_s * 2**attempt) * random.uniform(0.5, 1.0)
                time.sleep(max(delay, min(err.retry_after_s or 0.0, self.max_backoff_s)))
                attempt += 1

    def _once(self, request: urllib.request.Request) -> Any:
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as err:
            raise _refusal(err) from err
        except TimeoutError as err:
            # The server may still be working on it, so it is not sent again.
            raise RewardServerError(f"no answer from {self.base_url} within {self.timeout_s:g} s",
                                    status=None, reason="client_timeout") from err
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError) as err:
            why = err.reason if isinstance(err, urllib.error.URLError) else err
            if isinstance(why, TimeoutError):
                raise RewardServerError(f"no answer from {self.base_url} within {self.timeout_s:g} s",
                                        status=None, reason="client_timeout") from err
            raise RewardServerError(f"cannot reach {self.base_url}: {why}", status=None, reason="unreachable") from err
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise RewardServerError(f"{self.base_url} answered something that is not JSON: {err}", status=None,
                                    reason="bad_answer") from err


def _item(instance_id: str, patch: str, candidate_id: str, mode: RewardMode | None) -> dict[str, Any]:
    item: dict[str, Any] = {"instance_id": instance_id, "patch": patch, "candidate_id": candidate_id}
    if mode is not None:
        item["mode"] = mode
    return item


def _result(answer: Mapping[str, Any], patch: str) -> RewardResult:
    values = dict(answer)
    digest = values.pop("patch_sha256")
    if digest != hashlib.sha256(patch.encode()).hexdigest():
        raise RewardServerError("the server scored another patch than the one sent (patch_sha256 differs)",
                                status=None, reason="bad_answer")
    return RewardResult.from_json({**values, "patch": patch})


def _refusal(err: urllib.error.HTTPError) -> RewardServerError:
    try:
        body = json.loads(err.read().decode("utf-8"))
        message, reason = str(body["error"]), str(body.get("reason", "error"))
    except (ValueError, KeyError, TypeError, OSError):
        message, reason = str(err.reason or f"HTTP {err.code}"), "error"
    finally:
        err.close()
    retry_after = err.headers.get("Retry-After") if err.headers else None
    try:
        retry_after_s = float(retry_after) if retry_after else None
    except ValueError:
        retry_after_s = None
    return RewardServerError(message, status=err.code, reason=reason, retry_after_s=retry_after_s)

"""The reward service over real HTTP on loopback, with the real scorer and Docker, on the sample
tasks: what it shows of a task, gold and empty candidates through ``RewardClient``, every refusal
as a JSON error, the bounded queue (503) and the request timeout (504) held by a really slow
candidate, and ``taskforge serve`` stopping cleanly on SIGTERM."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from taskforge.datasets import (
    read_manifest,
    read_rows,
    read_tasks,
)
from taskforge.repo.startstate import rebuild_start_state
from taskforge.scoring.client import RewardClient, RewardServerError
from taskforge.scoring.scorer import Scorer
from taskforge.scoring.server import PUBLIC_TASK_FIELDS, RewardServer, ServerConfig

pytestmark = pytest.mark.docker

KEY = "test-key-7f3a"
AUTH = {"Authorization": f"Bearer {KEY}"}
MAX_BODY = 64 * 1024


@pytest.fixture(scope="module")
def sample(local_sample) -> Path:  # type: ignore[no-untyped-def]
    return local_sample[0]


@pytest.fixture(scope="module")
def served(sample: Path, backend, tmp_path_factory) -> Iterator[tuple[RewardServer, Path]]:  # type: ignore[no-untyped-def]
    """A server with an API key, storing every result at once (flush_rows=1) in a reward folder."""
    rewards = tmp_path_factory.mktemp("served") / "rewards"
    config = ServerConfig(port=0, max_body_bytes=MAX_BODY, rewards_out=rewards, flush_rows=1)
    server = RewardServer(read_tasks(sample), scorer=Scorer(backend=backend, timeout_s=120, concurrency=2),
                          config=config, api_key=KEY, log=None)
    server.start()
    yield server, rewards
    server.close()


def _raw(server: RewardServer, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any, http.client.HTTPMessage]:
    """One request as sent, no client logic: (status, JSON answer, headers)."""
    host, port = server.httpd.server_address[:2]
    conn = http.client.HTTPConnection(str(host), int(port), timeout=120)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, json.loads(response.read()), response.headers
    finally:
        conn.close()


def test_health_is_open_and_a_task_shows_no_gold(served: tuple[RewardServer, Path], sample: Path) -> None:
    server, _ = served
    status, health, _ = _raw(server, "GET", "/health")  # no key needed
    assert status == 200
    assert health["status"] == "ok" and health["tasks"] == 3 and health["scorer_version"] == "2"
    assert health["queue"] == {"depth": 0, "limit": 64}

    client = RewardClient(server.url, api_key=KEY)
    tasks = read_tasks(sample)
    assert client.tasks() == [t.instance_id for t in tasks]
    for task in tasks:
        shown = client.task(task.instance_id)
        assert set(shown) == {*PUBLIC_TASK_FIELDS, "FAIL_TO_PASS_count", "PASS_TO_PASS_count"}
        assert shown["problem_statement"] == task.problem_statement and shown["image_name"] == task.image_name
        assert shown["FAIL_TO_PASS_count"] == len(task.FAIL_TO_PASS)
        text = json.dumps(shown)
        for secret in (task.patch, task.test_patch, task.removal_patch, *task.FAIL_TO_PASS):
            assert json.dumps(secret)[1:-1] not in text


def test_gold_scores_one_and_empty_zero_and_each_result_is_stored(served: tuple[RewardServer, Path],
                                                                  sample: Path) -> None:
    server, rewards = served
    client = RewardClient(server.url, api_key=KEY)
    first, second, third = read_tasks(sample)

    gold = client.score(first.instance_id, first.patch, candidate_id="gold")
    assert (gold.reward, gold.status, gold.candidate_id, gold.patch) == (1.0, "ok", "gold", first.patch)
    assert set(gold.fail_to_pass.values()) == {"passed"} and set(gold.pass_to_pass.values()) == {"passed"}
    empty = client.score(first.instance_id, "", candidate_id="empty", mode="partial")
    assert (empty.reward, empty.status, empty.mode) == (0.0, "ok", "partial")
    assert set(empty.fail_to_pass.values()) == {"failed"}

    many = client.score_many([{"instance_id": second.instance_id, "patch": second.patch, "candidate_id": "gold"},
                              {"instance_id": third.instance_id, "patch": ""}])
    assert [(r.instance_id, r.reward, r.status) for r in many] == [
        (second.instance_id, 1.0, "ok"), (third.instance_id, 0.0, "ok")]
    assert re.fullmatch(r"sha256:[0-9a-f]{16}", many[1].candidate_id)  # no candidate_id: named by content

    rows = {(r["instance_id"], r["candidate_id"]): r for r in read_rows(rewards)}
    assert {key: row["reward"] for key, row in rows.items()} == {
        (first.instance_id, "gold"): 1.0, (first.instance_id, "empty"): 0.0,
        (second.instance_id, "gold"): 1.0, (third.instance_id, many[1].candidate_id): 0.0}
    assert rows[(first.instance_id, "gold")]["patch"] == first.patch
    assert read_manifest(rewards).recipe == {"command": "serve", "scorer_version": "2"}
    assert client.health()["scored"] >= 4


def _json(value: Any) -> bytes:
    return json.dumps(value).encode()


ID = "iniconfig__body-iniconfig-IniConfig-get-9b17388e68"  # a sample task
BAD_REQUESTS = [
    # (name, method, path, body, status, reason)
    ("invalid json", "POST", "/score", b"{not json", 400, "invalid_json"),
    ("not utf-8", "POST", "/score", b"\xff\xfe{}", 400, "invalid_json"),
    ("body not an object", "POST", "/score", _json([ID, ""]), 400, "bad_request"),
    ("missing instance_id", "POST", "/score", _json({"patch": ""}), 400, "bad_request"),
    ("missing patch", "POST", "/score", _json({"instance_id": ID}), 400, "bad_request"),
    ("patch not a string", "POST", "/score", _json({"instance_id": ID, "patch": 5}), 400, "bad_request"),
    ("candidate_id not a string", "POST", "/score", _json({"instance_id": ID, "patch": "", "candidate_id": []}),
     400, "bad_request"),
    ("unknown field", "POST", "/score", _json({"instance_id": ID, "patch": "", "reward": 1}), 400, "bad_request"),
    ("bad mode", "POST", "/score", _json({"instance_id": ID, "patch": "", "mode": "generous"}), 400, "bad_request"),
    ("unknown instance", "POST", "/score", _json({"instance_id": "no-such-task", "patch": ""}), 404,
     "unknown_instance"),
    ("items missing", "POST", "/score_many", _json({}), 400, "bad_request"),
    ("items not a list", "POST", "/score_many", _json({"items": {"instance_id": ID}}), 400, "bad_request"),
    ("item not an object", "POST", "/score_many", _json({"items": ["x"]}), 400, "bad_request"),
    ("item of an unknown instance", "POST", "/score_many",
     _json({"items": [{"instance_id": ID, "patch": ""}, {"instance_id": "no-such-task", "patch": ""}]}), 404,
     "unknown_instance"),
    ("more items than the queue", "POST", "/score_many", _json({"items": [{"instance_id": ID, "patch": ""}] * 65}),
     413, "too_many_items"),
    ("body too large", "POST", "/score", _json({"instance_id": ID, "patch": "+" * MAX_BODY}), 413, "body_too_large"),
    ("unknown task in query", "GET", "/tasks?instance_id=no-such-task", None, 404, "unknown_instance"),
    ("unknown path", "GET", "/rewards", None, 404, "not_found"),
    ("GET on a POST path", "GET", "/score", None, 405, "method_not_allowed"),
    ("DELETE on a GET path", "DELETE", "/tasks", None, 405, "method_not_allowed"),
    ("POST on a GET path", "POST", "/health", _json({}), 405, "method_not_allowed"),
]


@pytest.mark.parametrize(("method", "path", "body", "status", "reason"), [case[1:] for case in BAD_REQUESTS],
                         ids=[case[0] for case in BAD_REQUESTS])
def test_a_bad_request_gets_a_json_error(served: tuple[RewardServer, Path], method: str, path: str,
                                         body: bytes | None, status: int, reason: str) -> None:
    server, _ = served
    got, answer, headers = _raw(server, method, path, body, AUTH)
    assert (got, answer["reason"]) == (status, reason), answer
    assert isinstance(answer["error"], str) and answer["error"]
    if status == 405:
        assert headers["Allow"] in ("GET, HEAD", "POST")
    assert server.health()["queue"]["depth"] == 0  # nothing was admitted


def test_a_post_without_a_length_gets_411(served: tuple[RewardServer, Path]) -> None:
    server, _ = served
    host, port = server.httpd.server_address[:2]
    conn = http.client.HTTPConnection(str(host), int(port), timeout=30)
    try:
        conn.putrequest("POST", "/score")
        conn.putheader("Authorization", AUTH["Authorization"])
        conn.endheaders()
        response = conn.getresponse()
        assert (response.status, json.loads(response.read())["reason"]) == (411, "length_required")
    finally:
        conn.close()


def test_every_path_but_health_needs_the_key(served: tuple[RewardServer, Path]) -> None:
    server, _ = served
    body = _json({"instance_id": ID, "patch": ""})
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"},
                    {"Authorization": KEY}):
        for method, path in (("GET", "/tasks"), ("POST", "/score"), ("POST", "/score_many"), ("GET", "/nowhere")):
            status, answer, got = _raw(server, method, path, body if method == "POST" else None, headers)
            assert (status, answer["reason"]) == (401, "unauthorized"), (headers, path)
            assert got["WWW-Authenticate"].startswith("Bearer")
    assert _raw(server, "GET", "/health")[0] == 200
    assert _raw(server, "GET", "/tasks", None, AUTH)[0] == 200
    with pytest.raises(RewardServerError) as refused:
        RewardClient(server.url, api_key="wrong").tasks()
    assert (refused.value.status, refused.value.reason) == (401, "unauthorized")


def _slow_patch(sample: Path, dest: Path) -> tuple[str, str]:
    """(instance_id, patch): a candidate whose test run sleeps 4 s when the package is imported.
    Plain package code, so no tamper rule drops it."""
    task = read_tasks(sample)[0]
    start = rebuild_start_state(task, dest)
    module = start.path / "src" / "iniconfig" / "_parse.py"
    module.write_text(module.read_text() + "\nimport time\n\ntime.sleep(4)\n")
    diff = subprocess.run(["git", "diff"], cwd=start.path, capture_output=True, text=True, check=True).stdout
    return task.instance_id, diff


def test_a_full_queue_answers_503_and_a_slow_answer_504(sample: Path, backend, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    instance_id, slow = _slow_patch(sample, tmp_path / "start")
    config = ServerConfig(port=0, max_queue=1, request_timeout_s=2.0)
    with RewardServer(read_tasks(sample), scorer=Scorer(backend=backend, timeout_s=120, concurrency=1),
                      config=config, log=None) as server:
        server.start()
        client = RewardClient(server.url, retries=0)
        with pytest.raises(RewardServerError) as late:
            client.score(instance_id, slow, candidate_id="slow")
        assert (late.value.status, late.value.reason) == (504, "timeout")
        # The slow scoring goes on after the 504 and holds the queue's one place.
        assert client.health()["queue"] == {"depth": 1, "limit": 1}
        with pytest.raises(RewardServerError) as full:
            client.score(instance_id, "", candidate_id="empty")
        assert (full.value.status, full.value.reason) == (503, "queue_full")
        assert full.value.retry_after_s is not None and full.value.retry_after_s >= 1

        # A client that retries gets in once the slow scoring is done; a patch that does not apply
        # is answered well within the request timeout.
        patient = RewardClient(server.url, retries=20, backoff_s=0.2, max_backoff_s=1.0)
        result = patient.score(instance_id, "not a diff", candidate_id="broken")
        assert (result.reward, result.status) == (0.0, "patch_failed")
        health = client.health()
        assert health["queue"]["depth"] == 0 and health["scored"] == 2


def test_serve_stops_on_sigterm_storing_rows_and_removing_its_containers(sample: Path, backend, session_cache: Path,  # type: ignore[no-untyped-def]
                                                                         tmp_path: Path) -> None:
    rewards = tmp_path / "rewards"
    proc = subprocess.Popen(
        [sys.executable, "-m", "taskforge.cli", "serve", "--tasks", str(sample), "--port", "0", "--concurrency", "1",
         "--api-key-env", "TEST_REWARD_KEY", "--rewards-out", str(rewards)],
        stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TASKFORGE_CACHE": str(session_cache), "TEST_REWARD_KEY": KEY},
    )
    try:
        assert proc.stderr is not None
        seen: list[str] = []
        url = None
        while url is None:  # the line that says where it listens
            line = proc.stderr.readline()
            assert line, f"serve exited: {''.join(seen)}"
            seen.append(line)
            found = re.search(r"http://127\.0\.0\.1:\d+", line)
            url = found.group(0) if found else None
        client = RewardClient(url, api_key=KEY)
        assert client.health()["status"] == "ok"
        task = read_tasks(sample)[2]
        assert client.score(task.instance_id, task.patch, candidate_id="gold").reward == 1.0
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, rest
    assert "stopped" in rest
    rows = read_rows(rewards)  # stored on the way out, though fewer than a shard's worth
    assert [(r["instance_id"], r["candidate_id"], r["reward"]) for r in rows] == [(task.instance_id, "gold", 1.0)]
    left = backend.client.containers.list(all=True, filters={"label": f"taskforge.owner.pid={proc.pid}"})
    assert left == []

"""A scripted OpenAI-compatible chat server on loopback: the LLM endpoint's stand-in for tests.

    with ScriptedChatServer(Script.load("tests/fixtures/llm/iniconfig.json")) as server:
        config = LLMConfig(base_url=server.base_url, model="scripted")
        ...                                   # real HTTP, real client, real agent loop
    server.requests                           # every request body received, in order

It answers ``POST /v1/chat/completions`` like a real server, from a script of conversations. The
conversation a request belongs to is the first one (in script order) whose ``match`` strings all
occur in the request's system and first user messages; a conversation marked ``once`` serves a
single conversation (the same first messages), so a run of ``once`` conversations with the same
``match`` is handed out in order of arrival. No match: the script's ``default``. The turn is the
number of assistant messages in the request, so answers depend on the request alone (retries of a
request get the same turn), and the server is deterministic.

Script (JSON)::

    {"conversations": [{"name": "...", "match": ["Remove `pkg:f`"], "once": false, "repeat_last": false,
                        "turns": [TURN, ...]}],
     "default": {"name": "...", "turns": [TURN, ...]}}

    TURN: {"tool_calls": [{"name": "view", "arguments": {...}}]}   arguments as an object, or
          {"tool_calls": [{"name": "edit", "arguments_raw": "{not json"}]}   as raw text
          {"content": "text"}                     a plain answer (with tool_calls: both)
          "usage": {"prompt_tokens": N, "completion_tokens": M}   else estimated: 4 bytes a token
          "sleep_s": 2.5                          wait before answering (every attempt)
          "status": 500, "body": "..."            answer this HTTP error (every attempt)
          "fail_first": [503, 429]                the first attempts at this turn get these errors
          "retry_after": 1                        Retry-After header on those errors
          "raw_body": "..."                       answer 200 with this body as it is

Past its last turn a conversation replays the last one if ``repeat_last``, else answers 500 with
``script exhausted`` (a test bug, visible as ``llm_server_error``).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

__all__ = ["Conversation", "Script", "ScriptedChatServer"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Conversation:
    name: str
    turns: tuple[Mapping[str, Any], ...]
    match: tuple[str, ...] = ()
    """Strings that must all occur in the system and first user messages; empty: matches any."""
    once: bool = False
    """Serve one conversation only."""
    repeat_last: bool = False
    """Past the last turn, replay it (a model that never finishes)."""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Conversation:
        turns = tuple(data["turns"])
        if not turns:
            raise ValueError(f"conversation {data.get('name')!r} has no turns")
        return cls(name=str(data.get("name", "")), turns=turns, match=tuple(data.get("match", ())),
                   once=bool(data.get("once", False)), repeat_last=bool(data.get("repeat_last", False)))


@dataclass(frozen=True, kw_only=True, slots=True)
class Script:
    conversations: tuple[Conversation, ...]
    default: Conversation | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Script:
        default = data.get("default")
        return cls(conversations=tuple(Conversation.from_json(c) for c in data.get("conversations", ())),
                   default=Conversation.from_json(default) if default is not None else None)

    @classmethod
    def load(cls, *paths: Path | str) -> Script:
        """Conversations of every file, in order; the first file's ``default``."""
        conversations: list[Conversation] = []
        default = None
        for path in paths:
            script = cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))
            conversations += script.conversations
            default = default or script.default
        return cls(conversations=tuple(conversations), default=default)


@dataclass(kw_only=True, slots=True)
class _State:
    script: Script
    lock: threading.Lock = field(default_factory=threading.Lock)
    taken: dict[int, str] = field(default_factory=dict)
    """Index of a ``once`` conversation -> the key of the conversation it serves."""
    attempts: Counter[tuple[str, int]] = field(default_factory=Counter)
    requests: list[dict[str, Any]] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)

    def pick(self, key: str, opening: str) -> Conversation | None:
        with self.lock:
            for i, conversation in enumerate(self.script.conversations):
                if not all(m in opening for m in conversation.match):
                    continue
                if conversation.once:
                    owner = self.taken.setdefault(i, key)
                    if owner != key:
                        continue
                return conversation
        return self.script.default


class ScriptedChatServer:
    """Serves a :class:`Script` on 127.0.0.1 (a free port) from a background thread."""

    def __init__(self, script: Script) -> None:
        self._state = _State(script=script)
        state = self._state

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet: tests read server.requests instead

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length))
                    messages = body["messages"]
                    if not body.get("model") or not isinstance(messages, list):
                        raise ValueError("model and messages are required")
                except (ValueError, KeyError, TypeError) as err:
                    self._send(400, {"error": {"message": f"bad request: {err}", "type": "invalid_request_error"}})
                    return
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                with state.lock:
                    state.requests.append(body)
                    state.authorizations.append(self.headers.get("Authorization"))
                self._answer(body, messages)

            def _answer(self, body: dict[str, Any], messages: list[dict[str, Any]]) -> None:
                opening = "\n".join(str(m.get("content") or "") for m in _opening(messages))
                key = hashlib.sha256(opening.encode()).hexdigest()
                conversation = state.pick(key, opening)
                if conversation is None:
                    self._send(500, {"error": {"message": "no scripted conversation matches"}})
                    return
                index = sum(1 for m in messages if m.get("role") == "assistant")
                if index >= len(conversation.turns) and not conversation.repeat_last:
                    self._send(500, {"error": {"message": f"script exhausted: {conversation.name} has "
                                                          f"{len(conversation.turns)} turns"}})
                    return
                turn = conversation.turns[min(index, len(conversation.turns) - 1)]
                with state.lock:
                    state.attempts[(key, index)] += 1
                    attempt = state.attempts[(key, index)]
                time.sleep(float(turn.get("sleep_s", 0)))
                fail_first = list(turn.get("fail_first", ()))
                headers = {"Retry-After": str(turn["retry_after"])} if "retry_after" in turn else {}
                if attempt <= len(fail_first):
                    self._send(int(fail_first[attempt - 1]), {"error": {"message": "scripted failure"}}, headers)
                elif "status" in turn:
                    self._send(int(turn["status"]), {"error": {"message": turn.get("body", "scripted error")}}, headers)
                elif "raw_body" in turn:
                    self._send_raw(200, str(turn["raw_body"]).encode())
                else:
                    self._send(200, _completion(body, conversation.name, index, turn))

            def _send(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
                self._send_raw(status, json.dumps(payload).encode(), headers)

            def _send_raw(self, status: int, data: bytes, headers: Mapping[str, str] | None = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout): nothing left to answer

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="scripted-llm", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every well-formed request body received, in order."""
        with self._state.lock:
            return list(self._state.requests)

    @property
    def authorizations(self) -> list[str | None]:
        """The ``Authorization`` header of each request in :attr:`requests` (None without one)."""
        with self._state.lock:
            return list(self._state.authorizations)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def _opening(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The system messages and the first user message."""
    opening = []
    for message in messages:
        if message.get("role") == "system":
            opening.append(message)
        elif message.get("role") == "user":
            opening.append(message)
            break
    return opening


def _completion(request: Mapping[str, Any], name: str, index: int, turn: Mapping[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.get("content")}
    calls = []
    for i, call in enumerate(turn.get("tool_calls", ())):
        arguments = call["arguments_raw"] if "arguments_raw" in call else json.dumps(call.get("arguments", {}))
        calls.append({"id": f"call_{index}_{i}", "type": "function",
                      "function": {"name": call["name"], "arguments": arguments}})
    if calls:
        message["tool_calls"] = calls
    usage = turn.get("usage") or {
        "prompt_tokens": len(json.dumps(request["messages"])) // 4,
        "completion_tokens": max(1, len(json.dumps(message)) // 4),
    }
    usage = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
    return {"id": f"chatcmpl-{name}-{index}", "object": "chat.completion", "created": 0, "model": request["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": usage}

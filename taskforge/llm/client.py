"""The one door to an LLM endpoint: a small OpenAI-compatible chat client (stdlib only).

    client = ChatClient(LLMConfig(base_url="http://gpu-node:8000/v1", model="Qwen/Qwen3-32B"))
    reply = client.chat([{"role": "user", "content": "..."}], tools=[...])
    reply.content, reply.tool_calls, client.usage.cost_usd

Protocol: ``POST {base_url}/chat/completions`` with JSON (``model``, ``messages``, ``temperature``,
``max_tokens``, and ``tools`` in the standard function-calling form when given); the answer's
``choices[0].message`` (``content``, ``tool_calls``) and ``usage`` are read. vLLM, SGLang, llama.cpp's
server, LiteLLM and OpenAI itself speak it. The API key comes from the environment variable
``LLMConfig.api_key_env`` when the client is built, and goes only into the ``Authorization``
header: never into recipes, trajectories or messages.

Failures (``LLMError``, with a ``reason``):

- a 429 or 5xx answer, a refused or broken connection, and a timeout are tried again, up to
  ``max_retries`` more times, after a backoff that doubles from ``backoff_s`` (with jitter, at most
  60 s, never shorter than a ``Retry-After`` within that cap); then ``llm_server_error`` or
  ``llm_timeout``. ``timeout_s`` bounds each socket operation (connect, each read), as urllib does;
- any other 4xx: ``llm_request_rejected`` at once (a bad model name, a prompt over the context);
- an answer that is not a chat completion: ``llm_malformed_output`` at once;
- ``llm_budget_exhausted`` before a request once the client's usage has reached ``max_tokens``
  or ``max_cost_usd``. One client serves one conversation, so the budget is per conversation.

Usage is the server's own ``usage`` counts; cost is those counts times the configured prices.
:class:`taskforge.llm.scripted.ScriptedChatServer` speaks the same protocol for tests.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import re
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taskforge.errors import LLMError

__all__ = ["ChatClient", "ChatReply", "LLMConfig", "ToolCall", "Usage", "write_trajectory"]

_MAX_BACKOFF_S = 60.0


@dataclass(kw_only=True, slots=True)
class LLMConfig:
    """An OpenAI-compatible endpoint, and the limits of one conversation with it (recipe: ``[llm]``)."""

    base_url: str = "http://127.0.0.1:8000/v1"
    """The API root; requests go to ``{base_url}/chat/completions``."""
    model: str = ""
    """The model name the server expects (vLLM: the name given to ``vllm serve``)."""
    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable holding the API key; unset or empty: no ``Authorization`` header."""
    timeout_s: float = 300.0
    """Longest wait of one socket operation of a request (connect, each read)."""
    max_retries: int = 3
    """Extra attempts of a request after a 429, a 5xx, a connection error or a timeout."""
    backoff_s: float = 1.0
    """First backoff before a retry; it doubles with each retry."""
    max_turns: int = 40
    """Model replies the removal agent may use on one removal."""
    max_tokens: int = 400_000
    """Prompt plus completion tokens one conversation may use (the server's counts); 0: no limit."""
    max_cost_usd: float = 0.0
    """Dollars one conversation may spend (from the prices below); 0: no limit."""
    max_response_tokens: int = 4096
    """The request's ``max_tokens``: the longest single reply."""
    input_cost_per_1m: float = 0.0
    """Dollars per million prompt tokens."""
    output_cost_per_1m: float = 0.0
    """Dollars per million completion tokens."""
    temperature: float = 0.0
    """Sampling temperature."""
    trajectories_dir: str = ""
    """A folder where every conversation is also written as JSON, failed ones too; empty: none."""

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"llm.base_url must be an http:// or https:// URL, got {self.base_url!r}")
        if not self.api_key_env:
            raise ValueError("llm.api_key_env must name an environment variable")
        for name in ("timeout_s", "backoff_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"llm.{name} must be positive, got {getattr(self, name)}")
        for name in ("max_turns", "max_response_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"llm.{name} must be at least 1, got {getattr(self, name)}")
        for name in ("max_retries", "max_tokens", "max_cost_usd", "input_cost_per_1m", "output_cost_per_1m",
                     "temperature"):
            if getattr(self, name) < 0:
                raise ValueError(f"llm.{name} must be at least 0, got {getattr(self, name)}")

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"


@dataclass(kw_only=True, slots=True)
class Usage:
    """What a client has used so far."""

    requests: int = 0
    """Requests answered (retries of one request count once)."""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "cost_usd": round(self.cost_usd, 6)}


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall:
    """One function call the model asked for; ``arguments`` is its JSON text, unparsed."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatReply:
    """The first choice of one chat completion."""

    content: str
    """The text ("" when the model only called tools)."""
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    message: dict[str, Any] = field(repr=False)
    """The assistant message to append to the conversation."""


class ChatClient:
    """One conversation's client: requests with retries, usage and budget (see the module docstring)."""

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self.usage = Usage()
        self._api_key = os.environ.get(config.api_key_env) or None

    def chat(self, messages: Sequence[Mapping[str, Any]], *, tools: Sequence[Mapping[str, Any]] = ()) -> ChatReply:
        """One completion of ``messages``; with ``tools``, the model may answer with tool calls."""
        self._check_budget()
        config = self.config
        body: dict[str, Any] = {"model": config.model, "messages": list(messages), "temperature": config.temperature,
                                "max_tokens": config.max_response_tokens}
        if tools:
            body["tools"] = list(tools)
            body["tool_choice"] = "auto"
        reply = _parse_completion(self._post(json.dumps(body).encode()))
        self.usage.requests += 1
        self.usage.prompt_tokens += reply.prompt_tokens
        self.usage.completion_tokens += reply.completion_tokens
        self.usage.cost_usd += (reply.prompt_tokens * config.input_cost_per_1m
                                + reply.completion_tokens * config.output_cost_per_1m) / 1e6
        return reply

    def _check_budget(self) -> None:
        config, usage = self.config, self.usage
        if config.max_tokens and usage.total_tokens >= config.max_tokens:
            raise LLMError(f"the conversation used {usage.total_tokens} tokens; llm.max_tokens is {config.max_tokens}",
                           reason="llm_budget_exhausted")
        if config.max_cost_usd and usage.cost_usd >= config.max_cost_usd:
            raise LLMError(f"the conversation cost ${usage.cost_usd:.4f}; llm.max_cost_usd is {config.max_cost_usd:g}",
                           reason="llm_budget_exhausted")

    def _post(self, data: bytes) -> Any:
        config = self.config
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        attempts = config.max_retries + 1
        for attempt in range(attempts):
            retry_after = 0.0
            try:
                request = urllib.request.Request(config.url, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(request, timeout=config.timeout_s) as response:
                    raw = response.read()
            except urllib.error.HTTPError as err:
                message = _error_message(err)
                if err.code != 429 and err.code < 500:
                    raise LLMError(f"{config.url} refused the request: HTTP {err.code}: {message}",
                                   reason="llm_request_rejected") from err
                failure = LLMError(f"{config.url} answered HTTP {err.code}: {message}", reason="llm_server_error")
                retry_after = _seconds(err.headers.get("Retry-After") if err.headers else None)
            except (TimeoutError, urllib.error.URLError, http.client.HTTPException, ConnectionError) as err:
                why = err.reason if isinstance(err, urllib.error.URLError) else err
                if isinstance(why, TimeoutError):
                    failure = LLMError(f"no answer from {config.url} within {config.timeout_s:g} s",
                                       reason="llm_timeout")
                else:
                    failure = LLMError(f"cannot reach {config.url}: {why}", reason="llm_server_error")
            else:
                try:
                    return json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError) as err:
                    raise LLMError(f"{config.url} answered something that is not JSON: {err}",
                                   reason="llm_malformed_output") from err
            if attempt + 1 < attempts:
                delay = min(_MAX_BACKOFF_S, config.backoff_s * 2**attempt) * random.uniform(0.5, 1.0)
                time.sleep(max(delay, min(retry_after, _MAX_BACKOFF_S)))
        raise LLMError(f"{failure} (after {attempts} attempts)", reason=failure.reason)


def _parse_completion(answer: Any) -> ChatReply:
    """The first choice of a chat completion, or ``llm_malformed_output``."""
    try:
        choice = answer["choices"][0]
        message = choice["message"]
        content = message.get("content") or ""
        calls: list[ToolCall] = []
        for call in message.get("tool_calls") or ():
            function = call["function"]
            arguments = function.get("arguments", "")
            if not isinstance(arguments, str):  # a few servers send the object itself
                arguments = json.dumps(arguments)
            calls.append(ToolCall(id=str(call.get("id") or f"call_{len(calls)}"), name=str(function["name"]),
                                  arguments=arguments))
        usage = answer.get("usage") or {}
        prompt_tokens = int(usage.get("prompt_tokens") or 0)
        completion_tokens = int(usage.get("completion_tokens") or 0)
        if not isinstance(content, str):
            raise TypeError(f"content is a {type(content).__name__}")
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as err:
        raise LLMError(f"the answer is not a chat completion ({type(err).__name__}: {err}): {str(answer)[:200]}",
                       reason="llm_malformed_output") from err
    assistant: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        assistant["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                   for c in calls]
    return ChatReply(content=content, tool_calls=tuple(calls), finish_reason=str(choice.get("finish_reason") or ""),
                     prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, message=assistant)


def _error_message(err: urllib.error.HTTPError) -> str:
    """The server's error message (OpenAI's ``{"error": {"message": ...}}``, or the body's start)."""
    try:
        text = err.read().decode("utf-8", "replace")
    except OSError:
        return str(err.reason)
    finally:
        err.close()
    try:
        error = json.loads(text).get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if message:
            return " ".join(str(message).split())[:300]
    except (ValueError, AttributeError):
        pass
    return " ".join(text.split())[:300] or str(err.reason)


def _seconds(value: str | None) -> float:
    try:
        return max(0.0, float(value)) if value else 0.0
    except ValueError:
        return 0.0


def write_trajectory(folder: Path, kind: str, target: str, record: Mapping[str, Any]) -> Path:
    """Write one conversation's record (``LLMConfig.trajectories_dir``) as ``{kind}-{target}-{ns}-{pid}.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^A-Za-z0-9]+", "-", target).strip("-")[-80:]
    path = folder / f"{kind}-{slug}-{time.time_ns()}-{os.getpid()}.json"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True), encoding="utf-8")
    tmp.replace(path)
    return path

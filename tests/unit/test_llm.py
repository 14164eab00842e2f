"""The OpenAI-compatible client against the scripted server on loopback: the protocol, retries,
timeouts, malformed answers, usage, cost and budgets."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest

from taskforge.errors import LLMError, TaskforgeError
from taskforge.llm.client import ChatClient, LLMConfig
from taskforge.llm.scripted import Script, ScriptedChatServer

TOOLS = [{"type": "function", "function": {"name": "view", "description": "Show a file.",
                                           "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}]
HELLO = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]


def _server(*turns: dict[str, Any], **conversation: Any) -> ScriptedChatServer:
    return ScriptedChatServer(Script.from_json({"conversations": [{"name": "t", "turns": list(turns), **conversation}]}))


def _config(server: ScriptedChatServer, **overrides: Any) -> LLMConfig:
    values: dict[str, Any] = {"base_url": server.base_url, "model": "scripted", "backoff_s": 0.01, "timeout_s": 5.0,
                              **overrides}
    return LLMConfig(**values)


def test_a_tool_call_round_trip_with_usage_and_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_LLM_KEY", "sk-secret-1")
    turn = {"content": "Looking.", "tool_calls": [{"name": "view", "arguments": {"path": "a.py"}}],
            "usage": {"prompt_tokens": 1000, "completion_tokens": 200}}
    with _server(turn, {"content": "done", "usage": {"prompt_tokens": 1500, "completion_tokens": 10}}) as server:
        client = ChatClient(_config(server, api_key_env="TEST_LLM_KEY", input_cost_per_1m=3.0, output_cost_per_1m=15.0,
                                    temperature=0.2, max_response_tokens=512))
        reply = client.chat(HELLO, tools=TOOLS)
        assert reply.content == "Looking." and reply.finish_reason == "tool_calls"
        assert [(c.name, json.loads(c.arguments)) for c in reply.tool_calls] == [("view", {"path": "a.py"})]
        assert reply.message["tool_calls"][0]["function"]["name"] == "view"
        messages = [*HELLO, reply.message, {"role": "tool", "tool_call_id": reply.tool_calls[0].id, "content": "x = 1"}]
        second = client.chat(messages)
        assert second.content == "done" and second.tool_calls == ()
        sent = server.requests
    assert sent[0]["model"] == "scripted" and sent[0]["tools"] == TOOLS and sent[0]["tool_choice"] == "auto"
    assert sent[0]["temperature"] == 0.2 and sent[0]["max_tokens"] == 512 and "tools" not in sent[1]
    assert server.authorizations == ["Bearer sk-secret-1"] * 2
    assert "sk-secret-1" not in json.dumps(sent)
    assert client.usage.to_json() == {"requests": 2, "prompt_tokens": 2500, "completion_tokens": 210,
                                      "cost_usd": pytest.approx((2500 * 3.0 + 210 * 15.0) / 1e6)}


def test_no_key_no_authorization_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEST_LLM_KEY", raising=False)
    with _server({"content": "hi"}) as server:
        ChatClient(_config(server, api_key_env="TEST_LLM_KEY")).chat(HELLO)
    assert server.authorizations == [None]


def test_429_and_503_are_retried_with_backoff() -> None:
    with _server({"content": "finally", "fail_first": [429, 503], "retry_after": 0}) as server:
        client = ChatClient(_config(server, max_retries=2))
        assert client.chat(HELLO).content == "finally"
    assert len(server.requests) == 3 and client.usage.requests == 1


def test_repeated_server_errors_end_with_llm_server_error() -> None:
    with (_server({"status": 500, "body": "CUDA out of memory"}) as server,
          pytest.raises(LLMError, match=r"HTTP 500: CUDA out of memory \(after 3 attempts\)") as caught):
        ChatClient(_config(server, max_retries=2)).chat(HELLO)
    assert caught.value.reason == "llm_server_error" and isinstance(caught.value, TaskforgeError)
    assert len(server.requests) == 3


def test_a_bad_request_is_not_retried() -> None:
    with (_server({"status": 400, "body": "This model's maximum context length is 8192 tokens"}) as server,
          pytest.raises(LLMError, match="maximum context length") as caught):
        ChatClient(_config(server, max_retries=3)).chat(HELLO)
    assert caught.value.reason == "llm_request_rejected" and len(server.requests) == 1


def test_a_slow_server_ends_with_llm_timeout() -> None:
    with _server({"sleep_s": 1.0, "content": "late"}) as server:
        started = time.monotonic()
        with pytest.raises(LLMError, match="within 0.2 s") as caught:
            ChatClient(_config(server, timeout_s=0.2, max_retries=1)).chat(HELLO)
        assert time.monotonic() - started < 1.5  # two attempts of 0.2 s and a short backoff
    assert caught.value.reason == "llm_timeout" and len(server.requests) == 2


def test_an_unreachable_server_is_a_server_error() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = LLMConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m", max_retries=1, backoff_s=0.01)
    with pytest.raises(LLMError, match="cannot reach") as caught:
        ChatClient(config).chat(HELLO)
    assert caught.value.reason == "llm_server_error"


@pytest.mark.parametrize("raw", ["<html>502 Bad Gateway</html>", '{"choices": []}', '{"object": "error"}',
                                 '{"choices": [{"message": {"content": 3}}]}'])
def test_an_answer_that_is_no_completion_is_malformed(raw: str) -> None:
    with _server({"raw_body": raw}) as server, pytest.raises(LLMError) as caught:
        ChatClient(_config(server)).chat(HELLO)
    assert caught.value.reason == "llm_malformed_output"


def test_token_and_cost_budgets() -> None:
    turn = {"content": "ok", "usage": {"prompt_tokens": 600, "completion_tokens": 100}}
    with _server(turn, repeat_last=True) as server:
        client = ChatClient(_config(server, max_tokens=1000))
        client.chat(HELLO)
        client.chat(HELLO)  # 700 before it: allowed; 1400 after it
        with pytest.raises(LLMError, match="used 1400 tokens; llm.max_tokens is 1000") as caught:
            client.chat(HELLO)
        assert caught.value.reason == "llm_budget_exhausted"
        client = ChatClient(_config(server, max_tokens=0, max_cost_usd=0.001, input_cost_per_1m=1.0))
        client.chat(HELLO)  # $0.0006
        client.chat(HELLO)  # $0.0012
        with pytest.raises(LLMError, match=r"cost \$0.0012; llm.max_cost_usd is 0.001") as caught:
            client.chat(HELLO)
        assert caught.value.reason == "llm_budget_exhausted"
    assert len(server.requests) == 4


def test_the_scripted_server_picks_conversations_by_match_and_arrival() -> None:
    script = Script.from_json({
        "conversations": [
            {"name": "a", "match": ["about A"], "turns": [{"content": "A1"}, {"content": "A2"}]},
            {"name": "q1", "match": ["queue"], "once": True, "turns": [{"content": "first"}]},
            {"name": "q2", "match": ["queue"], "once": True, "turns": [{"content": "second"}]},
        ],
        "default": {"name": "d", "turns": [{"content": "default"}]},
    })
    with ScriptedChatServer(script) as server:
        client = ChatClient(_config(server))

        def ask(text: str, *history: str) -> str:
            messages: list[dict[str, Any]] = [{"role": "user", "content": text}]
            messages += [{"role": "assistant", "content": h} for h in history]
            return client.chat(messages).content

        assert ask("about A") == "A1" and ask("about A", "A1") == "A2"
        assert ask("queue 1") == "first" and ask("queue 2") == "second" and ask("queue 1") == "first"
        assert ask("queue 3") == "default" and ask("anything") == "default"
        with pytest.raises(LLMError, match="script exhausted"):
            ChatClient(_config(server, max_retries=0)).chat([{"role": "user", "content": "about A"},
                                                             *[{"role": "assistant", "content": "x"}] * 2])


@pytest.mark.parametrize("overrides,field", [
    ({"base_url": "localhost:8000"}, "llm.base_url"),
    ({"timeout_s": 0}, "llm.timeout_s"),
    ({"max_turns": 0}, "llm.max_turns"),
    ({"max_retries": -1}, "llm.max_retries"),
    ({"max_cost_usd": -1.0}, "llm.max_cost_usd"),
    ({"api_key_env": ""}, "llm.api_key_env"),
])
def test_config_errors_name_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        LLMConfig(**overrides)

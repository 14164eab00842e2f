"""The LLM statement writer against the scripted server, and the leak check its statements must pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from taskforge.errors import TaskforgeError
from taskforge.llm.client import LLMConfig
from taskforge.llm.scripted import Script, ScriptedChatServer
from taskforge.mining.statements.llm import LLMStatementWriter
from taskforge.mining.statements.template import (
    RemovedSymbol,
    StatementContext,
    TemplateStatementWriter,
    leaked_lines,
    load_writer,
)

REMOVED = '''    pairs = [(key, value) for key, value in items if key not in seen]
    return {key: convert(value) for key, value in pairs}
'''
CONTEXT = StatementContext(
    repo="demo", strategy="body", target="demo.conf:collect", module_path="demo/conf.py",
    symbols=(RemovedSymbol(qualname="demo.conf:collect", kind="function", signature="def collect(items, seen, convert=str)",
                           docstring="Collect the unseen items into a dict."),),
    hidden_tests=("tests/test_conf.py::test_collect_skips_seen",), removed_code={"demo.conf:collect": REMOVED},
)
CLEAN = "`collect(items, seen, convert=str)` returns a dict of the `(key, value)` pairs whose key is not in `seen`.\n"
QUOTED = "Implement it as:\n\n```python\npairs=[(key,value) for key,value in items if key not in seen]\n```\n"


def write(*answers: dict[str, Any], tmp_path: Path | None = None) -> tuple[str | TaskforgeError, ScriptedChatServer]:
    script = Script.from_json({"conversations": [{"name": "s", "turns": list(answers)}]})
    with ScriptedChatServer(script) as server:
        extra: dict[str, Any] = {"trajectories_dir": str(tmp_path)} if tmp_path else {}
        writer = LLMStatementWriter(llm=LLMConfig(base_url=server.base_url, model="scripted", **extra))
        try:
            return writer.write(CONTEXT), server
        except TaskforgeError as err:
            return err, server


def test_the_model_sees_the_interface_tests_and_code_and_its_answer_is_the_statement(tmp_path: Path) -> None:
    statement, server = write({"content": "<think>short</think>\n" + CLEAN}, tmp_path=tmp_path)
    assert statement == CLEAN
    (request,) = server.requests
    prompt = request["messages"][1]["content"]
    assert prompt.startswith("Write the problem statement for `demo.conf.collect` (strategy: body) in `demo/conf.py`")
    assert "def collect(items, seen, convert=str)" in prompt and "test_collect_skips_seen" in prompt
    assert REMOVED.rstrip() in prompt and "never quote it" in prompt and "tools" not in request
    (saved,) = tmp_path.glob("statement-demo-conf-collect-*.json")
    assert json.loads(saved.read_text())["outcome"] == "written"


def test_a_statement_quoting_removed_code_is_sent_back_once() -> None:
    statement, server = write({"content": QUOTED}, {"content": CLEAN})
    assert statement == CLEAN
    feedback = server.requests[1]["messages"][-1]["content"]
    assert "quotes these lines of the removed implementation" in feedback
    assert "pairs = [(key, value) for key, value in items if key not in seen]" in feedback


def test_quoting_twice_fails_with_a_clear_reason() -> None:
    error, server = write({"content": QUOTED}, {"content": "Write:\n    return {key: convert(value) for key, value in pairs}\n"})
    assert isinstance(error, TaskforgeError) and error.reason == "statement_leaks_code"
    assert "still quoted the removed code after feedback" in str(error) and len(server.requests) == 2


def test_empty_answers_are_malformed() -> None:
    error, _ = write({"content": ""}, {"content": "<think>hmm</think>"})
    assert isinstance(error, TaskforgeError) and error.reason == "llm_malformed_output"


def test_endpoint_failures_keep_their_reason() -> None:
    script = Script.from_json({"conversations": [{"name": "s", "turns": [{"status": 503}]}]})
    with ScriptedChatServer(script) as server:
        writer = LLMStatementWriter(llm=LLMConfig(base_url=server.base_url, model="m", max_retries=0))
        with pytest.raises(TaskforgeError) as caught:
            writer.write(CONTEXT)
    assert caught.value.reason == "llm_server_error"


@pytest.mark.parametrize("statement", [
    "Implement: pairs = [(key, value) for key, value in items if key not in seen]",            # as written
    "```python\npairs=[(key,value) for key,value in items if key not in seen]\n```",            # reformatted code
    "Use `return {key:convert(value) for key,value in pairs}` at the end.",                     # inline code
])
def test_statements_quoting_removed_code_are_rejected(statement: str) -> None:
    assert leaked_lines(statement, CONTEXT.removed_code)


def test_behaviour_and_short_signature_defaults_are_not_leaks() -> None:
    removed = {"m:decode": "    if encoding is None:\n        encoding = 'utf-8'\n    return data.decode(encoding)\n"}
    statement = "```python\ndef decode(data, encoding='utf-8')\n```\nDecodes `data` with `encoding` (UTF-8 if None).\n"
    assert leaked_lines(statement, removed) == []
    assert leaked_lines(CLEAN, CONTEXT.removed_code) == []
    assert leaked_lines(TemplateStatementWriter().write(CONTEXT), CONTEXT.removed_code) == []


def test_the_registry_builds_it() -> None:
    writer = load_writer("llm", llm=LLMConfig(model="m"))
    assert isinstance(writer, LLMStatementWriter) and writer.name == "llm"

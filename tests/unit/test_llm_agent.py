"""The LLM removal agent's tool loop on small packages, against the scripted server on loopback: the
removals it returns (the same as the libcst agent's for the same edit), the tools' answers, the
refused finishes, and every way a conversation ends."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from taskforge.errors import TaskforgeError
from taskforge.llm.client import LLMConfig
from taskforge.llm.scripted import Script, ScriptedChatServer
from taskforge.mining.removal.cst import LibcstRemovalAgent, load_agent
from taskforge.mining.removal.llm_agent import LLMRemovalAgent
from taskforge.repo.symbols import SymbolIndex, build_index

TEXT = '''"""Text helpers."""

__all__ = ["shout", "slugify"]


def _words(text):
    return [w for w in text.lower().split() if w]


def slugify(text, sep="-"):
    """Join the words of ``text`` with ``sep``."""
    def clean(word):
        return word.strip(".,")
    return sep.join(clean(w) for w in _words(text))


def shout(text):
    return text.upper() + "!"
'''
EXTRA = '''def double(x):
    return x * 2
'''
INIT = '''from .extra import double
from .text import shout, slugify

__all__ = ["double", "shout", "slugify"]
'''
TEST = '''from pkg import slugify


def test_slugify():
    assert slugify("A b") == "a-b"
'''
SLUGIFY_BODY = '''    def clean(word):
        return word.strip(".,")
    return sep.join(clean(w) for w in _words(text))
'''


@pytest.fixture
def package(tmp_path: Path) -> tuple[Path, SymbolIndex]:
    files = {"pkg/__init__.py": INIT, "pkg/text.py": TEXT, "pkg/extra.py": EXTRA, "tests/test_text.py": TEST}
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path, build_index(tmp_path, package_paths=["pkg"])


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def remove(package: tuple[Path, SymbolIndex], target: str, strategy: str, turns: list[dict[str, Any]],
           **config: Any) -> tuple[Any, ScriptedChatServer]:
    """Run the agent on ``package`` with one scripted conversation; (the Removal or the error, the server)."""
    repo, index = package
    script = Script.from_json({"conversations": [{"name": "t", "turns": turns, **config.pop("conversation", {})}]})
    with ScriptedChatServer(script) as server:
        agent = LLMRemovalAgent(llm=LLMConfig(base_url=server.base_url, model="scripted", backoff_s=0.01, **config))
        try:
            return agent.remove(repo, index, target=target, strategy=strategy), server  # type: ignore[arg-type]
        except TaskforgeError as err:
            return err, server


def tool_answers(server: ScriptedChatServer) -> list[str]:
    """The tool results the model saw, from the last request."""
    return [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "tool"]


def tree_digest(repo: Path) -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(repo.rglob("*.py")))).hexdigest()


def test_a_hollowed_body_is_the_libcst_agents_removal(package: tuple[Path, SymbolIndex]) -> None:
    before = tree_digest(package[0])
    removal, server = remove(package, "pkg.text:slugify", "body", [
        call("view", path="pkg/text.py", start_line=10, end_line=14),
        call("edit", path="pkg/text.py", old_str=SLUGIFY_BODY, new_str="    raise NotImplementedError\n"),
        call("finish", summary="hollowed"),
    ], input_cost_per_1m=2.0)
    reference = LibcstRemovalAgent().remove(package[0], package[1], target="pkg.text:slugify", strategy="body")
    assert removal.files == reference.files
    assert removal.removed == reference.removed == ("pkg.text:slugify",)
    assert removal.removed_code == reference.removed_code == {"pkg.text:slugify": SLUGIFY_BODY}  # the nested def too
    assert tree_digest(package[0]) == before  # pure: the repository is only read
    trajectory = removal.trajectory
    assert trajectory["outcome"] == "finished" and trajectory["turns"] == 3 and trajectory["model"] == "scripted"
    assert trajectory["usage"]["requests"] == 3 and trajectory["usage"]["cost_usd"] > 0
    roles = [m["role"] for m in trajectory["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant"]
    prompt = server.requests[0]["messages"][1]["content"]
    assert prompt.startswith("Remove `pkg.text:slugify` (strategy: body).") and "`pkg/text.py`, lines 10-14" in prompt
    assert "    10\tdef slugify(text, sep=\"-\"):" in tool_answers(server)[0]
    tools = [t["function"]["name"] for t in server.requests[0]["tools"]]
    assert tools == ["view", "grep", "edit", "finish", "give_up"]  # no runner: no run_tests; body: no delete_file


def test_a_deleted_symbol_takes_its_helper_and_its_all_entry(package: tuple[Path, SymbolIndex]) -> None:
    definition = TEXT[TEXT.index("\n\ndef _words"):TEXT.index("\n\ndef shout")]
    removal, server = remove(package, "pkg.text:slugify", "symbol", [
        call("grep", pattern=r"slugify|_words", path="pkg"),
        call("edit", path="pkg/text.py", old_str=definition, new_str=""),
        call("edit", path="pkg/text.py", old_str='__all__ = ["shout", "slugify"]', new_str='__all__ = ["shout"]'),
        call("edit", path="pkg/__init__.py", old_str="from .text import shout, slugify\n",
             new_str="from .text import shout\n"),
        call("edit", path="pkg/__init__.py", old_str='"shout", "slugify"]', new_str='"shout"]'),
        call("finish", summary="deleted"),
    ])
    reference = LibcstRemovalAgent().remove(package[0], package[1], target="pkg.text:slugify", strategy="symbol")
    assert removal.files == reference.files
    assert removal.removed == reference.removed == ("pkg.text:slugify", "pkg.text:_words")
    assert removal.removed_code == reference.removed_code
    assert "pkg/__init__.py:2:from .text import shout, slugify" in tool_answers(server)[0]
    prompt = server.requests[0]["messages"][1]["content"]
    assert "Private helpers that only it uses: `_words` (lines 6-7)." in prompt


def test_a_deleted_module(package: tuple[Path, SymbolIndex]) -> None:
    removal, server = remove(package, "pkg.extra", "module", [
        call("delete_file", path="pkg/extra.py"),
        call("edit", path="pkg/__init__.py", old_str="from .extra import double\n", new_str=""),
        call("edit", path="pkg/__init__.py", old_str='"double", ', new_str=""),
        call("finish", summary="deleted"),
    ])
    reference = LibcstRemovalAgent().remove(package[0], package[1], target="pkg.extra", strategy="module")
    assert removal.files == reference.files and removal.files["pkg/extra.py"] is None
    assert removal.removed == reference.removed == ("pkg.extra", "pkg.extra:double")
    assert removal.removed_code == {"pkg.extra": EXTRA}
    assert "delete_file" in [t["function"]["name"] for t in server.requests[0]["tools"]]


def test_finish_is_refused_until_the_edit_is_what_the_strategy_asks(package: tuple[Path, SymbolIndex]) -> None:
    removal, server = remove(package, "pkg.text:slugify", "body", [
        call("finish", summary="nothing yet"),
        call("edit", path="pkg/text.py", old_str=SLUGIFY_BODY, new_str="    return None\n"),
        call("finish", summary="almost"),
        call("edit", path="pkg/text.py", old_str='def slugify(text, sep="-"):\n    """Join the words',
             new_str='def slugify(text, sep="_"):\n    """Join words'),
        call("edit", path="pkg/text.py", old_str="    return None\n", new_str="    raise NotImplementedError(\n"),
        call("finish", summary="broken"),
        call("edit", path="pkg/text.py", old_str='def slugify(text, sep="_"):\n    """Join words',
             new_str='def slugify(text, sep="-"):\n    """Join the words'),
        call("edit", path="pkg/text.py", old_str="NotImplementedError(\n", new_str="NotImplementedError\n"),
        call("finish", summary="done"),
    ])
    answers = tool_answers(server)
    assert answers[0] == "cannot finish yet:\n- nothing was changed"
    assert "must be just `raise NotImplementedError`" in answers[2]
    assert "pkg/text.py does not parse" in answers[5]
    assert removal.files["pkg/text.py"] == TEXT.replace(SLUGIFY_BODY, "    raise NotImplementedError\n")


def test_signature_and_docstring_changes_are_refused(package: tuple[Path, SymbolIndex]) -> None:
    error, server = remove(package, "pkg.text:slugify", "body", [
        call("edit", path="pkg/text.py", old_str=SLUGIFY_BODY, new_str="    raise NotImplementedError\n"),
        call("edit", path="pkg/text.py", old_str='def slugify(text, sep="-"):\n    """Join the words',
             new_str='def slugify(text, sep="_"):\n    """Join words'),
        call("finish", summary="done"),
    ], max_turns=4, conversation={"repeat_last": True})
    assert isinstance(error, TaskforgeError) and error.reason == "llm_budget_exhausted"
    last = tool_answers(server)[-1]
    assert "the decorators or signature of slugify changed" in last and "the docstring of slugify changed" in last


def test_tools_refuse_tests_paths_outside_and_bad_patterns(package: tuple[Path, SymbolIndex]) -> None:
    error, server = remove(package, "pkg.text:slugify", "body", [
        call("edit", path="tests/test_text.py", old_str="a-b", new_str="a_b"),
        call("view", path="../outside.py"),
        call("grep", pattern="(unclosed"),
        call("edit", path="pkg/text.py", old_str="return", new_str="yield"),
        call("view", path="pkg"),
        call("view", path="pkg/text.py", start_line=99),
        call("give_up", reason="slugify is used everywhere"),
    ])
    answers = tool_answers(server)
    assert answers[0] == "error: tests/test_text.py is a test file: tests are not yours to change"
    assert answers[1].startswith("error: ../outside.py: give a path inside the repository")
    assert answers[2].startswith("error: not a valid regular expression")
    assert answers[3].startswith("error: old_str occurs 4 times in pkg/text.py")
    assert answers[4] == "pkg/__init__.py\npkg/extra.py\npkg/text.py"
    assert answers[5] == "error: pkg/text.py has 18 lines"
    assert isinstance(error, TaskforgeError) and error.reason == "removal_not_applicable"
    assert "slugify is used everywhere" in str(error)


def test_malformed_replies_three_in_a_row_end_the_removal(package: tuple[Path, SymbolIndex]) -> None:
    bad_json = {"tool_calls": [{"name": "view", "arguments_raw": '{"path": '}]}
    error, server = remove(package, "pkg.text:slugify", "body", [
        {"content": "Let me think about it."},               # no tool call: strike 1
        bad_json,                                            # strike 2
        call("view", path="pkg/text.py"),                    # valid: the count starts again
        call("delete_file", path="pkg/text.py"),             # not offered for body: strike 1
        call("view", wrong="pkg/text.py"),                   # strike 2
        bad_json,                                            # strike 3
    ])
    assert isinstance(error, TaskforgeError) and error.reason == "llm_malformed_output"
    assert "3 replies in a row without a valid tool call" in str(error) and "not valid JSON" in str(error)
    messages = server.requests[-1]["messages"]
    assert messages[3] == {"role": "user", "content": "Answer with tool calls. Call finish once the feature is "
                                                      "removed, or give_up."}
    answers = tool_answers(server)
    assert "there is no tool 'delete_file'" in answers[2] and "missing 'path'; unknown argument 'wrong'" in answers[3]


def test_budgets_end_the_removal(package: tuple[Path, SymbolIndex], tmp_path: Path) -> None:
    looping = [call("grep", pattern="def ")]
    error, server = remove(package, "pkg.text:slugify", "body", looping, max_turns=4,
                           conversation={"repeat_last": True}, trajectories_dir=str(tmp_path / "trajectories"))
    assert isinstance(error, TaskforgeError) and error.reason == "llm_budget_exhausted"
    assert "no finish within llm.max_turns = 4 replies" in str(error) and len(server.requests) == 4
    (saved,) = (tmp_path / "trajectories").glob("removal-pkg-text-slugify-*.json")
    record = json.loads(saved.read_text())
    assert record["outcome"] == "llm_budget_exhausted" and record["turns"] == 4 and record["usage"]["requests"] == 4
    expensive = [{**call("grep", pattern="def "), "usage": {"prompt_tokens": 3000, "completion_tokens": 50}}]
    error, server = remove(package, "pkg.text:slugify", "body", expensive, max_tokens=5000,
                           conversation={"repeat_last": True})
    assert isinstance(error, TaskforgeError) and error.reason == "llm_budget_exhausted"
    assert "llm.max_tokens is 5000" in str(error) and len(server.requests) == 2


def test_targets_the_index_cannot_place_are_refused_without_a_request(package: tuple[Path, SymbolIndex]) -> None:
    for target, strategy, message in [("pkg.text:nothing", "body", "not a symbol of the index"),
                                      ("pkg.nowhere", "module", "not a module of the index")]:
        error, server = remove(package, target, strategy, [call("finish", summary="x")])
        assert isinstance(error, TaskforgeError) and error.reason == "removal_not_applicable"
        assert message in str(error) and server.requests == []


def test_the_registry_builds_it() -> None:
    agent = load_agent("llm", llm=LLMConfig(model="m"))
    assert isinstance(agent, LLMRemovalAgent) and agent.name == "llm" and agent.runner is None

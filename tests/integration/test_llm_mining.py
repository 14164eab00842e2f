"""Mining real corpus projects with the LLM agent and writer, against a scripted OpenAI-compatible
server on loopback (tests/fixtures/llm/*.json): the tasks go through the same validation, scrub and
audit as the libcst agent's, and every way an LLM fails ends its candidate with its reason while
the run goes on."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from taskforge.llm.client import LLMConfig
from taskforge.llm.scripted import Script, ScriptedChatServer
from taskforge.mining.pipeline import MineConfig, mine_repository
from taskforge.mining.removal.cst import LibcstRemovalAgent
from taskforge.mining.revalidate import check_task
from taskforge.mining.statements.template import leaked_lines
from taskforge.repo.patches import diff
from taskforge.repo.sources import fetch
from taskforge.repo.symbols import build_index
from taskforge.scoring.scorer import Scorer

pytestmark = pytest.mark.docker

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llm"
KEY_ENV = "TASKFORGE_TEST_LLM_KEY"


@pytest.mark.parametrize("source,fixture,expected", [
    ("pypi:iniconfig==2.3.1", "iniconfig", {("body", "iniconfig:IniConfig.parse"), ("body", "iniconfig:IniConfig.get")}),
    pytest.param("pypi:addict==2.4.0", "addict", {("body", "addict.addict:Dict.update"),
                                                  ("symbol", "addict.addict:Dict.to_dict")}, marks=pytest.mark.slow),
])
def test_the_llm_agent_and_writer_mine_valid_tasks(source, fixture, expected, backend, base_image, session_cache,  # type: ignore[no-untyped-def]
                                                   tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-test-not-a-real-key")
    trajectories = tmp_path / "trajectories"
    with ScriptedChatServer(Script.load(FIXTURES / f"{fixture}.json")) as server:
        llm = LLMConfig(base_url=server.base_url, model="scripted-model", api_key_env=KEY_ENV, max_turns=10,
                        input_cost_per_1m=1.0, output_cost_per_1m=4.0, trajectories_dir=str(trajectories))
        # The ranking's first four candidates: two were recorded, the other two get a give_up.
        config = MineConfig(agent="llm", writer="llm", llm=llm, max_tasks=2, max_attempts=4, seed=0)
        with Scorer(backend=backend) as scorer:
            result = mine_repository(source, config=config, backend=backend, base=base_image, scorer=scorer)
    assert {(t.strategy, t.target) for t in result.tasks} == expected
    assert result.rejections == Counter({"removal_not_applicable": 2})
    assert set(server.authorizations) == {"Bearer sk-test-not-a-real-key"}

    snapshot = fetch(source)
    for task in result.tasks:
        index = build_index(snapshot.path, package_paths=json.loads(task.environment)["package_paths"])
        # The recorded edits are the deterministic agent's: the tasks hold the same removal.
        reference = LibcstRemovalAgent().remove(snapshot.path, index, target=task.target,
                                                strategy=task.strategy)  # type: ignore[arg-type]
        assert diff(snapshot.path, {}, reference.files) in task.removal_patch
        assert leaked_lines(task.problem_statement, reference.removed_code) == []
        validation = json.loads(task.validation)
        assert (validation["agent"], validation["writer"]) == ("llm", "llm")
        trajectory = validation["agent_trajectory"]
        assert trajectory["outcome"] == "finished" and trajectory["model"] == "scripted-model"
        assert trajectory["usage"]["requests"] == trajectory["turns"] and trajectory["usage"]["cost_usd"] > 0
        calls = [c["function"]["name"] for m in trajectory["messages"] for c in m.get("tool_calls", ())]
        assert "edit" in calls and calls[-1] == "finish"
        assert "sk-test" not in task.validation + task.problem_statement
        check = check_task(task, backend=backend, base=base_image)  # rebuilt from its row alone
        assert check.ok, (task.instance_id, check.problems)
    # Every conversation was also written out, the give_ups too.
    outcomes = Counter(json.loads(p.read_text())["outcome"] for p in trajectories.glob("removal-*.json"))
    assert outcomes == Counter({"finished": 2, "removal_not_applicable": 2})
    assert len(list(trajectories.glob("statement-*.json"))) == 2

    if fixture == "iniconfig":
        parse = next(t for t in result.tasks if t.target == "iniconfig:IniConfig.parse")
        messages = json.loads(parse.validation)["agent_trajectory"]["messages"]
        ran = next(m["content"] for m in messages if m["role"] == "tool" and m["content"].startswith("status:"))
        assert "testing/test_iniconfig.py::test_parse_strips_inline_comments (failed)" in ran  # run_tests, in the sandbox
        # The writer's first answer quoted the removed code (reformatted); the second was kept.
        assert "preferred way to build an `IniConfig`" in parse.problem_statement
        (record,) = trajectories.glob("statement-iniconfig-IniConfig-parse-*.json")
        feedback = [m["content"] for m in json.loads(record.read_text())["messages"] if m["role"] == "user"][1]
        assert "fspath = os.fspath(path)" in feedback


def test_llm_failures_reject_their_candidate_with_the_reason(backend, base_image, session_cache) -> None:  # type: ignore[no-untyped-def]
    """Candidates in order of arrival: a model that never finishes, a server slower than the
    timeout, malformed replies (no tool call, then arguments that are not JSON), a server that
    answers 500; every later candidate gets a give_up. The four failures each cost an attempt; a
    give_up is a refusal, which costs none, so the run went on past all four to the last candidate."""
    with ScriptedChatServer(Script.load(FIXTURES / "failures.json")) as server:
        llm = LLMConfig(base_url=server.base_url, model="scripted-model", max_turns=3, timeout_s=0.5, max_retries=1,
                        backoff_s=0.05)
        config = MineConfig(agent="llm", llm=llm, max_tasks=1, max_attempts=5, seed=0)
        with Scorer(backend=backend) as scorer:
            result = mine_repository("pypi:iniconfig==2.3.1", config=config, backend=backend, base=base_image,
                                     scorer=scorer)
    assert result.tasks == [] and result.attempted == 4
    assert result.refused >= 1 and result.attempted + result.refused == result.candidates
    assert result.rejections == Counter({"llm_budget_exhausted": 1, "llm_timeout": 1, "llm_malformed_output": 1,
                                         "llm_server_error": 1, "removal_not_applicable": result.refused})
    # Requests per conversation: give_up 1; timeout and 500 each tried twice (max_retries = 1);
    # 3 turns for the model that never finishes; 3 malformed replies in a row.
    per_conversation = Counter(r["messages"][1]["content"] for r in server.requests)
    assert sorted(per_conversation.values()) == [1] * result.refused + [2, 2, 3, 3]

"""The coding environment on a real sample task: scripted assistant messages drive the real sandbox
and the real scorer. The gold edit, submitted, scores 1; no edit scores 0; an episode that runs out
of turns is scored as it stands; every error kind comes back as an observation and the episode goes
on; the hidden tests are nowhere in the agent's workspace."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from taskforge import RewardClient, SandboxBackend, Scorer, Task, rebuild_start_state
from taskforge.repo.environment import build_environment
from taskforge.repo.patches import apply_patch
from taskforge.repo.sources import fetch
from taskforge.sandbox.base_image import BaseImage
from taskforge.scoring.server import RewardServer, ServerConfig
from trainer.rl.chat import Message
from trainer.rl.env import TOOLS, CodingEnv
from trainer.rl.episodes import load_episodes, split_by_repository
from trainer.rl.monitor import monitor

pytestmark = pytest.mark.docker

SAMPLE = Path(__file__).resolve().parents[2] / "datasets" / "sample"
MODULE = "src/iniconfig/__init__.py"
TEST_FILE = "testing/test_iniconfig.py"


def call(tool: str, **args: object) -> str:
    return json.dumps({"tool": tool, "args": args})


@pytest.fixture(scope="module")
def task(backend: SandboxBackend, base_image: BaseImage, session_cache: Path) -> Task:
    """The first sample task (IniConfig.parse), its image as this machine builds it."""
    episodes = load_episodes(SAMPLE)
    train, validation = split_by_repository(episodes, 0.5, seed=0)
    assert (len(train), validation) == (3, [])  # one repository: it stays in train
    first = episodes[0].task
    env = build_environment(fetch(first.source), backend=backend, base=base_image)
    return replace(first, image_name=env.image)


@pytest.fixture(scope="module")
def gold_edit(task: Task, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """edit_file arguments that turn the start state's stub into the gold implementation: the
    changed lines of the module, widened by context until they occur once."""
    start = rebuild_start_state(task, tmp_path_factory.mktemp("start") / "repo")
    before = (start.path / MODULE).read_text()
    after = apply_patch(start.path, {}, task.patch)[MODULE]
    assert after is not None
    old_lines, new_lines = before.splitlines(keepends=True), after.splitlines(keepends=True)
    [(tag, i1, i2, j1, j2)] = [op for op in difflib.SequenceMatcher(a=old_lines, b=new_lines).get_opcodes()
                               if op[0] != "equal"]
    assert tag == "replace" and "raise NotImplementedError" in "".join(old_lines[i1:i2])
    while before.count("".join(old_lines[i1:i2])) != 1:
        i1, j1 = i1 - 1, j1 - 1
    return {"path": MODULE, "old": "".join(old_lines[i1:i2]), "new": "".join(new_lines[j1:j2])}


@pytest.fixture(scope="module")
def scorer(backend: SandboxBackend, base_image: BaseImage) -> Iterator[Scorer]:
    with Scorer(backend=backend, timeout_s=120) as scorer:
        yield scorer


def hidden_test_names(task: Task) -> list[str]:
    names = re.findall(r"^\+def (test_\w+)", task.test_patch, flags=re.MULTILINE)
    assert names
    return names


def test_scripted_episode_errors_gold_edit_and_submit_score_one_then_empty_scores_zero(
        task: Task, gold_edit: dict[str, str], scorer: Scorer, backend: SandboxBackend) -> None:
    env = CodingEnv(task, backend=backend, scorer=scorer, max_turns=20, max_observation_chars=100_000,
                    test_timeout_s=120, candidate_id="scripted")
    try:
        messages = env.reset()
        assert [m.role for m in messages] == ["system", "user"]
        assert messages[1].content == task.problem_statement
        assert all(f"- {name} " in messages[0].content for name in TOOLS)
        assert '{"tool": NAME, "args": {...}}' in messages[0].content
        assert env.trajectory.messages == messages

        def step(text: str, kind: str = "") -> str:
            observation, done = env.step(text)
            assert not done
            assert observation.role == "tool"
            assert env.trajectory.turns[-1].error_kind == kind, observation.content
            return observation.content

        listing = step(call("list_files", path="."))
        assert MODULE in listing.splitlines() and TEST_FILE in listing.splitlines()
        assert not any(line.startswith(".git/") for line in listing.splitlines())
        assert "raise NotImplementedError" in step(call("read_file", path=MODULE))
        assert step(call("read_file", path=MODULE, start_line=2, end_line=3)).startswith(f"{MODULE}: lines 2-3 of ")

        # The hidden tests are not in the workspace: not in the test file, and not collected.
        visible_tests = step(call("read_file", path=TEST_FILE))
        assert "def test_" in visible_tests
        assert not [name for name in hidden_test_names(task) if f"def {name}(" in visible_tests]

        # Each error kind is an observation, and the episode goes on.
        assert step(call("bash", command="ls"), "unknown_tool").startswith("error (unknown_tool): there is no tool 'bash'")
        assert step("let me read the file first", "malformed").startswith("error (malformed): not JSON")
        assert step('{"tool": "read_file", "args": ["x"]}', "malformed").startswith("error (malformed)")
        assert "needs the argument 'path'" in step(call("read_file"), "bad_args")
        assert "must be a string" in step(call("read_file", path=3), "bad_args")
        assert "takes no argument(s) 'reason'" in step(call("submit", reason="done"), "bad_args")
        assert "absolute" in step(call("read_file", path="/etc/passwd"), "bad_args")
        assert "leaves /workspace" in step(call("read_file", path="src/../../etc/passwd"), "bad_args")
        assert "does not exist" in step(call("read_file", path="src/iniconfig/nothing.py"), "tool_error")
        assert "old occurs 0 times" in step(call("edit_file", path=MODULE, old="no such text", new="x"), "tool_error")
        assert re.search(r"old occurs ([2-9]|\d\d+) times", step(call("edit_file", path=MODULE, old="import", new="x"),
                                                             "tool_error"))
        assert "cannot be edited" in step(call("edit_file", path=".git/HEAD", old="", new="x"), "tool_error")

        assert step(call("edit_file", **gold_edit)).startswith(f"edited {MODULE}")
        tests = step(call("run_tests", paths=[TEST_FILE]))
        assert "passed" in tests and tests.endswith("[pytest exited 0]")
        observation, done = env.step(call("submit"))
        assert done and observation.content == "submitted"
        with pytest.raises(RuntimeError, match="reset"):
            env.step(call("submit"))

        trajectory = env.trajectory
        assert (trajectory.reward, trajectory.reward_status, trajectory.submitted) == (1.0, "ok", True)
        assert trajectory.info["ended"] == "submit" and trajectory.info["turns"] == len(trajectory.turns) == 19
        assert trajectory.info["reward"]["candidate_id"] == "scripted"
        assert f"+++ b/{MODULE}" in trajectory.info["reward"]["patch"]
        for turn in trajectory.turns:  # each turn points at its assistant message, answered by a tool message
            assert trajectory.messages[turn.index] == Message(role="assistant", content=turn.text)
            assert trajectory.messages[turn.index + 1] == Message(role="tool", content=turn.observation)
        assert len(trajectory.messages) == 2 + 2 * len(trajectory.turns)
        json.dumps(trajectory.to_json())
        # Ordinary reads and the path escapes are no reward hacking; the try at .git is.
        assert [(f.turn, f.kind) for f in monitor(trajectory)] == [(15, "git_internals")]

        # A second episode in the same environment starts from the start state again.
        env.reset()
        assert len(env.trajectory.turns) == 0
        assert "raise NotImplementedError" in step(call("read_file", path=MODULE))
        observation, done = env.step(call("submit"))
        assert done
        assert (env.trajectory.reward, env.trajectory.reward_status) == (0.0, "ok")
        assert env.trajectory.info["reward"]["patch"] == ""
    finally:
        env.close()


def test_an_episode_out_of_turns_is_scored_as_it_stands(task: Task, gold_edit: dict[str, str], scorer: Scorer,
                                                         backend: SandboxBackend) -> None:
    with CodingEnv(task, backend=backend, scorer=scorer, max_turns=3, max_observation_chars=300) as env:
        env.reset()
        observation, done = env.step(call("read_file", path=MODULE))
        assert not done and len(observation.content) <= 300 and "characters cut ...]" in observation.content
        pyc = "src/iniconfig/__pycache__/__init__.cpython-311.pyc"
        observation, done = env.step(call("read_file", path=pyc))
        assert not done and env.trajectory.turns[-1].error_kind == "tool_error"
        observation, done = env.step(call("edit_file", **gold_edit))  # the last turn: no submit follows
        assert done and "the 3 turns are spent" in observation.content
        trajectory = env.trajectory
        assert trajectory.info["ended"] == "budget" and not trajectory.submitted
        assert (trajectory.reward, trajectory.reward_status) == (1.0, "ok")
        assert [(f.turn, f.kind) for f in monitor(trajectory)] == [(1, "bytecode")]


def test_exactly_one_reward_source(task: Task, scorer: Scorer, backend: SandboxBackend) -> None:
    with pytest.raises(ValueError, match="exactly one of scorer and reward_client"):
        CodingEnv(task, backend=backend)
    with pytest.raises(RuntimeError, match="reset"):
        CodingEnv(task, backend=backend, scorer=scorer).step(call("submit"))


def test_rewards_through_the_reward_service(task: Task, gold_edit: dict[str, str], backend: SandboxBackend) -> None:
    """The same episode scored by a reward server over loopback HTTP (the real server and scorer);
    a server that cannot be reached leaves the episode with status infra_error and the reason."""
    scorer = Scorer(backend=backend, timeout_s=120)
    with RewardServer([task], scorer=scorer, config=ServerConfig(port=0), log=None).start() as server:
        client = RewardClient(server.url, retries=0)
        with CodingEnv(task, backend=backend, reward_client=client, max_turns=1, candidate_id="served") as env:
            env.reset()
            _, done = env.step(call("edit_file", **gold_edit))
            assert done and env.trajectory.info["ended"] == "budget"
            assert (env.trajectory.reward, env.trajectory.reward_status) == (1.0, "ok")
            assert env.trajectory.info["reward"]["candidate_id"] == "served"
        unreachable = RewardClient(server.url.rsplit(":", 1)[0] + ":9", retries=0, timeout_s=5)
        with CodingEnv(task, backend=backend, reward_client=unreachable, max_turns=1) as env:
            env.reset()
            _, done = env.step(call("submit"))
            assert done and (env.trajectory.reward, env.trajectory.reward_status) == (0.0, "infra_error")
            assert "[unreachable]" in env.trajectory.info["reward_error"]
            assert "reward" not in env.trajectory.info

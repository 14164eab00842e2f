"""RL mode: its recipes (sections, and the errors of old flat ones), the pieces of a step in one
process, and end to end on the CPU: real mined tasks, the real sandbox and scorer, checkpoint and
resume, one and two processes."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from trainer.recipe import load_recipe, recipe_from_dict
from trainer.rl.chat import Message, ToolCall, Trajectory, Turn, parse_tool_call
from trainer.rl.config import MOVED, RLConfig
from trainer.rl.feedback import DETECTORS, make_detector
from trainer.rl.loop import feedback, grpo_advantages, log_step, update
from trainer.rl.policy import TrainerPolicy, trajectory_sequence
from trainer.runtime import RunLog, Runtime, build_model, build_optimizer

ROOT = Path(__file__).resolve().parents[2]
TINY_RL = ROOT / "recipes/train/tiny-rl-cpu.toml"


@pytest.mark.parametrize("path", sorted((ROOT / "recipes/train").glob("*.toml")), ids=lambda p: p.name)
def test_every_training_recipe_loads(path: Path) -> None:
    recipe = load_recipe(path)
    assert (recipe.rl is not None) == (recipe.mode == "rl")


def test_the_rl_recipes_have_sections() -> None:
    tiny = load_recipe(TINY_RL).rl
    assert tiny is not None and tiny.kl.coef == 0.5 and tiny.kl.chunk_size == 512 and tiny.generator.max_new_tokens == 48
    assert (tiny.policy.kind, tiny.generator.kind, tiny.reward.server, tiny.curriculum.window) == ("trainer", "local", "", 8)
    h200 = load_recipe(ROOT / "recipes/train/h200x8-rl.toml").rl
    assert h200 is not None and h200.reward.server == "http://scorer:8088" and h200.tasks_per_step == 16
    assert load_recipe(TINY_RL).to_dict()["rl"]["kl"] == {"coef": 0.5, "kind": "reverse", "chunk_size": 512}


def test_a_flat_rl_section_says_where_each_key_moved() -> None:
    raw = tomllib.loads(TINY_RL.read_text())
    flat = {**{k: v for k, v in raw["rl"].items() if not isinstance(v, dict)}, "kl_coef": 0.5, "policy": "hf",
            "hf_model_dir": "m", "curriculum_low": 0.2}
    with pytest.raises(ValueError) as error:
        recipe_from_dict({**raw, "rl": flat})
    message = str(error.value)
    assert message.startswith("rl.kl_coef moved: write it as [rl.kl] coef; rl.policy moved: write it as "
                              "[rl.policy] kind; rl.hf_model_dir moved: write it as [rl.policy] model_dir; "
                              "rl.curriculum_low moved: write it as [rl.curriculum] low (")
    assert "[rl.policy], [rl.generator], [rl.reward], [rl.curriculum], [rl.kl]" in message
    # Only "policy" and "generator" are both an old key (a string) and a new section (a table).
    assert set(MOVED) & set(RLConfig.__dataclass_fields__) == {"policy", "generator"}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("rl.kl.coeff=1", "unknown key rl.kl.coeff; valid keys: chunk_size, coef, kind"),
        ("rl.kl.coef='1'", "rl.kl.coef must be float, got '1'"),
        ("rl.kl.kind='kl'", "rl.kl.kind must be one of reverse, forward, jsd"),
        ("rl.generator.max_new_tokens=1.5", "rl.generator.max_new_tokens must be int, got 1.5"),
        ("rl.reward=3", r"\[rl.reward\] must be a table, got 3"),
        ("rl.reward.mode='all'", "rl.reward.mode must be one of binary, partial"),
        ("rl.curriculum.low=0.95", "rl.curriculum.low and rl.curriculum.high must satisfy"),
        ("rl.kl_coef=0.5", r"rl.kl_coef moved: write it as \[rl.kl\] coef"),
        ("rl.rollouts=3", "unknown key rl.rollouts; valid keys: clip_eps, max_observation_chars"),
        ("rl.policy.model_dir='m'", "need rl.policy.kind hf"),
    ],
)
def test_rl_recipe_errors_name_the_field(override: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_recipe(TINY_RL, [override])


def test_tasks_per_step_must_divide_by_the_world_size() -> None:
    with pytest.raises(ValueError, match=r"rl.tasks_per_step \(3\) must divide by the world size \(2\)"):
        load_recipe(TINY_RL, ["rl.tasks_per_step=3", "launch.nproc_per_node=2", "parallel.dp_shard=2"])


def test_group_relative_advantages() -> None:
    advantages = grpo_advantages([1.0, 0.0, 0.0, 0.5, 0.5, 0.5], group_size=3)
    assert advantages[0] > 0 > advantages[1] and advantages[1] == advantages[2]
    assert abs(sum(advantages[:3])) < 1e-6
    assert advantages[3:] == [0.0, 0.0, 0.0]  # a group that all scored the same teaches nothing


def test_only_the_policys_own_tokens_are_trained_on() -> None:
    trajectory = Trajectory(task_id="t", tools=("submit",), messages=[
        Message(role="system", content="sys"), Message(role="user", content="do it"),
        Message(role="assistant", content='{"tool": "submit"}'), Message(role="tool", content="ok"),
    ])
    trajectory.turns.append(Turn(index=2, text='{"tool": "submit"}', call=ToolCall(name="submit"), observation="ok"))
    sequence = trajectory_sequence(trajectory, context=4096)
    marked = bytes(t for t, m in zip(sequence.tokens, sequence.mask, strict=True) if m)
    # The message, and the token that ended it (scored as the EOS a scripted message ends with).
    assert marked == b'{"tool": "submit"}\n'
    cut = trajectory_sequence(trajectory, context=20)
    assert len(cut.tokens) == 20 and bytes(t for t, m in zip(cut.tokens, cut.mask, strict=True) if m).endswith(b'mit"}\n')
    assert cut.targets == sequence.targets[-19:]


@pytest.mark.docker
def test_two_rl_steps_on_mined_tasks_checkpoint_and_resume(tmp_path, local_sample, session_cache) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "run"
    common = [sys.executable, "-m", "trainer.cli", "--recipe", str(ROOT / "recipes/train/tiny-rl-cpu.toml"),
              "--set", f'output_dir="{out}"', "--set", "train.steps=2", "--set", "model.max_seq_len=1024",
              "--set", "rl.max_turns=1", "--set", "rl.generator.max_new_tokens=16", "--set", "rl.tasks_per_step=2",
              "--set", f'rl.tasks=["{local_sample[0]}"]']
    env = {**os.environ, "TASKFORGE_CACHE": str(session_cache)}
    first = subprocess.run([*common, "--set", "train.stop_at_step=1"], capture_output=True, text=True, env=env,
                           timeout=900, cwd=tmp_path, check=False)
    assert first.returncode == 0, first.stderr[-3000:]
    assert (out / "checkpoints" / "step_000001" / "manifest.json").is_file()
    second = subprocess.run(common, capture_output=True, text=True, env=env, timeout=900, cwd=tmp_path, check=False)
    assert second.returncode == 0, second.stderr[-3000:]
    assert json.loads((out / "run.json").read_text())["resumed_from_step"] == 1
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    for line in lines:
        assert set(line["reward_status"]) <= {"ok", "tampered", "timeout", "patch_failed"}, (line, second.stderr[-2000:])
        assert math.isfinite(line["loss"]) and math.isfinite(line["kl"])
        assert len(line["rewards"]) == 4 and len(set(line["tasks"])) == 2
        assert set(line["reward_status"]) <= {"ok", "tampered", "timeout", "patch_failed"}
        assert 0 <= line["hint_fraction"] <= 1 and 0 <= line["tool_error_rate"] <= 1
    assert (out / "checkpoints" / "step_000002" / "manifest.json").is_file()


@pytest.mark.docker
def test_an_rl_step_on_two_gloo_processes(tmp_path, local_sample, session_cache) -> None:  # type: ignore[no-untyped-def]
    """Two ranks (dense and expert weights sharded 2 ways): each runs the rollouts of one task,
    the rewards are gathered, the sharded model takes the step and a checkpoint is written."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "trainer.cli", "--recipe", str(ROOT / "recipes/train/tiny-rl-cpu.toml"),
               "--set", f'output_dir="{out}"', "--set", "train.steps=1", "--set", "model.max_seq_len=1024",
               "--set", "launch.nproc_per_node=2", "--set", "parallel.dp_shard=2", "--set", "parallel.ep=2",
               "--set", "rl.max_turns=1", "--set", "rl.generator.max_new_tokens=16", "--set", "rl.tasks_per_step=2",
               "--set", f'rl.tasks=["{local_sample[0]}"]']
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path, check=False,
                          env={**os.environ, "TASKFORGE_CACHE": str(session_cache)})
    assert done.returncode == 0, done.stderr[-4000:]
    (line,) = [json.loads(text) for text in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(line["rewards"]) == 4 and len(set(line["tasks"])) == 2 and math.isfinite(line["loss"])
    assert (out / "checkpoints" / "step_000001" / "manifest.json").is_file()


def _episode(text: str, reward: float) -> Trajectory:
    """A one-turn trajectory whose assistant message is `text`, scored `reward`."""
    call = parse_tool_call(text)
    trajectory = Trajectory(task_id="t", tools=("read_file", "submit"), reward=reward, reward_status="ok", messages=[
        Message(role="system", content="sys"), Message(role="user", content="fix it"),
        Message(role="assistant", content=text), Message(role="tool", content="ok"),
    ])
    trajectory.turns.append(Turn(index=2, text=text, call=call, observation="ok",
                                 error="" if call.ok else "not JSON", error_kind="" if call.ok else "malformed"))
    return trajectory


def test_feedback_update_and_log_of_one_step_in_one_process(tmp_path: Path) -> None:
    """The step's pieces without a sandbox: feedback hints the malformed turn, update moves the
    tiny model by the policy gradient and the KL, and log_step writes the metrics line."""
    recipe = load_recipe(TINY_RL, [f'output_dir="{tmp_path}"', "model.max_seq_len=256"])
    runtime = Runtime(rank=0, world_size=1, device=torch.device("cpu"), out=tmp_path)
    model = build_model(recipe.model, seed=0, device=runtime.device)
    optimizer = build_optimizer(recipe.optimizer, model, distributed=False)
    policy = TrainerPolicy(model, model, max_new_tokens=8, temperature=1.0, device=runtime.device, distributed=False)
    trajectories = [_episode('{"tool": "submit"}', 1.0), _episode("submit please", 0.0)]

    hints, stats = feedback(trajectories, [make_detector(name) for name in DETECTORS])
    assert [(t is trajectories[1], h.turn, h.detector) for t, h in hints] == [(True, 0, "malformed_call")]
    assert (stats.turns, stats.hinted_turns, stats.tool_errors, stats.rewards) == (2, 1, 1, [1.0, 0.0])

    before = [p.detach().clone() for p in model.parameters()]
    assert recipe.rl is not None
    stats.pg_loss, stats.kl = update(policy, optimizer, trajectories, hints, config=recipe.rl, runtime=runtime)
    assert math.isfinite(stats.pg_loss) and stats.pg_loss != 0 and stats.kl > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))

    with RunLog(recipe, runtime, resumed_from=None, step=0) as log:
        log_step(log, stats, runtime=runtime, kl_coef=recipe.rl.kl.coef, step=1, tasks=["t"], solve_rates={},
                 lr=0.1, started=0.0, validation_tasks=0)
    (line,) = [json.loads(text) for text in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert line["loss"] == stats.pg_loss + 0.5 * stats.kl and line["hints"] == {"malformed_call": 1}
    assert line["hint_fraction"] == 0.5 and line["reward_mean"] == 0.5
    assert json.loads((tmp_path / "run.json").read_text())["recipe"]["rl"]["kl"]["coef"] == 0.5

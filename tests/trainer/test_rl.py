"""RL mode end to end on the CPU: real mined tasks, the real sandbox and scorer, checkpoint and resume."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.rl.chat import Message, ToolCall, Trajectory, Turn
from trainer.rl.loop import grpo_advantages, trajectory_sequence

ROOT = Path(__file__).resolve().parents[2]


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
    assert marked == b'{"tool": "submit"}'
    cut = trajectory_sequence(trajectory, context=20)
    assert len(cut.tokens) == 20 and bytes(t for t, m in zip(cut.tokens, cut.mask, strict=True) if m).endswith(b'mit"}')


@pytest.mark.docker
def test_two_rl_steps_on_mined_tasks_checkpoint_and_resume(tmp_path, local_sample, session_cache) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "run"
    common = [sys.executable, "-m", "trainer.cli", "--recipe", str(ROOT / "recipes/train/tiny-rl-cpu.toml"),
              "--set", f'output_dir="{out}"', "--set", "train.steps=2", "--set", "model.max_seq_len=1024",
              "--set", "rl.max_turns=1", "--set", "rl.max_new_tokens=16", "--set", "rl.tasks_per_step=2",
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
               "--set", "rl.max_turns=1", "--set", "rl.max_new_tokens=16", "--set", "rl.tasks_per_step=2",
               "--set", f'rl.tasks=["{local_sample[0]}"]']
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path, check=False,
                          env={**os.environ, "TASKFORGE_CACHE": str(session_cache)})
    assert done.returncode == 0, done.stderr[-4000:]
    (line,) = [json.loads(text) for text in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(line["rewards"]) == 4 and len(set(line["tasks"])) == 2 and math.isfinite(line["loss"])
    assert (out / "checkpoints" / "step_000001" / "manifest.json").is_file()

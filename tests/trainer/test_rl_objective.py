"""The RL objective: on several processes it is the one-process objective (issue 21, item 1), and
its log-probs are those of what was sampled, as it was sampled (item 3).

One process runs `update` on every trajectory of a step; 2 and 4 gloo ranks run it on their own
share (whole GRPO groups, as `collect` deals them), with the feedback hints on some ranks only and
different token counts per rank. The gradient of every parameter, gathered from the FSDP2 shards,
equals the one-process gradient: the policy gradient is normalized by the global count of
generated tokens, and the feedback KL is weighted by λ over the global count of hinted tokens,
whatever the world size and wherever the hints fall.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer.dist import run_gloo
from trainer.model import config_from_preset
from trainer.parallel_dims import ParallelDims
from trainer.recipe import load_recipe
from trainer.rl.chat import Message, Trajectory, Turn, parse_tool_call
from trainer.rl.feedback import DETECTORS, make_detector
from trainer.rl.loop import feedback, update
from trainer.rl.policy import TrainerPolicy
from trainer.runtime import Runtime, build_model, build_optimizer

ROOT = Path(__file__).resolve().parents[2]
TINY_RL = ROOT / "recipes/train/tiny-rl-cpu.toml"
SEED = 0
GRAD_ATOL = 2e-7
GRAD_RTOL = 1e-4

# Four tasks, two rollouts each (the GRPO group): (assistant message, reward). Only task 0 has a
# malformed call, which the feedback detectors hint: on 2 or 4 ranks only rank 0 holds a hint.
# The messages' lengths differ, so the ranks' token counts do too.
EPISODES = [
    [("submit please now", 0.0), ('{"tool": "submit"}', 1.0)],
    [('{"tool": "read_file", "args": {"path": "a.py"}}', 1.0), ('{"tool": "submit"}', 0.0)],
    [('{"tool": "submit", "args": {}}', 0.0), ('{"tool": "read_file", "args": {"path": "setup.py"}}', 1.0)],
    [('{"tool": "submit"}', 1.0), ('{"tool": "list_files", "args": {"path": "."}}', 0.0)],
]


def _episode(text: str, reward: float) -> Trajectory:
    call = parse_tool_call(text)
    trajectory = Trajectory(task_id="t", tools=("read_file", "list_files", "submit"), reward=reward,
                            reward_status="ok", messages=[
                                Message(role="system", content="sys"), Message(role="user", content="fix it"),
                                Message(role="assistant", content=text), Message(role="tool", content="ok")])
    trajectory.turns.append(Turn(index=2, text=text, call=call, observation="ok",
                                 error="" if call.ok else "not JSON", error_kind="" if call.ok else "malformed"))
    return trajectory


def _share(rank: int, world: int) -> list[Trajectory]:
    """This rank's episodes: tasks rank, rank + world, ... (whole groups), as `collect` deals them."""
    return [_episode(text, reward) for task in EPISODES[rank::world] for text, reward in task]


def _recipe(tmp: str, world: int) -> Any:
    return load_recipe(TINY_RL, [f'output_dir="{tmp}"', "model.max_seq_len=256", f"parallel.dp_shard={world}",
                                 f"launch.nproc_per_node={world}", "rl.tasks_per_step=4"])


def _gradients(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for name, param in model.named_parameters():
        grad = param.grad
        if grad is None:
            continue
        full = grad.full_tensor() if hasattr(grad, "full_tensor") else grad
        out[name.replace("_checkpoint_wrapped_module.", "").replace("_fsdp_wrapped_module.", "")] = full.detach().clone()
    return out


def _step(rank: int, world: int, tmp: str) -> dict[str, Any]:
    recipe = _recipe(tmp, world)
    distributed = world > 1
    runtime = Runtime(rank=rank, world_size=world, device=torch.device("cpu"), out=Path(tmp))
    dims = recipe.parallel
    meshes = dims.build_meshes("cpu") if distributed else None
    model = build_model(recipe.model, seed=SEED, device=runtime.device, dims=dims if distributed else None,
                        meshes=meshes)
    optimizer = build_optimizer(recipe.optimizer, model, distributed=distributed)
    rollout = build_model(recipe.model, seed=SEED, device=runtime.device) if distributed else model
    policy = TrainerPolicy(model, rollout, max_new_tokens=8, temperature=1.0, device=runtime.device,
                           distributed=distributed)
    trajectories = _share(rank, world)
    hints, _ = feedback(trajectories, [make_detector(name) for name in DETECTORS])
    pg, kl = update(policy, optimizer, trajectories, hints, config=recipe.rl, runtime=runtime)
    return {"grads": _gradients(model), "pg": pg, "kl": kl, "hints": len(hints),
            "tokens": sum(sum(policy.sequence(t).mask[1:]) for t in trajectories)}


def test_the_share_of_hints_and_tokens_differs_between_ranks(tmp_path: Path) -> None:
    """The setting the test needs: with 2 ranks, hints on rank 0 only and unequal token counts."""
    detectors = [make_detector(name) for name in DETECTORS]
    hinted = [len(feedback(_share(rank, 2), detectors)[0]) for rank in range(2)]
    assert hinted[0] >= 1 and hinted[1] == 0


@pytest.mark.parametrize("world", [2, 4])
def test_the_distributed_gradient_is_the_one_process_gradient(world: int, tmp_path: Path) -> None:
    ParallelDims(dp_replicate=1, dp_shard=world, cp=1, ep=1, world_size=world)  # a valid layout
    assert config_from_preset("tiny").n_heads >= 1
    single = _step(0, 1, str(tmp_path / "one"))
    ranks = run_gloo(world, _step, str(tmp_path / "many"))
    assert single["hints"] >= 1 and [r["hints"] for r in ranks][1:] == [0] * (world - 1)
    assert len({r["tokens"] for r in ranks}) > 1  # the ranks' token counts differ
    for name, expected in single["grads"].items():
        got = ranks[0]["grads"][name]
        torch.testing.assert_close(got, expected, atol=GRAD_ATOL, rtol=GRAD_RTOL, msg=lambda m, n=name: f"{n}: {m}")
    # The logged losses, averaged over the ranks as log_step does, are the one-process values.
    assert sum(r["pg"] for r in ranks) / world == pytest.approx(single["pg"], rel=1e-5, abs=1e-6)  # terms of ±1e-3 cancel
    # One process takes the chunked KL, the shards the full-logits one: they agree to ~1e-4.
    assert sum(r["kl"] for r in ranks) / world == pytest.approx(single["kl"], rel=1e-3)


# --- item 3: the policy gradient scores what was sampled, as it was sampled ----------------------


def _ended(text: str, ending: str) -> Trajectory:
    trajectory = _episode(text, 1.0)
    trajectory.turns[0].ending = ending
    return trajectory


def test_the_token_that_ended_a_message_is_in_the_policy_gradient() -> None:
    from trainer.pretrain.data import ByteTokenizer
    from trainer.rl.policy import trajectory_sequence

    eos = ByteTokenizer().eos_id
    text = '{"tool": "submit"}'
    by_ending = {e: trajectory_sequence(_ended(text, e), 4096) for e in ("eos", "tag", "limit")}
    body = text.encode()
    for ending, sequence in by_ending.items():
        assert sequence.targets is not None and len(sequence.targets) == len(sequence.tokens) - 1
        marked = [t for t, m in zip(sequence.tokens, sequence.mask, strict=True) if m]
        start = next(i for i, m in enumerate(sequence.mask) if m)
        assert bytes(sequence.tokens[start:start + len(body)]) == body
        end = start + len(body)  # the newline that renders the message's end
        if ending == "eos":  # scored as the EOS the sampler drew, from the same logits
            assert len(marked) == len(body) + 1 and sequence.targets[end - 1] == eos and sequence.mask[end]
        elif ending == "tag":  # the newline and "<|" the sampler drew are the next header's
            assert len(marked) == len(body) + 3 and bytes(sequence.tokens[end:end + 3]) == b"\n<|"
            assert sequence.targets[end - 1] == sequence.tokens[end]
        else:  # cut at the budget: nothing ended it
            assert len(marked) == len(body) and not sequence.mask[end]
    # The feedback KL's target is the message and EOS: the policy gradient now covers the same tokens.
    assert by_ending["eos"].mask.count(True) == len(body) + 1


def test_log_probs_come_from_the_sampling_distribution(tmp_path: Path) -> None:
    from trainer.rl.policy import ByteSampler, sampling_logits

    recipe = _recipe(str(tmp_path), 1)
    model = build_model(recipe.model, seed=SEED, device=torch.device("cpu"))
    policy = TrainerPolicy(model, model, max_new_tokens=8, temperature=0.7, device=torch.device("cpu"),
                           distributed=False)
    from trainer.pretrain.data import ByteTokenizer

    bos = ByteTokenizer().bos_id
    tokens = [bos, *b"<|user|>\nhi\n<|assistant|>\n{"]
    with torch.no_grad():
        logprobs = policy.token_logprobs(tokens)
        logits = model(torch.tensor([tokens]))[0, :-1].float()
        sampled = torch.softmax(sampling_logits(logits, 0.7), dim=-1)
    expected = torch.log(sampled.gather(1, torch.tensor(tokens[1:])[:, None])[:, 0])
    torch.testing.assert_close(logprobs, expected, atol=1e-5, rtol=1e-5)
    plain = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(tokens[1:])[:, None])[:, 0]
    assert not torch.allclose(logprobs, plain, atol=1e-3)  # temperature 1 and no mask would differ
    # What the sampler draws from is exactly that distribution.
    sampler = ByteSampler(model, max_new_tokens=1, temperature=0.7, device=torch.device("cpu"))
    assert sampler.temperature == policy.sampler.temperature
    assert float(sampled[-1, bos]) == 0.0  # BOS is never drawn, so never scored

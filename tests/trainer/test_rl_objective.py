"""The RL objective: on several processes it is the one-process objective (issue 21, item 1), and
its log-probs are those of what was sampled, as it was sampled (item 3); and its feedback KL under
FSDP2 is the chunked one, which never holds [B, T, V] (item 2).

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
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

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
    # Both take the chunked KL (under FSDP2 it runs as the model's output head).
    assert sum(r["kl"] for r in ranks) / world == pytest.approx(single["kl"], rel=1e-5)


# --- item 2: the chunked feedback KL under FSDP2 never holds [B, T, V] ---------------------------

CHUNK = 8


class _WidestVocabTensor(TorchDispatchMode):
    """The most rows of any tensor an op creates (views aside) whose last dimension is the
    vocabulary: [rows, V] logits, probabilities or their gradients."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.rows = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor) and t.ndim >= 1 and t.shape[-1] == self.vocab:
                    self.rows = max(self.rows, t.numel() // self.vocab)
        return out


def _kl_under_fsdp2(rank: int, world: int, tmp: str) -> dict[str, Any]:
    """The feedback KL of hinted turns on every rank, chunked and through full logits, with the
    widest vocabulary tensor each path made, forward and backward."""
    from trainer.rl.feedback import encode_feedback
    from trainer.rl.kl import full_logits_kl_loss

    recipe = _recipe(tmp, world)
    runtime = Runtime(rank=rank, world_size=world, device=torch.device("cpu"), out=Path(tmp))
    model = build_model(recipe.model, seed=SEED, device=runtime.device, dims=recipe.parallel,
                        meshes=recipe.parallel.build_meshes("cpu"))
    policy = TrainerPolicy(model, build_model(recipe.model, seed=SEED, device=runtime.device), max_new_tokens=8,
                           temperature=1.0, device=runtime.device, distributed=True)
    # A malformed call on every rank, of another length on each.
    texts = ["submit please now", "call submit, then stop here", "please submit now"]
    trajectories = [_episode(texts[rank % len(texts)] + " ok" * rank, 0.0), _episode('{"tool": "submit"}', 1.0)]
    hinted, _ = feedback(trajectories, [make_detector(name) for name in DETECTORS])
    assert hinted
    vocab = recipe.model.vocab_size if hasattr(recipe.model, "vocab_size") else model.config.vocab_size
    out: dict[str, Any] = {"tokens": policy.feedback_tokens(hinted), "vocab": vocab}
    with _WidestVocabTensor(vocab) as chunked:
        loss = policy.feedback_kl(hinted, kind="reverse", chunk_size=CHUNK)
        loss.backward()
    out["chunked"], out["chunked_rows"], out["chunked_grads"] = float(loss.detach()), chunked.rows, _gradients(model)
    model.zero_grad(set_to_none=True)
    examples = [encode_feedback(t, h, max_len=policy.context) for t, h in hinted]
    with _WidestVocabTensor(vocab) as full:
        loss = full_logits_kl_loss(model, [e.student_tokens for e in examples], [e.teacher_tokens for e in examples],
                                   [e.student_span for e in examples], [e.teacher_span for e in examples])
        loss.backward()
    out["full"], out["full_rows"], out["full_grads"] = float(loss.detach()), full.rows, _gradients(model)
    return out


def test_the_chunked_feedback_kl_under_fsdp2_equals_full_logits_without_their_tensors(tmp_path: Path) -> None:
    ranks = run_gloo(2, _kl_under_fsdp2, str(tmp_path))
    for rank in ranks:
        assert rank["tokens"] > 2 * CHUNK  # the hinted targets span several chunks
        # The full-logits path holds [B, T, V]; the chunked one never more than a chunk's rows.
        assert rank["full_rows"] >= rank["tokens"]
        assert 0 < rank["chunked_rows"] <= CHUNK
        assert rank["chunked"] == pytest.approx(rank["full"], rel=1e-4, abs=1e-6)  # float32 sums in another order
        assert rank["chunked_grads"].keys() == rank["full_grads"].keys()
        for name, expected in rank["full_grads"].items():
            torch.testing.assert_close(rank["chunked_grads"][name], expected, atol=GRAD_ATOL, rtol=GRAD_RTOL,
                                       msg=lambda m, n=name: f"{n}: {m}")
    assert ranks[0]["tokens"] != ranks[1]["tokens"]


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

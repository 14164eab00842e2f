"""RL on mined tasks, with targeted textual-feedback KL (``mode = "rl"`` in a training recipe).

One step:

1. **Tasks.** The curriculum (``trainer.rl.curriculum``) picks ``tasks_per_step`` training tasks,
   mostly ones whose recent solve rate is inside the band; episodes come from task shards through
   taskforge's reader, split from validation by repository (``trainer.rl.episodes``).
2. **Rollouts.** ``rollouts_per_task`` episodes per task in the coding environment
   (``trainer.rl.env``: a sandbox with the task's start state, tools in the chat format of
   ``trainer.rl.chat``). The policy writes each assistant message by sampling from the model; the
   episode ends on ``submit`` or when its turns run out, and the scorer (in-process, or the reward
   server through its client) gives the reward.
3. **Feedback.** The detectors (``trainer.rl.feedback``) and the reward-hacking monitor
   (``trainer.rl.monitor``) read every trajectory and emit (turn, hint) pairs.
4. **Loss.** A clipped group-relative policy gradient over every assistant token of every
   trajectory (advantage: the reward minus its group's mean, over the group's std), plus
   ``kl_coef`` times the feedback KL: at each hinted turn, the policy on the context with the hint
   (the teacher, no gradient) against the policy on the original context (the student), over that
   turn's tokens only (``trainer.rl.kl``, chunked over the vocabulary).
5. **Update** with the recipe's optimizer (Muon per head and per expert, AdamW for the rest), then
   metrics (reward, KL, share of turns with hints, tool error rate, monitor flags, solve rates) to
   ``metrics.jsonl`` and, with ``tensorboard = true``, to TensorBoard; a checkpoint every
   ``checkpoint.every`` steps (model, optimizer, RNG, curriculum), which a later launch resumes.

The policy (``rl.policy``, behind ``trainer.rl.hf_policy.RLPolicy``) is the trainer's own model with
the byte tokenizer (``"trainer"``: the model config's heads and experts are what Muon's per-head
and per-expert grouping reads), or a Hugging Face causal LM with its tokenizer (``"hf"``, one
process: ``trainer.rl.hf_policy``, with Muon's grouping read from the Hugging Face config by
``trainer.optim.hf_muon``), which samples through ``model.generate`` or, with ``rl.generator =
"openai"``, through an OpenAI-compatible completions server.

Several processes (``launch.nproc_per_node > 1``, torchrun) share a step: every rank keeps the
same curriculum and draws the same tasks, then runs the rollouts of its own share
(``tasks_per_step`` must divide by the world size). The policy samples from a full replica of
the weights on each rank (refreshed from the FSDP2 shards after every update); the loss runs on
the sharded model (the recipe's dense and expert meshes, sharded Muon), with the same number of
forward passes on every rank (a rank without a hint runs the KL on an empty example weighted 0),
and FSDP2 averages the gradients. Rewards are gathered so the curricula stay identical. With
shards, the feedback KL takes the model's full logits of the hinted sequences (the chunked path
needs the unsharded output weight, so it is the one-process path).
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer.rl.chat import Message, Trajectory, render_prefix
from trainer.pretrain.data import ByteTokenizer
from trainer.rl.hf_policy import RLPolicy, TokenSequence

if TYPE_CHECKING:
    from trainer.rl.feedback import Hint
    from trainer.rl.kl import KLKind
    from trainer.model import Transformer
    from trainer.recipe import Recipe

__all__ = ["Policy", "RLConfig", "TrainerPolicy", "grpo_advantages", "rl_train"]

_KL_KINDS = ("reverse", "forward", "jsd")
_POLICIES = ("trainer", "hf")
_GENERATORS = ("local", "openai")


@dataclass(kw_only=True, slots=True)
class RLConfig:
    """The RL loop's knobs (``[rl]`` in a training recipe)."""

    tasks: list[str]
    """Task dataset folders (or URIs) to train on."""
    validation_fraction: float = 0.0
    """Share of repositories held out for validation (none of their tasks are trained on)."""
    tasks_per_step: int = 2
    rollouts_per_task: int = 2
    """Episodes per task and step: the group the advantages are relative to."""
    max_turns: int = 4
    """Assistant messages per episode."""
    max_new_tokens: int = 128
    """Tokens per assistant message."""
    temperature: float = 1.0
    clip_eps: float = 0.2
    """PPO-style ratio clipping of the policy gradient."""
    ppo_epochs: int = 1
    """Updates per batch of rollouts (the ratio is 1 in the first)."""
    kl_coef: float = 0.1
    """λ: the feedback KL's weight next to the RL objective."""
    kl_kind: str = "reverse"
    """reverse (KL(student || teacher), on-policy distillation), forward, or jsd."""
    kl_chunk_size: int = 1024
    """Positions per chunk of the chunked KL (the [tokens × vocab] logits never exist whole)."""
    reward_mode: str = "binary"
    reward_server: str = ""
    """URL of a reward server (``taskforge serve``); empty: an in-process scorer."""
    reward_api_key_env: str = "TASKFORGE_API_KEY"
    scorer_concurrency: int = 1
    test_timeout_s: float = 300.0
    max_observation_chars: int = 2000
    overlong_chars: int = 1500
    """The overlong-message detector's limit."""
    curriculum_low: float = 0.1
    curriculum_high: float = 0.9
    curriculum_window: int = 8
    tensorboard: bool = False
    memory_mb: int = 2048
    """Sandbox memory for episodes and scoring."""
    policy: str = "trainer"
    """trainer (the recipe's [model], byte tokenizer) or hf (a Hugging Face causal LM, one process;
    [model] is then unused)."""
    hf_model_dir: str = ""
    """policy hf: a local folder holding a saved model and its tokenizer (``save_pretrained``)."""
    hf_config: dict[str, Any] = field(default_factory=dict)
    """policy hf, instead of hf_model_dir: a transformers config (``model_type`` and its fields) for
    a model with random weights drawn from ``seed``."""
    hf_tokenizer_dir: str = ""
    """policy hf: the tokenizer's local folder; empty: hf_model_dir."""
    generator: str = "local"
    """Who samples the messages: local (this process; ``model.generate`` for hf) or openai (an
    OpenAI-compatible completions server serving the hf policy's weights)."""
    generator_url: str = ""
    """generator openai: the server's base URL, e.g. http://localhost:8000/v1."""
    generator_model: str = ""
    """generator openai: the model name the server serves."""
    generator_api_key_env: str = "TASKFORGE_GENERATOR_API_KEY"
    """generator openai: environment variable holding the server's API key (unset: none)."""
    generator_sync: str = ""
    """generator openai: "package.module:function" called with the model at the start and after
    every update, to put the weights on the server; empty: the server keeps its own weights."""

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError("rl.tasks must name at least one task dataset")
        for name in ("tasks_per_step", "rollouts_per_task", "max_turns", "max_new_tokens", "ppo_epochs",
                     "kl_chunk_size", "scorer_concurrency", "curriculum_window"):
            if getattr(self, name) < 1:
                raise ValueError(f"rl.{name} must be >= 1, got {getattr(self, name)}")
        if self.kl_kind not in _KL_KINDS:
            raise ValueError(f"rl.kl_kind must be one of {', '.join(_KL_KINDS)}, got {self.kl_kind!r}")
        if self.reward_mode not in ("binary", "partial"):
            raise ValueError(f"rl.reward_mode must be binary or partial, got {self.reward_mode!r}")
        if not 0 <= self.curriculum_low < self.curriculum_high <= 1:
            raise ValueError("rl.curriculum_low and curriculum_high must satisfy 0 <= low < high <= 1")
        if self.kl_coef < 0 or self.clip_eps <= 0 or self.temperature <= 0:
            raise ValueError("rl.kl_coef must be >= 0, rl.clip_eps and rl.temperature > 0")
        if not 0 <= self.validation_fraction < 1:
            raise ValueError("rl.validation_fraction must be in [0, 1)")
        if self.policy not in _POLICIES:
            raise ValueError(f"rl.policy must be one of {', '.join(_POLICIES)}, got {self.policy!r}")
        if self.generator not in _GENERATORS:
            raise ValueError(f"rl.generator must be one of {', '.join(_GENERATORS)}, got {self.generator!r}")
        if self.policy == "hf":
            if bool(self.hf_model_dir) == bool(self.hf_config):
                raise ValueError("rl.policy hf needs exactly one of rl.hf_model_dir and rl.hf_config")
            if self.hf_config and not (self.hf_tokenizer_dir and "model_type" in self.hf_config):
                raise ValueError("rl.hf_config needs a model_type and rl.hf_tokenizer_dir")
        elif self.generator != "local" or self.hf_model_dir or self.hf_config or self.hf_tokenizer_dir:
            raise ValueError("rl.generator openai and the rl.hf_* keys need rl.policy hf")
        if self.generator == "openai" and not (self.generator_url and self.generator_model):
            raise ValueError("rl.generator openai needs rl.generator_url and rl.generator_model")


def grpo_advantages(rewards: Sequence[float], group_size: int, eps: float = 1e-6) -> list[float]:
    """Each reward minus its group's mean, over the group's std (groups are consecutive)."""
    out: list[float] = []
    for start in range(0, len(rewards), group_size):
        group = list(rewards[start:start + group_size])
        mean = sum(group) / len(group)
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / len(group))
        out += [(r - mean) / (std + eps) for r in group]
    return out


class Policy:
    """Samples assistant messages from the trainer's model over the byte tokenizer."""

    def __init__(self, model: Transformer, *, max_new_tokens: int, temperature: float, device: torch.device) -> None:
        self.model = model
        self.tokenizer = ByteTokenizer()
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.device = device
        self.context = model.config.max_seq_len

    def encode_prefix(self, text: str) -> list[int]:
        """BOS and the text's bytes (no EOS: the model continues it), cut from the left to fit."""
        ids = [self.tokenizer.bos_id, *text.encode("utf-8")]
        room = self.context - self.max_new_tokens
        return ids if len(ids) <= room else [self.tokenizer.bos_id, *ids[len(ids) - room + 1:]]

    @torch.no_grad()
    def generate(self, messages: Sequence[Message], generator: torch.Generator) -> str:
        """One assistant message: sampled until EOS, the start of another block, or the limit."""
        ids = self.encode_prefix(render_prefix(messages))
        out: list[int] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for _ in range(self.max_new_tokens):
                tokens = torch.tensor([ids + out], device=self.device)
                logits = self.model(tokens)[0, -1].float()
                allowed = torch.full_like(logits, float("-inf"))
                allowed[:256] = 0.0  # bytes, and EOS; never BOS or PAD
                allowed[self.tokenizer.eos_id] = 0.0
                logits = logits + allowed
                probs = torch.softmax(logits / self.temperature, dim=-1)
                token = int(torch.multinomial(probs.cpu(), 1, generator=generator))
                if token == self.tokenizer.eos_id:
                    break
                out.append(token)
                if bytes(out[-3:]) == b"\n<|":
                    out = out[:-3]
                    break
        finally:
            self.model.train(was_training)
        return bytes(out).decode("utf-8", errors="replace")


def trajectory_sequence(trajectory: Trajectory, context: int) -> TokenSequence:
    """The whole conversation as tokens, with the assistant messages marked, cut from the left to
    ``context`` tokens."""
    tokenizer = ByteTokenizer()
    tokens, mask = [tokenizer.bos_id], [False]
    for message in trajectory.messages:
        head = f"<|{message.role}|>\n".encode()
        body = message.content.rstrip("\n").encode("utf-8")
        tokens += [*head, *body, *b"\n"]
        generated = message.role == "assistant"
        mask += [False] * len(head) + [generated] * len(body) + [False]
    if len(tokens) > context:
        tokens, mask = tokens[-context:], mask[-context:]
    return TokenSequence(tokens=tokens, mask=mask)


def _token_logprobs(model: Transformer, tokens: list[int], device: torch.device) -> torch.Tensor:
    """log p(token_t | tokens_<t) for t = 1 .. T-1."""
    ids = torch.tensor([tokens], device=device)
    logits = model(ids)[0, :-1].float()
    return torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None])[:, 0]


class TrainerPolicy:
    """The trainer's own model as the RL loop's policy (`trainer.rl.hf_policy.RLPolicy`): messages
    sampled from `rollout_model` (a full replica with several processes; else `model` itself),
    log-probs and the feedback KL from `model` (FSDP2-sharded with several processes)."""

    def __init__(self, model: Transformer, rollout_model: Transformer, *, max_new_tokens: int, temperature: float,
                 device: torch.device, distributed: bool) -> None:
        self.model = model
        self.rollout_model = rollout_model
        self.sampler = Policy(rollout_model, max_new_tokens=max_new_tokens, temperature=temperature, device=device)
        self.context = self.sampler.context
        self.device = device
        self.distributed = distributed

    def generate(self, messages: Sequence[Message], generator: torch.Generator) -> str:
        return self.sampler.generate(messages, generator)

    def sequence(self, trajectory: Trajectory) -> TokenSequence:
        return trajectory_sequence(trajectory, self.context)

    def token_logprobs(self, tokens: list[int]) -> torch.Tensor:
        return _token_logprobs(self.model, tokens, self.device)

    def feedback_kl(self, hinted: Sequence[tuple[Trajectory, Hint]], *, kind: KLKind, chunk_size: int) -> torch.Tensor:
        """The chunked feedback KL in one process; with shards, the full-logits one, on an empty
        example when this rank has no hints (the other ranks' forwards need this rank's)."""
        from trainer.rl.feedback import encode_feedback
        from trainer.rl.kl import feedback_kl_loss

        examples = [encode_feedback(trajectory, hint, max_len=self.context) for trajectory, hint in hinted]
        if self.distributed:
            return _full_logits_kl(self.model, examples or [_empty_example()], kind)
        return feedback_kl_loss(self.model, [e.student_tokens for e in examples], [e.teacher_tokens for e in examples],
                                [e.student_span for e in examples], [e.teacher_span for e in examples],
                                kind=kind, chunk_size=chunk_size)

    def after_update(self) -> None:
        """With shards, refresh the rollout replica from them."""
        if self.distributed:
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                get_model_state_dict,
            )

            full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True))
            self.rollout_model.load_state_dict(full)


def _merge(parts: Sequence[StepStats]) -> StepStats:
    """Every rank's step statistics as one: losses averaged (as FSDP2 averages the gradients), counts summed."""
    merged = StepStats(pg_loss=sum(p.pg_loss for p in parts) / len(parts), kl=sum(p.kl for p in parts) / len(parts))
    for part in parts:
        merged.rewards += part.rewards
        merged.turns += part.turns
        merged.hinted_turns += part.hinted_turns
        merged.tool_errors += part.tool_errors
        merged.flags.update(part.flags)
        merged.hints_by_detector.update(part.hints_by_detector)
        merged.statuses.update(part.statuses)
    return merged


@dataclass(kw_only=True, slots=True)
class StepStats:
    loss: float = 0.0
    pg_loss: float = 0.0
    kl: float = 0.0
    rewards: list[float] = field(default_factory=list)
    turns: int = 0
    hinted_turns: int = 0
    tool_errors: int = 0
    flags: Counter[str] = field(default_factory=Counter)
    hints_by_detector: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)


def _full_logits_kl(model: Transformer, examples: Sequence[Any], kind: str) -> torch.Tensor:
    """The feedback KL from the model's own forward (full logits of the hinted sequences): the path
    for a sharded model, whose root forward must run for its parameters to be gathered."""
    from trainer.rl.kl import _padded, naive_token_kl

    device = model.rope_cos.device
    with torch.no_grad():
        teacher = model(_padded([e.teacher_tokens for e in examples]).to(device)).float()
    student = model(_padded([e.student_tokens for e in examples]).to(device)).float()
    rows_s = torch.cat([student[i, a - 1:b - 1] for i, (a, b) in enumerate(e.student_span for e in examples)])
    rows_t = torch.cat([teacher[i, a - 1:b - 1] for i, (a, b) in enumerate(e.teacher_span for e in examples)])
    return naive_token_kl(rows_s, rows_t, kind=kind).mean()  # type: ignore[arg-type]


def _empty_example() -> Any:
    """A hinted turn whose teacher and student are the same sequence: its KL is 0. A rank without
    hints runs it so that every rank makes the same forward passes."""
    from trainer.rl.feedback import FeedbackExample, Hint

    tokenizer = ByteTokenizer()
    tokens = torch.tensor([tokenizer.bos_id, *b"{}", tokenizer.eos_id])
    return FeedbackExample(hint=Hint(turn=0, text="", detector="none"), student_tokens=tokens, teacher_tokens=tokens,
                           student_span=(1, 4), teacher_span=(1, 4))


def rl_train(recipe: Recipe) -> None:
    """The RL mode: from the latest checkpoint under output_dir if there is one."""
    import torch.distributed as dist

    from taskforge import SandboxLimits, open_backend
    from trainer.checkpoint import Checkpointer, TrainerState
    from trainer.rl.curriculum import Curriculum
    from trainer.rl.env import CodingEnv
    from trainer.rl.episodes import load_episodes, split_by_repository
    from trainer.rl.feedback import DETECTORS, detect_all, make_detector
    from trainer.rl.monitor import as_hints, flag_counts, monitor
    from trainer.runtime import RunLog, build_model, build_optimizer, set_learning_rate

    config: RLConfig = recipe.rl  # type: ignore[assignment]
    dims = recipe.parallel
    distributed = dims.world_size > 1
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    if config.tasks_per_step % world:
        raise ValueError(f"rl.tasks_per_step ({config.tasks_per_step}) must divide by the world size ({world})")
    device = torch.device("cuda", torch.cuda.current_device()) if recipe.launch.device == "cuda" else torch.device("cpu")
    out = Path(recipe.output_dir)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
    from trainer.runtime import Runtime
    runtime = Runtime(rank=rank, world_size=world, device=device, out=out)

    episodes = load_episodes(config.tasks)
    train_set, validation = split_by_repository(episodes, config.validation_fraction, seed=recipe.seed)
    if not train_set:
        raise ValueError(f"no training tasks in {config.tasks}")
    by_id = {e.instance_id: e for e in train_set}
    curriculum = Curriculum(sorted(by_id), low=config.curriculum_low, high=config.curriculum_high,
                            window=config.curriculum_window, seed=recipe.seed)

    policy: RLPolicy
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    if config.policy == "hf":
        from trainer.optim.hf_muon import build_hf_optimizer
        from trainer.rl.hf_policy import load_hf_policy

        hf_policy = load_hf_policy(config, seed=recipe.seed, device=device)
        policy, model = hf_policy, hf_policy.model
        optimizer = build_hf_optimizer(recipe.optimizer, model)
        torch.manual_seed(recipe.seed * 1_000_003 + rank)
    else:
        meshes = dims.build_meshes(device.type) if distributed else None
        trainer_model = build_model(recipe.model, seed=recipe.seed, device=device,
                                    dims=dims if distributed else None, meshes=meshes)
        optimizer = build_optimizer(recipe.optimizer, trainer_model, distributed=distributed)
        torch.manual_seed(recipe.seed * 1_000_003 + rank)
        # The rollouts sample from a full replica; with one process, the model itself.
        rollout_model = build_model(recipe.model, seed=recipe.seed, device=device) if distributed else trainer_model
        policy = TrainerPolicy(trainer_model, rollout_model, max_new_tokens=config.max_new_tokens,
                               temperature=config.temperature, device=device, distributed=distributed)
        model = trainer_model
    base_lrs = [group["lr"] for group in optimizer.param_groups]

    checkpointer = Checkpointer(out / "checkpoints", recipe.checkpoint)
    step = 0
    latest = checkpointer.latest_step()
    if latest is not None:
        restored = checkpointer.load(latest, model, optimizer, like=TrainerState(step=0, data={"curriculum": ""}))
        step = restored.step
        curriculum.load_state_dict(json.loads(restored.data["curriculum"]))
    policy.after_update()
    log = RunLog(recipe, runtime, resumed_from=latest, step=step, tensorboard=config.tensorboard)

    detectors = [make_detector(name, **({"max_chars": config.overlong_chars} if name == "overlong" else {}))
                 for name in DETECTORS]
    backend = open_backend("docker")
    limits = SandboxLimits.load(memory_mb=config.memory_mb)
    scorer: Any = None
    client: Any = None
    if config.reward_server:
        import os

        from taskforge import RewardClient

        client = RewardClient(config.reward_server, api_key=os.environ.get(config.reward_api_key_env) or None)
    else:
        from taskforge import Scorer

        scorer = Scorer(backend=backend, limits=limits, timeout_s=config.test_timeout_s,
                        concurrency=config.scorer_concurrency, mode=config.reward_mode)  # type: ignore[arg-type]
    last = recipe.train.stop_at_step or recipe.train.steps
    try:
        while step < last:
            step += 1
            started = time.perf_counter()
            set_learning_rate(optimizer, base_lrs, step=step, warmup_steps=recipe.optimizer.warmup_steps)
            generator = torch.Generator().manual_seed((recipe.seed * 1_000_003 + step) * 131 + rank)
            chosen = curriculum.sample(config.tasks_per_step)  # the same on every rank
            trajectories: list[Trajectory] = []
            results: list[tuple[str, list[float]]] = []
            for instance_id in chosen[rank::world]:
                for rollout in range(config.rollouts_per_task):
                    env = CodingEnv(by_id[instance_id].task, backend=backend, scorer=scorer, reward_client=client,
                                    limits=limits, max_turns=config.max_turns,
                                    max_observation_chars=config.max_observation_chars,
                                    test_timeout_s=config.test_timeout_s,
                                    candidate_id=f"step{step}-rollout{rollout}")
                    try:
                        env.reset()
                        done = False
                        while not done:
                            _, done = env.step(policy.generate(env.trajectory.messages, generator))
                    finally:
                        env.close()
                    trajectories.append(env.trajectory)
                results.append((instance_id, [t.reward for t in trajectories[-config.rollouts_per_task:]]))
            if distributed:
                gathered: list[Any] = [None] * world
                dist.all_gather_object(gathered, results)
                results = [item for part in gathered for item in part]
            for instance_id, rewards in results:
                curriculum.update(instance_id, rewards)

            stats = StepStats(rewards=[t.reward for t in trajectories])
            advantages = grpo_advantages(stats.rewards, config.rollouts_per_task)
            sequences = [policy.sequence(t) for t in trajectories]
            with torch.no_grad():
                old = [policy.token_logprobs(s.tokens) for s in sequences]
            hints = []
            for trajectory in trajectories:
                flags = monitor(trajectory)
                stats.flags.update(flag_counts(flags))
                found = detect_all(trajectory, detectors, extra=as_hints(flags))
                stats.turns += len(trajectory.turns)
                stats.tool_errors += sum(1 for t in trajectory.turns if t.error)
                stats.hinted_turns += len({h.turn for h in found})
                stats.hints_by_detector.update(h.detector for h in found)
                stats.statuses[trajectory.reward_status or "none"] += 1
                hints += [(trajectory, hint) for hint in found]

            generated = sum(sum(s.mask[1:]) for s in sequences) or 1
            for _ in range(config.ppo_epochs):
                optimizer.zero_grad(set_to_none=True)
                pg_total = torch.zeros((), device=device)
                for sequence, before, advantage in zip(sequences, old, advantages, strict=True):
                    mask = torch.tensor(sequence.mask[1:], device=device)
                    if not distributed and (not mask.any() or advantage == 0):
                        continue  # nothing to learn; with shards every rank runs every forward
                    now = policy.token_logprobs(sequence.tokens)
                    ratio = torch.exp(now - before)
                    clipped = torch.clamp(ratio, 1 - config.clip_eps, 1 + config.clip_eps)
                    objective = torch.minimum(ratio * advantage, clipped * advantage)
                    term = -(objective * mask).sum() / generated
                    term.backward()  # type: ignore[no-untyped-call]
                    pg_total += term.detach()
                kl_total = torch.zeros((), device=device)
                any_hints = torch.tensor([len(hints)], device=device)
                if distributed:
                    dist.all_reduce(any_hints, op=dist.ReduceOp.MAX)
                if int(any_hints):
                    weight = config.kl_coef if hints else 0.0
                    kl = policy.feedback_kl(hints, kind=config.kl_kind,  # type: ignore[arg-type]
                                            chunk_size=config.kl_chunk_size)
                    (weight * kl).backward()  # type: ignore[no-untyped-call]
                    kl_total = kl.detach() if hints else kl_total
                optimizer.step()
            policy.after_update()
            stats.pg_loss, stats.kl = float(pg_total), float(kl_total)
            if distributed:
                parts: list[Any] = [None] * world
                dist.all_gather_object(parts, stats)
                stats = _merge(parts)
            stats.loss = stats.pg_loss + config.kl_coef * stats.kl
            if not math.isfinite(stats.loss):
                raise FloatingPointError(f"step {step}: the loss is {stats.loss}")
            line = {
                "step": step, "loss": stats.loss, "pg_loss": stats.pg_loss, "kl": stats.kl,
                "reward_mean": sum(stats.rewards) / len(stats.rewards), "rewards": stats.rewards,
                "hint_fraction": stats.hinted_turns / max(1, stats.turns),
                "tool_error_rate": stats.tool_errors / max(1, stats.turns), "turns": stats.turns,
                "hints": dict(stats.hints_by_detector), "monitor_flags": dict(stats.flags),
                "reward_status": dict(stats.statuses), "tasks": chosen,
                "solve_rates": curriculum.report(), "lr": optimizer.param_groups[0]["lr"],
                "step_s": time.perf_counter() - started, "validation_tasks": len(validation),
            }
            log.write(line)
            log.scalars("rl", line, ("loss", "pg_loss", "kl", "reward_mean", "hint_fraction", "tool_error_rate"))
            if step % recipe.checkpoint.every == 0 or step == last:
                checkpointer.save(TrainerState(step=step, data={"curriculum": json.dumps(curriculum.state_dict())}),
                                  model, optimizer)
    finally:
        log.close()
        if scorer is not None:
            scorer.close()

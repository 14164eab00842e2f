"""RL on mined tasks, with targeted textual-feedback KL (``mode = "rl"`` in a training recipe).

`rl_train` sets up the run (`trainer.runtime`: device, seeds, model and optimizer, resume, run
record and metrics, as pretraining does) and then reads, step by step:

1. **Tasks.** The curriculum (``trainer.rl.curriculum``) picks ``tasks_per_step`` training tasks,
   mostly ones whose recent solve rate is inside the band; episodes come from task shards through
   taskforge's reader, split from validation by repository (``trainer.rl.episodes``).
2. **collect.** ``rollouts_per_task`` episodes per task in the coding environment
   (``trainer.rl.env``: a sandbox with the task's start state, tools in the chat format of
   ``trainer.rl.chat``). The policy writes each assistant message; the episode ends on ``submit``
   or when its turns run out, and the scorer (in-process, or the reward server through its client)
   gives the reward. The curriculum hears every task's rewards.
3. **feedback.** The detectors (``trainer.rl.feedback``) and the reward-hacking monitor
   (``trainer.rl.monitor``) read every trajectory and emit (turn, hint) pairs.
4. **update.** A clipped group-relative policy gradient over every assistant token of every
   trajectory (advantage: the reward minus its group's mean, over the group's std), plus
   ``[rl.kl] coef`` times the feedback KL: at each hinted turn, the policy on the context with the
   hint (the teacher, no gradient) against the policy on the original context (the student), over
   that turn's tokens only (``trainer.rl.kl``, chunked over the vocabulary); then the recipe's
   optimizer (Muon per head and per expert, AdamW for the rest).
5. **log.** Metrics (reward, KL, share of turns with hints, tool error rate, monitor flags, solve
   rates) to ``metrics.jsonl`` and, with ``tensorboard = true``, to TensorBoard; a checkpoint every
   ``checkpoint.every`` steps (model, optimizer, RNG, curriculum), which a later launch resumes.

The policy (``[rl.policy]``, behind ``trainer.rl.policy.RLPolicy``) is the trainer's own model with
the byte tokenizer (``kind = "trainer"``: the model config's heads and experts are what Muon's
per-head and per-expert grouping reads), or a Hugging Face causal LM with its tokenizer (``"hf"``,
FSDP2-sharded over several processes: ``trainer.rl.hf_policy``, with Muon's grouping read from the Hugging Face config by
``trainer.optim.hf_muon``), which samples through ``model.generate`` or, with ``[rl.generator]
kind = "openai"``, through an OpenAI-compatible completions server.

Several processes (``launch.nproc_per_node > 1``, torchrun) share a step: every rank keeps the
same curriculum and draws the same tasks, then runs the rollouts of its own share
(``tasks_per_step`` must divide by the world size). The loss runs on the sharded model (the
recipe's dense and expert meshes, sharded Muon) with the same number of forward passes on every
rank (`trainer.rl.policy.TrainerPolicy`), and FSDP2 averages the gradients. Rewards are gathered
so the curricula stay identical.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Self

import torch
import torch.distributed as dist

from taskforge import read_tasks
from trainer.checkpoint import Checkpointer, TrainerState
from trainer.rl.curriculum import Curriculum
from trainer.rl.env import CodingEnv
from trainer.rl.episodes import load_episodes, split_by_repository
from trainer.rl.feedback import DETECTORS, Detector, Hint, detect_all, make_detector
from trainer.rl.gold import GoldReplay
from trainer.rl.growth import TaskGrowth
from trainer.rl.monitor import as_hints, flag_counts, monitor
from trainer.rl.policy import RLPolicy, TrainerPolicy
from trainer.runtime import (
    RunLog,
    Runtime,
    build_model,
    build_optimizer,
    checkpoint_due,
    resume,
    seed_rank_rng,
    set_learning_rate,
)

if TYPE_CHECKING:
    from taskforge import RewardClient, Scorer, Task
    from trainer.recipe import Recipe
    from trainer.rl.chat import Trajectory
    from trainer.rl.config import RLConfig

__all__ = ["EpisodeRunner", "StepStats", "build_policy", "collect", "feedback", "grow", "grpo_advantages", "log_step",
           "rl_train", "update"]

SCALARS = ("loss", "pg_loss", "kl", "reward_mean", "hint_fraction", "tool_error_rate")
"""Metrics that also go to TensorBoard (as rl/<name>)."""


def rl_train(recipe: Recipe) -> None:
    """The RL mode: from the latest checkpoint under output_dir if there is one."""
    config: RLConfig = recipe.rl  # type: ignore[assignment]
    runtime = Runtime.start(recipe)

    episodes = load_episodes(config.tasks)
    train_set, validation = split_by_repository(episodes, config.validation_fraction, seed=recipe.seed)
    if not train_set:
        raise ValueError(f"no training tasks in {config.tasks}")
    tasks = {e.instance_id: e.task for e in train_set}
    curriculum = Curriculum(sorted(tasks), low=config.curriculum.low, high=config.curriculum.high,
                            window=config.curriculum.window, seed=recipe.seed)
    held_out = {e.repo for e in validation}
    growth = TaskGrowth(config=config.curriculum, targets=config.tasks)

    policy, model, optimizer = build_policy(recipe, runtime)
    # Taken before a checkpoint overwrites the groups' lr with a possibly warmed-up value.
    base_lrs = [group["lr"] for group in optimizer.param_groups]
    checkpointer = Checkpointer(runtime.out / "checkpoints", recipe.checkpoint)
    latest, state = resume(checkpointer, model, optimizer,
                           like=TrainerState(step=0, data={"curriculum": "", "growth": "{}"}))
    step = state.step
    if latest is not None:
        curriculum.load_state_dict(json.loads(state.data["curriculum"]))
        growth.load_state_dict(json.loads(state.data.get("growth") or "{}"))
    policy.after_update()

    detectors = [make_detector(name, **({"max_chars": config.overlong_chars} if name == "overlong" else {}))
                 for name in DETECTORS]
    last = recipe.train.last_step
    with (RunLog(recipe, runtime, resumed_from=latest, step=step, tensorboard=config.tensorboard) as log,
          EpisodeRunner(config) as runner):
        while step < last:
            step += 1
            started = time.perf_counter()
            set_learning_rate(optimizer, base_lrs, step=step, warmup_steps=recipe.optimizer.warmup_steps)
            chosen = curriculum.sample(config.tasks_per_step)  # the same on every rank
            trajectories, task_rewards = collect(policy, runner, [tasks[i] for i in chosen], step=step,
                                                 seed=recipe.seed, runtime=runtime)
            for instance_id, rewards in task_rewards:
                curriculum.update(instance_id, rewards)
            asked, added = grow(growth, curriculum, tasks, held_out=held_out, step=step, runtime=runtime)
            hints, stats = feedback(trajectories, detectors)
            stats.requests, stats.new_tasks = asked, added
            stats.pg_loss, stats.kl = update(policy, optimizer, trajectories, hints, config=config, runtime=runtime)
            log_step(log, stats, runtime=runtime, kl_coef=config.kl.coef, step=step, tasks=chosen,
                     solve_rates=curriculum.report(), lr=optimizer.param_groups[0]["lr"], started=started,
                     validation_tasks=len(validation))
            if checkpoint_due(step, every=recipe.checkpoint.every, last=last):
                checkpointer.save(TrainerState(step=step, data={"curriculum": json.dumps(curriculum.state_dict()),
                                                                 "growth": json.dumps(growth.state_dict())}),
                                  model, optimizer)


def grow(growth: TaskGrowth, curriculum: Curriculum, tasks: dict[str, Task], *, held_out: set[str], step: int,
         runtime: Runtime) -> tuple[list[str], list[str]]:
    """Ask for harder tasks of saturated repositories, and take in the tasks the folders gained
    (`trainer.rl.growth`): rank 0 decides, every rank adds the same tasks. Returns (request ids,
    instance ids added)."""
    asked: list[str] = []
    new_ids: list[str] = []
    if runtime.rank == 0:
        asked = [r.request_id for r in growth.ask(curriculum, tasks, step=step)]
        new_ids = [t.instance_id for t in growth.refresh(step=step, known=tasks) if t.repo not in held_out]
    if runtime.distributed:
        shared: list[Any] = [asked, new_ids]
        dist.broadcast_object_list(shared, src=0)
        asked, new_ids = shared
    if new_ids:
        wanted = set(new_ids)
        for target in growth.targets:
            for task in read_tasks(target):
                if task.instance_id in wanted:
                    tasks[task.instance_id] = task
        curriculum.add(i for i in new_ids if i in tasks)
    return asked, new_ids


def build_policy(recipe: Recipe, runtime: Runtime) -> tuple[RLPolicy, torch.nn.Module, torch.optim.Optimizer]:
    """The policy of ``[rl.policy]``, the module it trains and that module's optimizer; this rank's
    RNG is seeded once the trained weights exist (as in pretraining)."""
    config: RLConfig = recipe.rl  # type: ignore[assignment]
    device, distributed = runtime.device, runtime.distributed
    optimizer: torch.optim.Optimizer
    if config.policy.kind == "hf":
        from trainer.optim.hf_muon import build_hf_optimizer
        from trainer.rl.hf_policy import load_hf_policy

        dims = recipe.parallel
        hf_policy = load_hf_policy(config.policy, config.generator, seed=recipe.seed, device=device,
                                   dims=dims if distributed else None,
                                   meshes=dims.build_meshes(device.type) if distributed else None)
        optimizer = build_hf_optimizer(recipe.optimizer, hf_policy.model, distributed=distributed)
        seed_rank_rng(recipe.seed, runtime.rank)
        return hf_policy, hf_policy.model, optimizer
    dims = recipe.parallel
    meshes = dims.build_meshes(device.type) if distributed else None
    model = build_model(recipe.model, seed=recipe.seed, device=device, dims=dims if distributed else None,
                        meshes=meshes)
    optimizer = build_optimizer(recipe.optimizer, model, distributed=distributed)
    seed_rank_rng(recipe.seed, runtime.rank)
    # The rollouts sample from a full replica; with one process, the model itself.
    rollout_model = build_model(recipe.model, seed=recipe.seed, device=device) if distributed else model
    policy = TrainerPolicy(model, rollout_model, max_new_tokens=config.generator.max_new_tokens,
                           temperature=config.generator.temperature, device=device, distributed=distributed)
    return policy, model, optimizer


class EpisodeRunner:
    """Runs episodes of the coding environment (`trainer.rl.env.CodingEnv`). The setup is done once:
    the sandbox backend and limits, and the reward (the in-process scorer, or the reward server's
    client); `close` stops the scorer."""

    def __init__(self, config: RLConfig) -> None:
        from taskforge import RewardClient, SandboxLimits, Scorer, open_backend

        self.config = config
        self.gold = GoldReplay() if config.generator.kind == "gold" else None
        """``[rl.generator] kind = "gold"``: the episodes replay the gold patches (`trainer.rl.gold`)."""
        self.backend = open_backend("docker")
        self.limits = SandboxLimits.load(memory_mb=config.memory_mb)
        self.scorer: Scorer | None = None
        self.client: RewardClient | None = None
        reward = config.reward
        if reward.server:
            import os

            self.client = RewardClient(reward.server, api_key=os.environ.get(reward.api_key_env) or None)
        else:
            self.scorer = Scorer(backend=self.backend, limits=self.limits, timeout_s=config.test_timeout_s,
                                 concurrency=reward.concurrency, mode=reward.mode)  # type: ignore[arg-type]

    def run(self, task: Task, policy: RLPolicy, generator: torch.Generator, *, candidate_id: str) -> Trajectory:
        """One episode of `task`, every assistant message from `policy`; the scored trajectory."""
        env = CodingEnv(task, backend=self.backend, scorer=self.scorer, reward_client=self.client,
                        limits=self.limits, max_turns=self.config.max_turns,
                        max_observation_chars=self.config.max_observation_chars,
                        test_timeout_s=self.config.test_timeout_s, candidate_id=candidate_id)
        try:
            env.reset()
            done = False
            turn = 0
            while not done:
                message = (self.gold.message(task, turn) if self.gold is not None
                           else policy.generate(env.trajectory.messages, generator))
                ending = "" if self.gold is not None else getattr(policy, "last_ending", "")
                _, done = env.step(message)
                if env.trajectory.turns:
                    env.trajectory.turns[-1].ending = ending
                turn += 1
        finally:
            env.close()
        return env.trajectory

    def close(self) -> None:
        if self.scorer is not None:
            self.scorer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def collect(policy: RLPolicy, runner: EpisodeRunner, chosen: Sequence[Task], *, step: int, seed: int,
            runtime: Runtime) -> tuple[list[Trajectory], list[tuple[str, list[float]]]]:
    """This rank's share of the step's episodes (``rollouts_per_task`` per task, consecutive), and
    every rank's (task, rewards): what the curriculum hears, the same on every rank."""
    rank, world = runtime.rank, runtime.world_size
    rollouts = runner.config.rollouts_per_task
    generator = torch.Generator().manual_seed((seed * 1_000_003 + step) * 131 + rank)
    trajectories: list[Trajectory] = []
    task_rewards: list[tuple[str, list[float]]] = []
    for task in chosen[rank::world]:
        for rollout in range(rollouts):
            trajectories.append(runner.run(task, policy, generator, candidate_id=f"step{step}-rollout{rollout}"))
        task_rewards.append((task.instance_id, [t.reward for t in trajectories[-rollouts:]]))
    if runtime.distributed:
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, task_rewards)
        task_rewards = [item for part in gathered for item in part]
    return trajectories, task_rewards


@dataclass(kw_only=True, slots=True)
class StepStats:
    """What one step measured, on one rank until `merge` joins the ranks'."""

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
    requests: list[str] = field(default_factory=list)
    """Requests for harder tasks made this step (the same on every rank)."""
    new_tasks: list[str] = field(default_factory=list)
    """Tasks taken in this step (the same on every rank)."""

    @classmethod
    def merge(cls, parts: Sequence[StepStats]) -> StepStats:
        """Every rank's statistics as one: losses averaged (as FSDP2 averages the gradients), counts summed."""
        merged = cls(pg_loss=sum(p.pg_loss for p in parts) / len(parts), kl=sum(p.kl for p in parts) / len(parts),
                     requests=list(parts[0].requests), new_tasks=list(parts[0].new_tasks))
        for part in parts:
            merged.rewards += part.rewards
            merged.turns += part.turns
            merged.hinted_turns += part.hinted_turns
            merged.tool_errors += part.tool_errors
            merged.flags.update(part.flags)
            merged.hints_by_detector.update(part.hints_by_detector)
            merged.statuses.update(part.statuses)
        return merged


def feedback(trajectories: Sequence[Trajectory],
             detectors: Sequence[Detector]) -> tuple[list[tuple[Trajectory, Hint]], StepStats]:
    """The hinted turns of every trajectory (the detectors' hints and the monitor's, merged per
    turn), and this rank's statistics of the rollouts: rewards, turns, tool errors, hints, flags."""
    stats = StepStats(rewards=[t.reward for t in trajectories])
    hints: list[tuple[Trajectory, Hint]] = []
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
    return hints, stats


def grpo_advantages(rewards: Sequence[float], group_size: int, eps: float = 1e-6) -> list[float]:
    """Each reward minus its group's mean, over the group's std (groups are consecutive)."""
    out: list[float] = []
    for start in range(0, len(rewards), group_size):
        group = list(rewards[start:start + group_size])
        mean = sum(group) / len(group)
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / len(group))
        out += [(r - mean) / (std + eps) for r in group]
    return out


def update(policy: RLPolicy, optimizer: torch.optim.Optimizer, trajectories: Sequence[Trajectory],
           hints: Sequence[tuple[Trajectory, Hint]], *, config: RLConfig, runtime: Runtime) -> tuple[float, float]:
    """``ppo_epochs`` optimizer steps on the clipped group-relative policy gradient plus ``kl.coef``
    times the feedback KL, then `policy.after_update`; (policy-gradient loss, KL) of the last epoch
    on this rank."""
    device, distributed = runtime.device, runtime.distributed
    world = runtime.world_size if distributed else 1
    advantages = grpo_advantages([t.reward for t in trajectories], config.rollouts_per_task)
    sequences = [policy.sequence(t) for t in trajectories]
    with torch.no_grad():
        old = [policy.token_logprobs(s.tokens, s.targets) for s in sequences]
    # The objective is the one a single process computes over every rank's trajectories: the
    # policy gradient summed over all generated tokens over their global count, plus λ times the
    # KL summed over all hinted target tokens over their global count. FSDP2 averages the ranks'
    # gradients (divides by the world size), so each rank's terms carry `world` over the global
    # counts; with hints on some ranks only, the others add nothing and the weight stays λ.
    hinted_local = policy.feedback_tokens(hints) if hints else 0
    counts = torch.tensor([sum(sum(s.mask[1:]) for s in sequences), hinted_local], dtype=torch.float64, device=device)
    if distributed:
        dist.all_reduce(counts)
    pg_scale = world / max(float(counts[0]), 1.0)
    kl_weight = config.kl.coef * world * hinted_local / float(counts[1]) if hinted_local else 0.0
    pg_total = kl_total = torch.zeros((), device=device)
    for _ in range(config.ppo_epochs):
        optimizer.zero_grad(set_to_none=True)
        pg_total = torch.zeros((), device=device)
        for sequence, before, advantage in zip(sequences, old, advantages, strict=True):
            mask = torch.tensor(sequence.mask[1:], device=device)
            if not distributed and (not mask.any() or advantage == 0):
                continue  # nothing to learn; with shards every rank runs every forward
            now = policy.token_logprobs(sequence.tokens, sequence.targets)
            ratio = torch.exp(now - before)
            clipped = torch.clamp(ratio, 1 - config.clip_eps, 1 + config.clip_eps)
            objective = torch.minimum(ratio * advantage, clipped * advantage)
            term = -(objective * mask).sum() * pg_scale
            term.backward()  # type: ignore[no-untyped-call]
            pg_total += term.detach()
        kl_total = torch.zeros((), device=device)
        if float(counts[1]) > 0:  # some rank has hints: every rank runs the KL's forward passes
            kl = policy.feedback_kl(hints, kind=config.kl.kind, chunk_size=config.kl.chunk_size)  # type: ignore[arg-type]
            (kl_weight * kl).backward()  # type: ignore[no-untyped-call]
            # Averaged over the ranks as the losses are, this is the global mean.
            kl_total = kl.detach() * (world * hinted_local / float(counts[1])) if hinted_local else kl_total
        optimizer.step()
    policy.after_update()
    return float(pg_total), float(kl_total)


def log_step(log: RunLog, stats: StepStats, *, runtime: Runtime, kl_coef: float, step: int, tasks: list[str],
             solve_rates: dict[str, Any], lr: float, started: float, validation_tasks: int) -> None:
    """Join the ranks' statistics, check the loss, and write the step's metrics line (rank 0)."""
    if runtime.distributed:
        parts: list[Any] = [None] * runtime.world_size
        dist.all_gather_object(parts, stats)
        stats = StepStats.merge(parts)
    stats.loss = stats.pg_loss + kl_coef * stats.kl
    if not math.isfinite(stats.loss):
        raise FloatingPointError(f"step {step}: the loss is {stats.loss}")
    line = {
        "step": step, "loss": stats.loss, "pg_loss": stats.pg_loss, "kl": stats.kl,
        "reward_mean": sum(stats.rewards) / len(stats.rewards), "rewards": stats.rewards,
        "hint_fraction": stats.hinted_turns / max(1, stats.turns),
        "tool_error_rate": stats.tool_errors / max(1, stats.turns), "turns": stats.turns,
        "hints": dict(stats.hints_by_detector), "monitor_flags": dict(stats.flags),
        "reward_status": dict(stats.statuses), "tasks": tasks,
        "solve_rates": solve_rates, "lr": lr,
        "step_s": time.perf_counter() - started, "validation_tasks": validation_tasks,
        "requests": stats.requests, "new_tasks": stats.new_tasks,
    }
    log.write(line)
    log.scalars("rl", line, SCALARS)

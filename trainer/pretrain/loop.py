"""The training loop of continued pretraining: next-token loss on a packed code corpus, dual-mesh
HSDP, Muon + AdamW, checkpoints that resume exactly, and per-step metrics.

One process runs `pretrain(recipe)`: a torchrun worker (world_size > 1, the process group comes
from torchrun's environment) or a plain process (world_size 1, no process group, no FSDP). Both use
the same `train_step`, which is also what tests/trainer/test_dual_mesh.py compares across layouts.
The run's device, seeds, model, optimizer, run record, metrics and checkpoint cadence come from
`trainer.runtime`, as RL's do.

Shape legend: B sequences, T positions, V vocabulary.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
import torch.nn.functional as F

from trainer.checkpoint import Checkpointer, TrainerState
from trainer.pretrain.data import (
    ByteTokenizer,
    PackedSequences,
    local_slice,
    write_code_corpus,
)
from trainer.runtime import (
    DTYPES,
    RunLog,
    Runtime,
    build_model,
    build_optimizer,
    checkpoint_due,
    memory_mb,
    resume,
    seed_rank_rng,
    set_learning_rate,
    synchronize,
)

if TYPE_CHECKING:
    from trainer.model import Transformer
    from trainer.recipe import Recipe

__all__ = ["StepResult", "pretrain", "train_step"]


@dataclass(kw_only=True, slots=True)
class StepResult:
    """What one optimizer step measured."""

    loss: float
    """Mean next-token cross entropy over the global batch (before the update)."""
    aux_loss: float
    """Load-balancing loss averaged over ranks."""
    optimizer_s: float
    """Wall time of optimizer.step()."""


def train_step(
    model: Transformer,
    optimizer: torch.optim.Optimizer,
    inputs_BT: torch.Tensor,
    targets_BT: torch.Tensor,
    *,
    global_tokens: int,
    aux_loss_coef: float,
) -> StepResult:
    """Forward, loss, backward and optimizer step on this rank's share of a global batch; the
    gradients of the step stay in `.grad` until the next one.

    FSDP2 averages gradients over the world (both meshes span it), so the rank's summed token loss
    is scaled by world_size / global_tokens: the averaged gradient is then the gradient of the mean
    loss over the global batch, as in a single process holding the whole batch.
    """
    world_size = dist.get_world_size() if dist.is_initialized() else 1
    # Gradients are cleared here rather than after the step, so that they can be inspected
    # between steps (tests compare them across layouts).
    optimizer.zero_grad(set_to_none=True)
    logits_BTV = model(inputs_BT)
    loss_sum = F.cross_entropy(logits_BTV.flatten(0, 1).float(), targets_BT.flatten(), reduction="sum")
    loss = loss_sum * (world_size / global_tokens)
    aux = model.aux_loss()
    if aux_loss_coef:
        loss = loss + aux_loss_coef * aux
    loss.backward()  # type: ignore[no-untyped-call]

    synchronize(inputs_BT.device)
    start = time.perf_counter()
    optimizer.step()
    synchronize(inputs_BT.device)
    optimizer_s = time.perf_counter() - start

    reported = torch.stack([loss_sum.detach(), aux.detach().float()])
    if world_size > 1:
        dist.all_reduce(reported)
    return StepResult(loss=reported[0].item() / global_tokens, aux_loss=reported[1].item() / world_size,
                      optimizer_s=optimizer_s)


def pretrain(recipe: Recipe) -> None:
    """Continued pretraining, from the latest checkpoint under output_dir if there is one."""
    if recipe.data is None:
        raise ValueError("mode pretrain needs a [data] section")
    data_config, dims = recipe.data, recipe.parallel
    runtime = Runtime.start(recipe)
    device = runtime.device

    if runtime.rank == 0:
        first = Path(data_config.parquet[0])
        if data_config.build_from and not first.exists():
            write_code_corpus([Path(p) for p in data_config.build_from], first)
    if runtime.distributed:
        dist.barrier()

    data = PackedSequences(data_config, ByteTokenizer(), seed=recipe.seed)
    meshes = dims.build_meshes(device.type) if runtime.distributed else None
    compute_dtype = DTYPES[recipe.train.dtype]
    model = build_model(recipe.model, seed=recipe.seed, device=device, dims=dims, meshes=meshes,
                        param_dtype=None if compute_dtype == torch.float32 else compute_dtype)
    optimizer = build_optimizer(recipe.optimizer, model, distributed=runtime.distributed)
    # Taken before a checkpoint overwrites the groups' lr with a possibly warmed-up value.
    base_lrs = [group["lr"] for group in optimizer.param_groups]
    seed_rank_rng(recipe.seed, runtime.rank)

    checkpointer = Checkpointer(runtime.out / "checkpoints", recipe.checkpoint)
    latest, state = resume(checkpointer, model, optimizer, like=TrainerState(step=0, data=data.state_dict()))
    step = state.step
    if latest is not None:
        data.load_state_dict(state.data)

    dp_rank, cp_rank = (meshes.dp_rank, meshes.cp_rank) if meshes is not None else (0, 0)
    global_tokens = data_config.global_batch * data_config.seq_len
    last = recipe.train.last_step
    with RunLog(recipe, runtime, resumed_from=latest, step=step) as log:
        while step < last:
            step += 1
            start = time.perf_counter()
            set_learning_rate(optimizer, base_lrs, step=step, warmup_steps=recipe.optimizer.warmup_steps)
            inputs_BT, targets_BT = local_slice(data.next_batch(), dp_rank=dp_rank, dp=dims.dp,
                                                cp_rank=cp_rank, cp=dims.cp)
            result = train_step(model, optimizer, inputs_BT.to(device), targets_BT.to(device),
                                global_tokens=global_tokens, aux_loss_coef=recipe.train.aux_loss_coef)
            step_s = time.perf_counter() - start
            memory = torch.tensor([memory_mb(device)], device=device)
            if runtime.distributed:
                dist.all_reduce(memory, op=dist.ReduceOp.MAX)
            log.write({"step": step, "loss": result.loss, "aux_loss": result.aux_loss,
                       "lr": optimizer.param_groups[0]["lr"], "tokens_per_s": global_tokens / step_s,
                       "step_s": step_s, "optimizer_step_s": result.optimizer_s, "memory_mb": memory.item(),
                       "memory_kind": "max_allocated" if device.type == "cuda" else "rss_rank_max"})
            if checkpoint_due(step, every=recipe.checkpoint.every, last=last):
                checkpointer.save(TrainerState(step=step, data=data.state_dict()), model, optimizer)

"""The training loop of continued pretraining: next-token loss on a packed code corpus, dual-mesh
HSDP, Muon + AdamW, checkpoints that resume exactly, and per-step metrics.

One process runs `run(recipe)`: a torchrun worker (world_size > 1, the process group comes from
torchrun's environment) or a plain process (world_size 1, no process group, no FSDP). Both use the
same `train_step`, which is also what tests/trainer/test_dual_mesh.py compares across layouts.

Output folder::

    run.json         resolved recipe, versions, seed, world size (rewritten by each launch)
    metrics.jsonl    one line per optimizer step (rank 0)
    checkpoints/     see trainer.checkpoint

Shape legend: B sequences, T positions, V vocabulary.
"""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from trainer.optim.muon_reference import AdamWConfig, MuonConfig, RoutingRule

if TYPE_CHECKING:
    from trainer.model import ModelConfig, Transformer
    from trainer.parallel_dims import Meshes, ParallelDims
    from trainer.recipe import Recipe

__all__ = [
    "ADAMW_ONLY_ROUTING",
    "OptimizerConfig",
    "StepResult",
    "TrainConfig",
    "build_model",
    "build_optimizer",
    "pretrain",
    "run",
    "set_learning_rate",
    "train_step",
]

_OPTIMIZERS = ("muon", "adamw")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}

ADAMW_ONLY_ROUTING: tuple[RoutingRule, ...] = (
    RoutingRule(pattern=r"(norm\.weight|\.bias)$", algorithm="adamw", weight_decay=0.0),
    RoutingRule(pattern=r"", algorithm="adamw"),
)
"""Routing of optimizer name "adamw": every parameter to AdamW, gains and biases without decay."""


@dataclass(kw_only=True, slots=True)
class OptimizerConfig:
    """Which optimizer, its hyper-parameters, and the learning-rate warmup."""

    name: str = "muon"
    """"muon": Muon per head and per expert, AdamW for embeddings, norms, router and head.
    "adamw": AdamW for everything."""
    warmup_steps: int = 0
    """The lr of every group rises linearly over this many steps, then stays constant."""
    muon: MuonConfig = field(default_factory=MuonConfig)
    """Hyper-parameters of the Muon groups."""
    adamw: AdamWConfig = field(default_factory=AdamWConfig)
    """Hyper-parameters of the AdamW groups."""

    def __post_init__(self) -> None:
        if self.name not in _OPTIMIZERS:
            raise ValueError(f"name must be one of {', '.join(_OPTIMIZERS)}, got {self.name!r}")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")


@dataclass(kw_only=True, slots=True)
class TrainConfig:
    """How long to train, in what precision, and with which loss terms."""

    steps: int
    """Optimizer steps of the whole run."""
    stop_at_step: int | None = None
    """Stop after this step (checkpointed), as if interrupted; a later launch resumes to `steps`."""
    dtype: str = "float32"
    """Compute dtype of parameters in forward/backward: "float32" or "bfloat16" (CUDA);
    sharded parameters, optimizer state and gradient reduction stay float32."""
    aux_loss_coef: float = 0.0
    """Weight of the MoE load-balancing loss. It is computed from each rank's own tokens, so with
    a weight above 0 a distributed step is not identical to a single-process step."""

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1, got {self.steps}")
        if self.stop_at_step is not None and not 1 <= self.stop_at_step <= self.steps:
            raise ValueError(f"stop_at_step must be in [1, steps={self.steps}], got {self.stop_at_step}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {self.dtype!r}")
        if self.aux_loss_coef < 0:
            raise ValueError(f"aux_loss_coef must be >= 0, got {self.aux_loss_coef}")


@dataclass(kw_only=True, slots=True)
class StepResult:
    """What one optimizer step measured."""

    loss: float
    """Mean next-token cross entropy over the global batch (before the update)."""
    aux_loss: float
    """Load-balancing loss averaged over ranks."""
    optimizer_s: float
    """Wall time of optimizer.step()."""


def build_model(
    config: ModelConfig,
    *,
    seed: int,
    device: torch.device,
    dims: ParallelDims | None = None,
    meshes: Meshes | None = None,
    param_dtype: torch.dtype | None = None,
) -> Transformer:
    """The model with weights from `seed`: plain without meshes, else built on the meta device,
    parallelized, materialized on `device` and initialized shard by shard. Either way the weights
    are the same numbers (`Transformer.init_weights` draws per parameter name)."""
    from trainer.model import Transformer
    from trainer.parallelize import parallelize

    if meshes is None or dims is None:
        model = Transformer(config).to(device)
        model.init_weights(seed)
        return model
    with torch.device("meta"):
        model = Transformer(config)
    parallelize(model, dims, meshes, param_dtype=param_dtype)
    model.to_empty(device=device)
    model.init_weights(seed)
    return model


def build_optimizer(config: OptimizerConfig, model: nn.Module, *, distributed: bool) -> torch.optim.Optimizer:
    """Muon + AdamW (`trainer.optim.muon_reference`; `trainer.optim.sharded_muon` on FSDP2-sharded models), or
    AdamW alone through the same class, so both names save and resume the same way."""
    from trainer.optim.muon_reference import MuonWithAdamW, build_muon_adamw
    from trainer.optim.sharded_muon import build_sharded_muon_adamw

    if config.name == "adamw":
        return MuonWithAdamW(model.named_parameters(), layouts={}, adamw=config.adamw,
                             routing=ADAMW_ONLY_ROUTING)
    if distributed:
        return build_sharded_muon_adamw(model, muon=config.muon, adamw=config.adamw)
    return build_muon_adamw(model, muon=config.muon, adamw=config.adamw)


def set_learning_rate(
    optimizer: torch.optim.Optimizer, base_lrs: list[float], *, step: int, warmup_steps: int
) -> None:
    """Set each group's lr for optimizer step `step` (1-based) from its recipe lr in `base_lrs`:
    linear warmup, then constant."""
    factor = min(1.0, step / warmup_steps) if warmup_steps else 1.0
    for group, base_lr in zip(optimizer.param_groups, base_lrs, strict=True):
        group["lr"] = base_lr * factor


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

    _synchronize(inputs_BT.device)
    start = time.perf_counter()
    optimizer.step()
    _synchronize(inputs_BT.device)
    optimizer_s = time.perf_counter() - start

    reported = torch.stack([loss_sum.detach(), aux.detach().float()])
    if world_size > 1:
        dist.all_reduce(reported)
    return StepResult(loss=reported[0].item() / global_tokens, aux_loss=reported[1].item() / world_size,
                      optimizer_s=optimizer_s)


def _synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so that wall time measures it (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _memory_mb(device: torch.device) -> float:
    """Peak allocated memory on CUDA, current resident set size on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version(), "torch": torch.__version__}
    for package in ("taskforge", "pyarrow", "numpy"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "not installed"
    return found


def _write_run_record(recipe: Recipe, out: Path, *, resumed_from: int | None) -> None:
    record = {
        "recipe": recipe.to_dict(),
        "seed": recipe.seed,
        "world_size": recipe.parallel.world_size,
        "resumed_from_step": resumed_from,
        "versions": _versions(),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    tmp = out / "run.json.tmp"
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(out / "run.json")


def _open_metrics(path: Path, *, keep_through_step: int) -> Any:
    """Append to the metrics file, first dropping lines past the checkpoint being resumed (a run
    that died after its last checkpoint logged steps that are about to be run again)."""
    if path.exists():
        kept = [line for line in path.read_text().splitlines()
                if line and json.loads(line)["step"] <= keep_through_step]
        path.write_text("".join(line + "\n" for line in kept))
    return open(path, "a", buffering=1)


def pretrain(recipe: Recipe) -> None:
    """Continued pretraining, from the latest checkpoint under output_dir if there is one."""
    from trainer.checkpoint import Checkpointer, TrainerState
    from trainer.pretrain.data import (
        ByteTokenizer,
        PackedSequences,
        local_slice,
        write_code_corpus,
    )

    dims = recipe.parallel
    distributed = dims.world_size > 1
    rank = dist.get_rank() if distributed else 0
    if recipe.launch.device == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    out = Path(recipe.output_dir)
    if recipe.data is None:
        raise ValueError("mode pretrain needs a [data] section")
    data_config = recipe.data

    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        first = Path(data_config.parquet[0])
        if data_config.build_from and not first.exists():
            write_code_corpus([Path(p) for p in data_config.build_from], first)
    if distributed:
        dist.barrier()

    data = PackedSequences(data_config, ByteTokenizer(), seed=recipe.seed)
    meshes = dims.build_meshes(device.type) if distributed else None
    compute_dtype = _DTYPES[recipe.train.dtype]
    model = build_model(recipe.model, seed=recipe.seed, device=device, dims=dims, meshes=meshes,
                        param_dtype=None if compute_dtype == torch.float32 else compute_dtype)
    optimizer = build_optimizer(recipe.optimizer, model, distributed=distributed)
    # Taken before a checkpoint overwrites the groups' lr with a possibly warmed-up value.
    base_lrs = [group["lr"] for group in optimizer.param_groups]
    torch.manual_seed(recipe.seed * 1_000_003 + rank)

    checkpointer = Checkpointer(out / "checkpoints", recipe.checkpoint)
    step = 0
    latest = checkpointer.latest_step()
    if latest is not None:
        restored = checkpointer.load(latest, model, optimizer,
                                     like=TrainerState(step=0, data=data.state_dict()))
        step = restored.step
        data.load_state_dict(restored.data)
    metrics = None
    if rank == 0:
        _write_run_record(recipe, out, resumed_from=latest)
        metrics = _open_metrics(out / "metrics.jsonl", keep_through_step=step)

    dp_rank, cp_rank = (meshes.dp_rank, meshes.cp_rank) if meshes is not None else (0, 0)
    global_tokens = data_config.global_batch * data_config.seq_len
    last = recipe.train.stop_at_step or recipe.train.steps
    try:
        while step < last:
            step += 1
            start = time.perf_counter()
            set_learning_rate(optimizer, base_lrs, step=step, warmup_steps=recipe.optimizer.warmup_steps)
            inputs_BT, targets_BT = local_slice(data.next_batch(), dp_rank=dp_rank, dp=dims.dp,
                                                cp_rank=cp_rank, cp=dims.cp)
            result = train_step(model, optimizer, inputs_BT.to(device), targets_BT.to(device),
                                global_tokens=global_tokens, aux_loss_coef=recipe.train.aux_loss_coef)
            step_s = time.perf_counter() - start
            memory = torch.tensor([_memory_mb(device)], device=device)
            if distributed:
                dist.all_reduce(memory, op=dist.ReduceOp.MAX)
            if metrics is not None:
                line = {"step": step, "loss": result.loss, "aux_loss": result.aux_loss,
                        "lr": optimizer.param_groups[0]["lr"], "tokens_per_s": global_tokens / step_s,
                        "step_s": step_s, "optimizer_step_s": result.optimizer_s,
                        "memory_mb": memory.item(),
                        "memory_kind": "max_allocated" if device.type == "cuda" else "rss_rank_max"}
                metrics.write(json.dumps(line) + "\n")
            if step % recipe.checkpoint.every == 0 or step == last:
                checkpointer.save(TrainerState(step=step, data=data.state_dict()), model, optimizer)
    finally:
        if metrics is not None:
            metrics.close()


def run(recipe: Recipe) -> None:
    """Run the recipe's mode in this process, inside torchrun's process group when world_size > 1."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != recipe.parallel.world_size:
        raise ValueError(
            f"the recipe needs {recipe.parallel.world_size} processes but WORLD_SIZE is {world};"
            " launch it with taskforge-train (or torchrun --nproc-per-node)"
        )
    distributed = world > 1
    if distributed:
        if recipe.launch.device == "cuda":
            # Before the process group, so that NCCL binds this rank to its own GPU.
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group(recipe.launch.backend)
    try:
        if recipe.mode == "pretrain":
            pretrain(recipe)
        elif recipe.mode == "rl":
            from trainer.rl.loop import rl_train

            rl_train(recipe)
        else:
            raise ValueError(f"mode {recipe.mode!r} has no trainer")
    finally:
        if distributed:
            dist.destroy_process_group()

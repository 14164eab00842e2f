"""What both training modes share at run time: the process group, this process's rank and device,
the seeds, the model and optimizer a recipe names, the learning-rate warmup, the checkpoint
cadence and resume, the run record and the metrics file.

`trainer.pretrain.loop` and `trainer.rl.loop` are written on top of this module; neither imports
the other. Output folder of a run::

    run.json         resolved recipe, versions, seed, world size, resumed_from_step (rewritten by each launch)
    metrics.jsonl    one line per optimizer step (rank 0)
    checkpoints/     see trainer.checkpoint
    tensorboard/     with rl.tensorboard = true (rank 0)
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import torch
import torch.distributed as dist
from torch import nn

from trainer.checkpoint import Checkpointer, TrainerState

if TYPE_CHECKING:
    from trainer.model import ModelConfig, Transformer
    from trainer.parallel_dims import Meshes, ParallelDims
    from trainer.recipe import OptimizerConfig, Recipe

__all__ = [
    "DTYPES",
    "RunLog",
    "Runtime",
    "build_model",
    "build_optimizer",
    "checkpoint_due",
    "memory_mb",
    "process_group",
    "resume",
    "seed_rank_rng",
    "set_learning_rate",
    "synchronize",
    "write_run_record",
]

DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}
"""`train.dtype` names -> compute dtypes."""


@contextmanager
def process_group(recipe: Recipe) -> Iterator[None]:
    """torchrun's process group for the recipe's world size (nothing when it is 1), destroyed on exit."""
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
        yield
    finally:
        if distributed:
            dist.destroy_process_group()


@dataclass(frozen=True, kw_only=True, slots=True)
class Runtime:
    """This process's place in a run."""

    rank: int
    """Rank in the world (0 in a plain process)."""
    world_size: int
    """Processes in the run."""
    device: torch.device
    """The CPU, or this rank's GPU."""
    out: Path
    """The run's output folder."""

    @property
    def distributed(self) -> bool:
        """Several processes: FSDP2 shards, sharded Muon, collectives."""
        return self.world_size > 1

    @classmethod
    def start(cls, recipe: Recipe) -> Self:
        """This process's runtime inside `process_group(recipe)`; rank 0 creates the output folder."""
        distributed = recipe.parallel.world_size > 1
        rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
        if recipe.launch.device == "cuda":
            device = torch.device("cuda", torch.cuda.current_device())
        else:
            device = torch.device("cpu")
        runtime = cls(rank=rank, world_size=world, device=device, out=Path(recipe.output_dir))
        if rank == 0:
            runtime.out.mkdir(parents=True, exist_ok=True)
        return runtime


def seed_rank_rng(seed: int, rank: int) -> None:
    """Seed torch's global RNG for this rank: ranks draw different numbers, runs the same ones."""
    torch.manual_seed(seed * 1_000_003 + rank)


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
    """Muon + AdamW (`trainer.optim.muon_reference`; `trainer.optim.sharded_muon` on FSDP2-sharded
    models), or AdamW alone through the same class, so both names save and resume the same way."""
    from trainer.optim.muon_reference import (
        ADAMW_ONLY_ROUTING,
        MuonWithAdamW,
        build_muon_adamw,
    )
    from trainer.optim.sharded_muon import build_sharded_muon_adamw

    if config.name == "adamw":
        return MuonWithAdamW(model.named_parameters(), layouts={}, adamw=config.adamw,
                             routing=ADAMW_ONLY_ROUTING)
    if distributed:
        return build_sharded_muon_adamw(model, muon=config.muon, adamw=config.adamw)
    return build_muon_adamw(model, muon=config.muon, adamw=config.adamw)


def set_learning_rate(
    optimizer: torch.optim.Optimizer, base_lrs: Sequence[float], *, step: int, warmup_steps: int
) -> None:
    """Set each group's lr for optimizer step `step` (1-based) from its recipe lr in `base_lrs`:
    linear warmup, then constant."""
    factor = min(1.0, step / warmup_steps) if warmup_steps else 1.0
    for group, base_lr in zip(optimizer.param_groups, base_lrs, strict=True):
        group["lr"] = base_lr * factor


def checkpoint_due(step: int, *, every: int, last: int) -> bool:
    """Whether a checkpoint follows step `step`: every `every` steps, and after the launch's last."""
    return step % every == 0 or step == last


def resume(
    checkpointer: Checkpointer, model: nn.Module, optimizer: torch.optim.Optimizer, *, like: TrainerState
) -> tuple[int | None, TrainerState]:
    """(the step of the newest complete checkpoint, the state it restored), with model, optimizer
    and RNG restored; (None, `like`) when there is none. `like` (the fresh state) names the keys."""
    latest = checkpointer.latest_step()
    if latest is None:
        return None, like
    return latest, checkpointer.load(latest, model, optimizer, like=like)


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work, so that wall time measures it (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def memory_mb(device: torch.device) -> float:
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


def write_run_record(recipe: Recipe, out: Path, *, resumed_from: int | None) -> None:
    """run.json: the resolved recipe, seed, world size, the checkpoint resumed from and the versions."""
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


class RunLog:
    """Rank 0's record of a launch: run.json written, metrics.jsonl opened for appending (lines past
    the step being resumed dropped: a run that died after its last checkpoint logged steps that are
    about to run again), and TensorBoard if asked. On other ranks every method does nothing."""

    def __init__(self, recipe: Recipe, runtime: Runtime, *, resumed_from: int | None, step: int,
                 tensorboard: bool = False) -> None:
        self._metrics: Any = None
        self._writer: Any = None
        if runtime.rank != 0:
            return
        write_run_record(recipe, runtime.out, resumed_from=resumed_from)
        path = runtime.out / "metrics.jsonl"
        if path.exists():
            kept = [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] <= step]
            path.write_text("".join(line + "\n" for line in kept))
        self._metrics = open(path, "a", buffering=1)  # noqa: SIM115 (open for the run; `close` closes it)
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(runtime.out / "tensorboard"))

    def write(self, line: dict[str, Any]) -> None:
        """One metrics line (it carries its ``step``)."""
        if self._metrics is not None:
            self._metrics.write(json.dumps(line) + "\n")

    def scalars(self, prefix: str, line: dict[str, Any], keys: Sequence[str]) -> None:
        """`keys` of `line` to TensorBoard as ``prefix/key`` at the line's step (with tensorboard on)."""
        if self._writer is not None:
            for key in keys:
                self._writer.add_scalar(f"{prefix}/{key}", line[key], line["step"])

    def close(self) -> None:
        if self._metrics is not None:
            self._metrics.close()
        if self._writer is not None:
            self._writer.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

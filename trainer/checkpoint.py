"""Checkpoints with torch.distributed.checkpoint (DCP): model, optimizer, step, data position and
every rank's RNG state, one folder per step.

Layout under the checkpoint folder::

    step_000010/            complete checkpoints only
        .metadata, __*.distcp   written by DCP (each rank writes its own shards)
        manifest.json           written last, by rank 0: step, world_size
    .step_000020.partial/   a save in progress, or one that died; never read

A save goes into the hidden partial folder and is renamed to its final name after every rank has
written and rank 0 has written the manifest, so a crash never leaves a checkpoint that looks
complete. `latest_step()` reads only folders with a manifest.

Model and optimizer are saved through `get_state_dict`, so sharded (FSDP2) and plain models give
the same keys; DCP could reshard them to another world size, but the per-rank RNG states tie a
checkpoint to the world size that wrote it, and loading checks that.
"""

from __future__ import annotations

import json
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

__all__ = ["CheckpointConfig", "Checkpointer", "TrainerState"]

_STEP_DIR = re.compile(r"^step_(\d{6,})$")


@dataclass(kw_only=True, slots=True)
class CheckpointConfig:
    """When checkpoints are written and how many are kept."""

    every: int = 100
    """Save after every this many optimizer steps (and always after the last step)."""
    keep: int = 2
    """Newest checkpoints kept; older ones are deleted after a save."""

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError(f"every must be >= 1, got {self.every}")
        if self.keep < 1:
            raise ValueError(f"keep must be >= 1, got {self.keep}")


@dataclass(kw_only=True, slots=True)
class TrainerState:
    """What a checkpoint restores besides model and optimizer."""

    step: int
    """Optimizer steps taken."""
    data: dict[str, Any]
    """The data loader's `state_dict()` (its position in the token stream)."""


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def _barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def _dcp(operation: Any, state: dict[str, Any], path: Path) -> None:
    """`dcp.save` or `dcp.load`; without a process group, a single-process one."""
    if dist.is_initialized():
        operation(state, checkpoint_id=path)
        return
    with warnings.catch_warnings():
        # DCP warns on every single-process use; here that is the plain (world_size 1) run, on purpose.
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        operation(state, checkpoint_id=path, no_dist=True)


def _rng_state() -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"])


class Checkpointer:
    """Saves and loads the checkpoints of one run under `directory`."""

    def __init__(self, directory: Path, config: CheckpointConfig) -> None:
        self.directory = Path(directory)
        self.config = config

    def _path(self, step: int) -> Path:
        return self.directory / f"step_{step:06d}"

    def steps(self) -> list[int]:
        """Steps of the complete checkpoints, ascending."""
        if not self.directory.is_dir():
            return []
        found = []
        for child in self.directory.iterdir():
            match = _STEP_DIR.match(child.name)
            if match and (child / "manifest.json").is_file():
                found.append(int(match.group(1)))
        return sorted(found)

    def latest_step(self) -> int | None:
        """Step of the newest complete checkpoint, or None."""
        steps = self.steps()
        return steps[-1] if steps else None

    def _state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        model_state, optim_state = get_state_dict(model, optimizer)
        # Each rank has its own key, so DCP keeps every rank's RNG state instead of deduplicating.
        return {"model": model_state, "optimizer": optim_state, f"rng_rank{_rank()}": _rng_state()}

    def save(self, state: TrainerState, model: nn.Module, optimizer: torch.optim.Optimizer) -> Path:
        """Write the checkpoint of `state.step` (every rank must call this); returns its folder."""
        final = self._path(state.step)
        partial = self.directory / f".{final.name}.partial"
        if _rank() == 0:
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
        _barrier()
        to_save = self._state(model, optimizer)
        to_save["trainer"] = {"step": state.step, "data": state.data}
        _dcp(dcp_save, to_save, partial)
        _barrier()
        if _rank() == 0:
            manifest = {"step": state.step, "world_size": _world_size()}
            (partial / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
            shutil.rmtree(final, ignore_errors=True)
            partial.rename(final)
            for old in self.steps()[: -self.config.keep]:
                shutil.rmtree(self._path(old))
        _barrier()
        return final

    def load(
        self, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, *, like: TrainerState
    ) -> TrainerState:
        """Restore model, optimizer and this rank's RNG from the checkpoint of `step`, and return its
        trainer state; `like` (the fresh state) names the keys to read."""
        path = self._path(step)
        manifest = json.loads((path / "manifest.json").read_text())
        if manifest["world_size"] != _world_size():
            raise ValueError(
                f"checkpoint {path} was written by world_size {manifest['world_size']};"
                f" resuming it needs the same world_size, not {_world_size()}"
            )
        to_load = self._state(model, optimizer)
        to_load["trainer"] = {"step": like.step, "data": dict(like.data)}
        _dcp(dcp_load, to_load, path)
        set_state_dict(model, optimizer, model_state_dict=to_load["model"],
                       optim_state_dict=to_load["optimizer"])
        _set_rng_state(to_load[f"rng_rank{_rank()}"])
        trainer = to_load["trainer"]
        return TrainerState(step=int(trainer["step"]), data=dict(trainer["data"]))

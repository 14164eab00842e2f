"""Training recipes: a TOML file loaded into the typed configs of the modules that own them.

A recipe has top-level keys ``mode``, ``seed`` and ``output_dir`` and the sections

    [launch]     LaunchConfig      (this module)            device and process counts
    [parallel]   ParallelDims      (trainer.parallel_dims)  world_size is derived from [launch]
    [model]      ModelConfig       (trainer.model)          ``preset`` plus any field to override
    [data]       DataConfig        (trainer.pretrain.data)
    [optimizer]  OptimizerConfig   (this module)            with [optimizer.muon], [optimizer.adamw]
    [train]      TrainConfig       (this module)
    [checkpoint] CheckpointConfig  (trainer.checkpoint)
    [rl]         RLConfig          (trainer.rl.config)      with [rl.policy], [rl.generator], [rl.reward],
                                                            [rl.curriculum], [rl.kl]

Both modes load through taskforge's one strict loader (``typed_config``): unknown keys are errors
that name the key and list the valid ones, and a value of the wrong type names its field.
``--set section.key=value`` overrides (TOML values: strings are quoted) are applied to the raw
table before it is typed. This module holds configs and their loading only; the loops are
`trainer.pretrain.loop` and `trainer.rl.loop`.
"""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taskforge import checked_value, typed_config
from trainer.checkpoint import CheckpointConfig
from trainer.model import ModelConfig, config_from_preset
from trainer.optim.muon_reference import AdamWConfig, MuonConfig
from trainer.parallel_dims import ParallelDims
from trainer.pretrain.data import ByteTokenizer, DataConfig
from trainer.rl.config import RLConfig, rl_config

__all__ = ["MODES", "LaunchConfig", "OptimizerConfig", "Recipe", "TrainConfig", "apply_overrides", "load_recipe",
           "recipe_from_dict"]

MODES = ("pretrain", "rl")
"""Training modes a recipe can name: continued pretraining (needs [data]) and RL on mined tasks
(needs [rl]; trainer.rl.loop)."""

_DEVICES = {"cpu": "gloo", "cuda": "nccl"}
_OPTIMIZERS = ("muon", "adamw")
_DTYPES = ("float32", "bfloat16")


@dataclass(kw_only=True, slots=True)
class LaunchConfig:
    """Where the processes run and how many there are."""

    device: str = "cpu"
    """"cpu" (gloo process groups) or "cuda" (nccl, one GPU per process)."""
    nnodes: int = 1
    """Machines; the launcher starts single-node runs itself (see recipes/train/README.md)."""
    nproc_per_node: int = 1
    """Processes per machine; with nnodes, the world size."""

    def __post_init__(self) -> None:
        if self.device not in _DEVICES:
            raise ValueError(f"device must be one of {sorted(_DEVICES)}, got {self.device!r}")
        if self.nnodes < 1:
            raise ValueError(f"nnodes must be >= 1, got {self.nnodes}")
        if self.nproc_per_node < 1:
            raise ValueError(f"nproc_per_node must be >= 1, got {self.nproc_per_node}")

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @property
    def backend(self) -> str:
        """The torch.distributed backend of `device`."""
        return _DEVICES[self.device]


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

    @property
    def last_step(self) -> int:
        """The step this launch ends after: `stop_at_step`, else `steps`."""
        return self.stop_at_step or self.steps


@dataclass(kw_only=True, slots=True)
class Recipe:
    """One training run, fully typed; `to_dict()` is the resolved form recorded beside the output."""

    mode: str
    """What the trainer does; one of MODES."""
    seed: int = 0
    """Seeds the weights, the data order and each rank's RNG."""
    output_dir: str
    """Metrics, checkpoints and run records go here (relative paths are from the working folder)."""
    launch: LaunchConfig
    """Processes and device."""
    parallel: ParallelDims
    """Parallel degrees."""
    model_preset: str
    """Name of the preset `model` started from."""
    model: ModelConfig
    """The architecture after overrides."""
    data: DataConfig | None
    """The token stream (pretrain)."""
    optimizer: OptimizerConfig
    """Muon + AdamW (or AdamW alone) and the learning-rate warmup."""
    train: TrainConfig
    """Steps, dtype, loss terms."""
    checkpoint: CheckpointConfig
    """Checkpoint cadence."""
    rl: RLConfig | None = None
    """The RL loop (mode rl)."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if not self.output_dir:
            raise ValueError("output_dir must not be empty")
        if self.mode == "rl" and self.rl is None:
            raise ValueError("mode rl needs an [rl] section")
        if self.mode == "pretrain" and self.data is None:
            raise ValueError("mode pretrain needs a [data] section")
        if self.mode == "rl" and self.parallel.cp != 1:
            raise ValueError("mode rl does not split sequences: parallel.cp must be 1")
        if self.rl is not None and self.rl.policy.kind == "hf" and self.parallel.ep != 1:
            raise ValueError(f"rl.policy.kind hf is sharded with FSDP2 only (its experts are not dispatched): "
                             f"parallel.ep must be 1, got {self.parallel.ep}")
        if self.rl is not None and self.rl.tasks_per_step % self.parallel.world_size:
            raise ValueError(f"rl.tasks_per_step ({self.rl.tasks_per_step}) must divide by the world size "
                             f"({self.parallel.world_size})")
        dims, data, model = self.parallel, self.data, self.model
        if ByteTokenizer.vocab_size > model.vocab_size:
            raise ValueError(
                f"model.vocab_size ({model.vocab_size}) is smaller than the tokenizer's"
                f" ({ByteTokenizer.vocab_size})"
            )
        if model.n_experts % dims.ep:
            raise ValueError(f"parallel.ep ({dims.ep}) must divide model.n_experts ({model.n_experts})")
        if data is None:
            return
        if data.seq_len > model.max_seq_len:
            raise ValueError(f"data.seq_len ({data.seq_len}) exceeds model.max_seq_len ({model.max_seq_len})")
        if data.seq_len % dims.cp:
            raise ValueError(f"data.seq_len ({data.seq_len}) must be divisible by parallel.cp ({dims.cp})")
        if data.global_batch % dims.dp:
            raise ValueError(
                f"data.global_batch ({data.global_batch}) must be divisible by parallel.dp_replicate"
                f" ({dims.dp_replicate}) * parallel.dp_shard ({dims.dp_shard}) = {dims.dp}"
            )
        if self.train.dtype == "bfloat16" and (self.launch.device == "cpu" or dims.world_size == 1):
            # bf16 compute is FSDP2's mixed precision: sharded float32 weights, bf16 all-gathers.
            raise ValueError("train.dtype bfloat16 needs launch.device cuda and a world_size above 1")

    def to_dict(self) -> dict[str, Any]:
        """The resolved recipe as plain data (presets expanded, defaults filled in)."""
        return dataclasses.asdict(self)


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of `raw` with each "dotted.key=value" set; value is TOML ("text" needs its quotes)."""
    import copy

    result = copy.deepcopy(raw)
    for override in overrides:
        key, sep, text = override.partition("=")
        if not sep or not key:
            raise ValueError(f"override {override!r} must look like section.key=value")
        try:
            value = tomllib.loads(f"value = {text}")["value"]
        except tomllib.TOMLDecodeError as err:
            raise ValueError(f"override {override!r}: {text!r} is not a TOML value (quote strings): {err}") from None
        *sections, leaf = key.split(".")
        table = result
        for section in sections:
            table = checked_value(f"{section} (in override {override!r})", table.setdefault(section, {}),
                             dict[str, Any])
        table[leaf] = value
    return result


def recipe_from_dict(raw: dict[str, Any]) -> Recipe:
    """Type a raw recipe table (as read from TOML)."""
    sections = {"launch", "parallel", "model", "data", "optimizer", "train", "checkpoint", "rl"}
    top = {"mode", "seed", "output_dir"}
    unknown = sorted(set(raw) - sections - top)
    if unknown:
        raise ValueError(f"unknown key {unknown[0]}; valid keys: {', '.join(sorted(sections | top))}")
    for name in ("mode", "output_dir"):
        if name not in raw:
            raise ValueError(f"missing key {name}")
    launch = typed_config(LaunchConfig, raw.get("launch", {}), "launch")
    parallel = typed_config(ParallelDims, raw.get("parallel", {}), "parallel", world_size=launch.world_size)

    model_table = dict(raw.get("model", {}))
    preset = model_table.pop("preset", None)
    if preset is None:
        raise ValueError("missing key model.preset")
    checked_value("model.preset", preset, str)
    model_hints = typing.get_type_hints(ModelConfig)
    unknown = sorted(set(model_table) - set(model_hints))
    if unknown:
        raise ValueError(f"unknown key model.{unknown[0]}; valid keys: preset, {', '.join(sorted(model_hints))}")
    model = config_from_preset(
        preset, **{name: checked_value(f"model.{name}", value, model_hints[name]) for name, value in model_table.items()}
    )

    optimizer_table = dict(raw.get("optimizer", {}))
    muon = typed_config(MuonConfig, optimizer_table.pop("muon", {}), "optimizer.muon")
    adamw = typed_config(AdamWConfig, optimizer_table.pop("adamw", {}), "optimizer.adamw")
    optimizer = typed_config(OptimizerConfig, optimizer_table, "optimizer", muon=muon, adamw=adamw)

    return Recipe(
        mode=checked_value("mode", raw["mode"], str),
        seed=checked_value("seed", raw.get("seed", 0), int),
        output_dir=checked_value("output_dir", raw["output_dir"], str),
        launch=launch,
        parallel=parallel,
        model_preset=preset,
        model=model,
        data=typed_config(DataConfig, raw["data"], "data") if "data" in raw or raw.get("mode") != "rl" else None,
        optimizer=optimizer,
        train=typed_config(TrainConfig, raw.get("train", {}), "train"),
        checkpoint=typed_config(CheckpointConfig, raw.get("checkpoint", {}), "checkpoint"),
        rl=rl_config(raw["rl"]) if "rl" in raw else None,
    )


def load_recipe(path: Path, overrides: Sequence[str] = ()) -> Recipe:
    """Read a TOML recipe, apply `overrides`, and type it."""
    with open(path, "rb") as file:
        raw = tomllib.load(file)
    return recipe_from_dict(apply_overrides(raw, overrides))

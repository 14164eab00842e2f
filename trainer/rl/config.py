"""The ``[rl]`` section of a training recipe: the loop's own keys, and one table per part.

    [rl]             RLConfig          tasks, episode shape, the PPO update, the sandbox
    [rl.policy]      PolicyConfig      which model is the policy (the trainer's, or a Hugging Face LM)
    [rl.generator]   GeneratorConfig   who samples the messages, and how (tokens, temperature)
    [rl.reward]      RewardConfig      the in-process scorer or a reward server
    [rl.curriculum]  CurriculumConfig  the solve-rate band and window
    [rl.kl]          KLConfig          the textual-feedback KL: weight, divergence, chunk size

`rl_config` types the table with taskforge's strict loader (`typed_config`): an unknown key or a
wrong type names its field. The keys of the flat ``[rl]`` of earlier recipes (``kl_coef``,
``policy = "hf"``, ...) are refused with where each one moved (`MOVED`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from taskforge import checked_value, is_uri, typed_config
from trainer.rl.kl import KL_KINDS

__all__ = [
    "GENERATORS",
    "MOVED",
    "POLICIES",
    "CurriculumConfig",
    "GeneratorConfig",
    "KLConfig",
    "PolicyConfig",
    "RLConfig",
    "RewardConfig",
    "rl_config",
]

POLICIES = ("trainer", "hf")
GENERATORS = ("local", "openai", "gold")
_REWARD_MODES = ("binary", "partial")


@dataclass(kw_only=True, slots=True)
class PolicyConfig:
    """``[rl.policy]``: the model being trained."""

    kind: str = "trainer"
    """trainer (the recipe's [model], byte tokenizer) or hf (a Hugging Face causal LM, FSDP2 with several processes;
    [model] is then unused)."""
    model_dir: str = ""
    """kind hf: a local folder holding a saved model and its tokenizer (``save_pretrained``)."""
    model_config: dict[str, Any] = field(default_factory=dict)
    """kind hf, instead of model_dir: a transformers config (``model_type`` and its fields) for a
    model with random weights drawn from the recipe's ``seed``."""
    tokenizer_dir: str = ""
    """kind hf: the tokenizer's local folder; empty: model_dir."""

    def __post_init__(self) -> None:
        if self.kind not in POLICIES:
            raise ValueError(f"rl.policy.kind must be one of {', '.join(POLICIES)}, got {self.kind!r}")
        if self.kind == "hf":
            if bool(self.model_dir) == bool(self.model_config):
                raise ValueError("rl.policy.kind hf needs exactly one of rl.policy.model_dir and "
                                 "rl.policy.model_config")
            if self.model_config and not (self.tokenizer_dir and "model_type" in self.model_config):
                raise ValueError("rl.policy.model_config needs a model_type and rl.policy.tokenizer_dir")
        elif self.model_dir or self.model_config or self.tokenizer_dir:
            raise ValueError("rl.policy.model_dir, model_config and tokenizer_dir need rl.policy.kind hf")


@dataclass(kw_only=True, slots=True)
class GeneratorConfig:
    """``[rl.generator]``: who writes the assistant messages of the rollouts, and how."""

    kind: str = "local"
    """local (this process; ``model.generate`` for an hf policy), openai (an OpenAI-compatible
    completions server serving the hf policy's weights), or gold (each episode replays its task's
    gold patch: a check of the environment, rewards, curriculum and task growth; `trainer.rl.gold`)."""
    max_new_tokens: int = 128
    """Tokens per assistant message."""
    temperature: float = 1.0
    """Messages are sampled from softmax(logits / temperature)."""
    url: str = ""
    """kind openai: the server's base URL, e.g. http://localhost:8000/v1."""
    model: str = ""
    """kind openai: the model name the server serves."""
    api_key_env: str = "TASKFORGE_GENERATOR_API_KEY"
    """kind openai: environment variable holding the server's API key (unset: none)."""
    sync: str = ""
    """kind openai: "package.module:function" called with the model at the start and after every
    update, to put the weights on the server; empty: the server keeps its own weights."""

    def __post_init__(self) -> None:
        if self.kind not in GENERATORS:
            raise ValueError(f"rl.generator.kind must be one of {', '.join(GENERATORS)}, got {self.kind!r}")
        if self.max_new_tokens < 1:
            raise ValueError(f"rl.generator.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature <= 0:
            raise ValueError(f"rl.generator.temperature must be > 0, got {self.temperature}")
        if self.kind == "openai" and not (self.url and self.model):
            raise ValueError("rl.generator.kind openai needs rl.generator.url and rl.generator.model")


@dataclass(kw_only=True, slots=True)
class RewardConfig:
    """``[rl.reward]``: where an episode's reward comes from."""

    mode: str = "binary"
    """The scorer's reward: binary (every graded test passes) or partial."""
    server: str = ""
    """URL of a reward server (``taskforge serve``); empty: an in-process scorer."""
    api_key_env: str = "TASKFORGE_API_KEY"
    """Environment variable holding the reward server's API key."""
    concurrency: int = 1
    """Scorings the in-process scorer runs at once."""

    def __post_init__(self) -> None:
        if self.mode not in _REWARD_MODES:
            raise ValueError(f"rl.reward.mode must be one of {', '.join(_REWARD_MODES)}, got {self.mode!r}")
        if self.concurrency < 1:
            raise ValueError(f"rl.reward.concurrency must be >= 1, got {self.concurrency}")


@dataclass(kw_only=True, slots=True)
class CurriculumConfig:
    """``[rl.curriculum]``: which tasks are sampled (`trainer.rl.curriculum`)."""

    low: float = 0.1
    """Lower edge of the band of recent solve rates that is sampled most."""
    high: float = 0.9
    """Upper edge of the band."""
    window: int = 8
    """Recent rewards per task that its solve rate is taken over."""
    request_harder: bool = False
    """Ask for harder tasks of a repository whose tasks saturate (`trainer.rl.growth`): a request
    record in the first task folder, which a miner following it (``taskforge mine --follow``) serves."""
    saturated_at: float = 0.0
    """A repository saturates when every one of its tasks is seen and their mean solve rate reaches
    this; 0: the band's ``high``."""
    min_seen: int = 1
    """A repository needs at least this many tasks seen before it can saturate."""
    request_tasks: int = 5
    """Tasks one request asks for."""
    request_strategies: list[str] = field(default_factory=lambda: ["feature", "module"])
    """Removal strategies the request asks for."""
    request_difficulty: str = "hard"
    """Difficulty band the request asks for (easy, medium, hard; empty: any)."""
    refresh_every: int = 1
    """Steps between looks at the task folders for tasks added since the run started (0: never)."""

    def __post_init__(self) -> None:
        if not 0 <= self.low < self.high <= 1:
            raise ValueError("rl.curriculum.low and rl.curriculum.high must satisfy 0 <= low < high <= 1")
        if self.window < 1:
            raise ValueError(f"rl.curriculum.window must be >= 1, got {self.window}")
        if not 0 <= self.saturated_at <= 1:
            raise ValueError(f"rl.curriculum.saturated_at must be in [0, 1], got {self.saturated_at}")
        for name in ("min_seen", "request_tasks"):
            if getattr(self, name) < 1:
                raise ValueError(f"rl.curriculum.{name} must be >= 1, got {getattr(self, name)}")
        if self.refresh_every < 0:
            raise ValueError(f"rl.curriculum.refresh_every must be >= 0, got {self.refresh_every}")
        if self.request_difficulty not in ("", "easy", "medium", "hard"):
            raise ValueError("rl.curriculum.request_difficulty must be easy, medium, hard or empty, got "
                             f"{self.request_difficulty!r}")
        if not self.request_strategies:
            raise ValueError("rl.curriculum.request_strategies may not be empty")


@dataclass(kw_only=True, slots=True)
class KLConfig:
    """``[rl.kl]``: the textual-feedback KL at hinted turns (`trainer.rl.kl`)."""

    coef: float = 0.1
    """λ: the feedback KL's weight next to the RL objective."""
    kind: str = "reverse"
    """reverse (KL(student || teacher), on-policy distillation), forward, or jsd."""
    chunk_size: int = 1024
    """Positions per chunk of the chunked KL (the [tokens × vocab] logits never exist whole)."""

    def __post_init__(self) -> None:
        if self.coef < 0:
            raise ValueError(f"rl.kl.coef must be >= 0, got {self.coef}")
        if self.kind not in KL_KINDS:
            raise ValueError(f"rl.kl.kind must be one of {', '.join(KL_KINDS)}, got {self.kind!r}")
        if self.chunk_size < 1:
            raise ValueError(f"rl.kl.chunk_size must be >= 1, got {self.chunk_size}")


@dataclass(kw_only=True, slots=True)
class RLConfig:
    """The RL loop's knobs (``[rl]`` in a training recipe, with its sections)."""

    tasks: list[str]
    """Task dataset folders (or URIs) to train on."""
    validation_fraction: float = 0.0
    """Share of repositories held out for validation (none of their tasks are trained on)."""
    tasks_per_step: int = 2
    """Tasks per step, drawn by the curriculum; with several processes it must divide by the world size."""
    rollouts_per_task: int = 2
    """Episodes per task and step: the group the advantages are relative to."""
    max_turns: int = 4
    """Assistant messages per episode."""
    clip_eps: float = 0.2
    """PPO-style ratio clipping of the policy gradient."""
    ppo_epochs: int = 1
    """Updates per batch of rollouts (the ratio is 1 in the first)."""
    test_timeout_s: float = 300.0
    """Seconds for one run_tests call of an episode, and for one scoring."""
    max_observation_chars: int = 2000
    """Longest tool message an episode shows the policy."""
    overlong_chars: int = 1500
    """The overlong-message detector's limit."""
    memory_mb: int = 2048
    """Sandbox memory for episodes and scoring."""
    tensorboard: bool = False
    """Also write the step metrics to TensorBoard (output_dir/tensorboard)."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    """[rl.policy]"""
    generator: GeneratorConfig = field(default_factory=GeneratorConfig)
    """[rl.generator]"""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """[rl.reward]"""
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    """[rl.curriculum]"""
    kl: KLConfig = field(default_factory=KLConfig)
    """[rl.kl]"""

    def __post_init__(self) -> None:
        if not self.tasks:
            raise ValueError("rl.tasks must name at least one task dataset")
        for name in ("tasks_per_step", "rollouts_per_task", "max_turns", "ppo_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"rl.{name} must be >= 1, got {getattr(self, name)}")
        if self.clip_eps <= 0:
            raise ValueError(f"rl.clip_eps must be > 0, got {self.clip_eps}")
        if not 0 <= self.validation_fraction < 1:
            raise ValueError("rl.validation_fraction must be in [0, 1)")
        if self.generator.kind == "openai" and self.policy.kind != "hf":
            raise ValueError("rl.generator.kind openai needs rl.policy.kind hf")
        if self.curriculum.request_harder and is_uri(self.tasks[0]):
            raise ValueError("rl.curriculum.request_harder writes requests into rl.tasks[0]: it must be a local folder")


_SECTIONS: dict[str, type[Any]] = {
    "policy": PolicyConfig,
    "generator": GeneratorConfig,
    "reward": RewardConfig,
    "curriculum": CurriculumConfig,
    "kl": KLConfig,
}

MOVED: dict[str, tuple[str, str]] = {
    "policy": ("policy", "kind"),
    "hf_model_dir": ("policy", "model_dir"),
    "hf_config": ("policy", "model_config"),
    "hf_tokenizer_dir": ("policy", "tokenizer_dir"),
    "generator": ("generator", "kind"),
    "max_new_tokens": ("generator", "max_new_tokens"),
    "temperature": ("generator", "temperature"),
    "generator_url": ("generator", "url"),
    "generator_model": ("generator", "model"),
    "generator_api_key_env": ("generator", "api_key_env"),
    "generator_sync": ("generator", "sync"),
    "reward_mode": ("reward", "mode"),
    "reward_server": ("reward", "server"),
    "reward_api_key_env": ("reward", "api_key_env"),
    "scorer_concurrency": ("reward", "concurrency"),
    "curriculum_low": ("curriculum", "low"),
    "curriculum_high": ("curriculum", "high"),
    "curriculum_window": ("curriculum", "window"),
    "kl_coef": ("kl", "coef"),
    "kl_kind": ("kl", "kind"),
    "kl_chunk_size": ("kl", "chunk_size"),
}
"""Key of the flat [rl] of earlier recipes -> (its section, its name there)."""


def rl_config(table: Any) -> RLConfig:
    """Type an ``[rl]`` table and its sections; a key of the old flat layout is an error that
    says where each such key went."""
    checked_value("[rl]", table, dict[str, Any])
    # "policy" and "generator" are both an old flat key (a string) and a new section (a table).
    moved = [key for key in table if key in MOVED and not (key in _SECTIONS and isinstance(table[key], dict))]
    if moved:
        where = "; ".join(f"rl.{key} moved: write it as [rl.{MOVED[key][0]}] {MOVED[key][1]}" for key in moved)
        raise ValueError(f"{where} (the [rl] keys are in sections now: {', '.join(f'[rl.{s}]' for s in _SECTIONS)};"
                         " see recipes/train/README.md)")
    sections = {name: typed_config(cls, table.get(name, {}), f"rl.{name}") for name, cls in _SECTIONS.items()}
    own = {key: value for key, value in table.items() if key not in _SECTIONS}
    return typed_config(RLConfig, own, "rl", **sections)

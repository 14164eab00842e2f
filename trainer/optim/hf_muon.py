"""Muon with AdamW for a Hugging Face causal LM: the layouts of `trainer.model.matrix_layouts`,
read from the model's config instead of the trainer's own.

The units Muon orthogonalizes, by parameter name (Llama, Qwen2/3, Mistral, Mixtral, Qwen-MoE
naming):

    self_attn.{q,k,v}_proj.weight  per head: rows [h*head_dim, (h+1)*head_dim); q has
                                   config.num_attention_heads heads, k and v num_key_value_heads
    self_attn.o_proj.weight        per head: the columns of each head
    experts.gate_up_proj  [E, 2I, D]  per expert and per half: the gate rows, then the up rows
                                   (transformers 5 stacks the experts of Mixtral and Qwen-MoE as
                                   3-D parameters, gate and up fused in one)
    experts.<name>  [E, a, b]      any other stacked expert weight (down_proj): per expert
    mlp.*proj.weight               whole: a dense MLP's gate/up/down_proj, a shared expert's, and
                                   the experts of a layout with one Linear per expert
                                   (transformers 4.x Mixtral: ``block_sparse_moe.experts.3.w1.weight``),
                                   each expert's matrices then plain matrices

The routing (`HF_ROUTING`) sends the embeddings, the lm head, the routers (``mlp.gate``,
``shared_expert_gate``), norms and biases to AdamW, the matrices above to Muon, and any other
parameter to AdamW. Under FSDP2 (several processes) the same layouts drive the sharded Muon. The head counts come from the config (`num_attention_heads`,
`num_key_value_heads`, `head_dim` or hidden_size / heads), and every layout is checked against its
parameter's shape. A model with other names (a fused ``qkv_proj``, say) needs its own rules and
layouts: its matrices would otherwise go to AdamW.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn

from trainer.model import MatrixLayout
from trainer.optim.muon_reference import (
    ADAMW_ONLY_ROUTING,
    AdamWConfig,
    MuonConfig,
    MuonWithAdamW,
    RoutingRule,
)

if TYPE_CHECKING:
    from trainer.recipe import OptimizerConfig

__all__ = ["HF_ROUTING", "StackedHalves", "build_hf_muon_adamw", "build_hf_optimizer", "hf_matrix_layouts"]

HF_ROUTING: tuple[RoutingRule, ...] = (
    RoutingRule(pattern=r"(^|\.)embed_tokens\.", algorithm="adamw"),
    RoutingRule(pattern=r"(^|\.)lm_head\.", algorithm="adamw"),
    RoutingRule(pattern=r"(^|\.)(gate|router|shared_expert_gate)\.weight$", algorithm="adamw"),
    # Gains and biases are not matrices, and decaying them towards zero only fights the model.
    RoutingRule(pattern=r"(norm\.weight|\.bias|_bias)$", algorithm="adamw", weight_decay=0.0),
    RoutingRule(pattern=r"(^|\.)self_attn\.[qkvo]_proj\.weight$", algorithm="muon"),
    RoutingRule(pattern=r"(^|\.)experts\.[A-Za-z_]*proj$", algorithm="muon"),
    # A dense MLP, a shared expert, and experts kept as one Linear each (experts.3.w1.weight).
    RoutingRule(pattern=r"(^|\.)(mlp|block_sparse_moe)\.(.+\.)?(\w*proj|w[123])\.weight$", algorithm="muon"),
    RoutingRule(pattern=r"", algorithm="adamw"),
)
"""Parameter name -> optimizer for Hugging Face decoder LMs; first match wins (see the module docstring)."""

_HEAD_ROWS = re.compile(r"(^|\.)self_attn\.([qkv])_proj\.weight$")
_HEAD_COLS = re.compile(r"(^|\.)self_attn\.o_proj\.weight$")
_FUSED_GATE_UP = re.compile(r"(^|\.)experts\.gate_up_proj$")
_STACKED_EXPERTS = re.compile(r"(^|\.)experts\.[A-Za-z_]*proj$")


@dataclass(frozen=True, kw_only=True, slots=True)
class StackedHalves:
    """A stack [E, 2a, b] of E matrices that each fuse two [a, b] matrices (gate rows, then up
    rows): 2E units, in the order (expert 0 gate, expert 0 up, expert 1 gate, ...).

    It has the methods of `trainer.model.MatrixLayout` that `MuonWithAdamW` calls (`unit_shape`,
    `split`, `merge`) and those `trainer.optim.sharded_muon` calls on FSDP2 shards (`shard_rows`,
    `shard_pieces`: a Shard(0) shard holds whole experts, so both halves of each)."""

    experts: int
    """E, the stack's first dimension."""

    @property
    def units(self) -> int:
        return 2 * self.experts

    def unit_shape(self, shape: tuple[int, ...] | torch.Size) -> tuple[int, int]:
        if len(shape) != 3 or shape[0] != self.experts or shape[1] % 2:
            raise ValueError(f"need a stack [{self.experts}, 2a, b] of fused gate/up matrices, got {tuple(shape)}")
        return shape[1] // 2, shape[2]

    def split(self, tensor: Tensor) -> Tensor:
        a, b = self.unit_shape(tensor.shape)
        return tensor.reshape(self.units, a, b)

    def merge(self, batch: Tensor, like: Tensor) -> Tensor:
        a, b = self.unit_shape(like.shape)
        if tuple(batch.shape) != (self.units, a, b):
            raise ValueError(f"batch shape {tuple(batch.shape)} != {(self.units, a, b)}")
        return batch.reshape(like.shape)

    def shard_rows(self, start: int, stop: int, full_shape: tuple[int, ...] | torch.Size) -> list[tuple[int, int, int]]:
        """Experts [start, stop) of the stack: (unit, 0, a) for both halves of each."""
        a, _ = self.unit_shape(full_shape)
        return [(2 * e + half, 0, a) for e in range(start, stop) for half in (0, 1)]

    def shard_pieces(self, local: Tensor, start: int, full_shape: tuple[int, ...] | torch.Size) -> list[tuple[int, int, Tensor]]:
        """`shard_rows` with views into `local` (experts [start, start + len))."""
        a, _ = self.unit_shape(full_shape)
        return [(2 * e + half, 0, local[e - start, half * a:(half + 1) * a])
                for e in range(start, start + local.shape[0]) for half in (0, 1)]


def _head_counts(config: Any) -> tuple[int, int, int]:
    """(query heads, key/value heads, head dim) from a transformers config."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads  # older configs: no GQA
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return heads, kv_heads, head_dim


def hf_matrix_layouts(model: nn.Module) -> dict[str, MatrixLayout | StackedHalves]:
    """Parameter name -> layout for every 2-D and 3-D parameter of a Hugging Face causal LM (see
    the module docstring). A projection whose shape does not fit the config's heads is an error
    that names it."""
    config = cast(Any, model).config
    heads, kv_heads, head_dim = _head_counts(config)
    layouts: dict[str, MatrixLayout | StackedHalves] = {}
    for name, param in model.named_parameters():
        layout: MatrixLayout | StackedHalves
        if match := _HEAD_ROWS.search(name):
            units = heads if match.group(2) == "q" else kv_heads
            if param.ndim != 2 or param.shape[0] != units * head_dim:
                raise ValueError(f"{name} {tuple(param.shape)} does not hold {units} heads of {head_dim} rows")
            layout = MatrixLayout(kind="row_blocks", units=units)
        elif _HEAD_COLS.search(name):
            if param.ndim != 2 or param.shape[1] != heads * head_dim:
                raise ValueError(f"{name} {tuple(param.shape)} does not hold {heads} heads of {head_dim} columns")
            layout = MatrixLayout(kind="col_blocks", units=heads)
        elif _FUSED_GATE_UP.search(name) and param.ndim == 3 and param.shape[2] == config.hidden_size:
            layout = StackedHalves(experts=param.shape[0])
        elif _STACKED_EXPERTS.search(name) and param.ndim == 3:
            layout = MatrixLayout(kind="stacked", units=param.shape[0])
        elif param.ndim == 2:
            layout = MatrixLayout(kind="whole", units=1)
        else:
            continue
        layout.unit_shape(param.shape)  # fail here, with the shape, if it does not fit
        layouts[name] = layout
    return layouts


def build_hf_muon_adamw(
    model: nn.Module,
    *,
    muon: MuonConfig | None = None,
    adamw: AdamWConfig | None = None,
    routing: Sequence[RoutingRule] = HF_ROUTING,
) -> MuonWithAdamW:
    """`trainer.optim.muon_reference.MuonWithAdamW` for a Hugging Face causal LM (per head, per expert)."""
    # MuonWithAdamW calls only unit_shape, split and merge, which StackedHalves has too.
    layouts = cast(Mapping[str, MatrixLayout], hf_matrix_layouts(model))
    return MuonWithAdamW(model.named_parameters(), layouts=layouts, muon=muon, adamw=adamw, routing=routing)


def build_hf_optimizer(config: OptimizerConfig, model: nn.Module, *, distributed: bool = False) -> MuonWithAdamW:
    """`trainer.runtime.build_optimizer` for a Hugging Face model: Muon + AdamW with `HF_ROUTING`,
    or AdamW alone; with `distributed`, the sharded Muon over the model's FSDP2 shards
    (`trainer.parallelize.shard_hf_model`), which orthogonalizes each head and expert once."""
    if config.name == "adamw":
        return MuonWithAdamW(model.named_parameters(), layouts={}, adamw=config.adamw, routing=ADAMW_ONLY_ROUTING)
    if distributed:
        from trainer.optim.sharded_muon import ShardedMuonWithAdamW

        layouts = cast(Mapping[str, MatrixLayout], hf_matrix_layouts(model))
        return ShardedMuonWithAdamW(model.named_parameters(), layouts=layouts, muon=config.muon, adamw=config.adamw,
                                    routing=HF_ROUTING)
    return build_hf_muon_adamw(model, muon=config.muon, adamw=config.adamw)
